"""The AMX kernel's packing, tile indexing and edges (omnivoice/csrc/amx.c) on any x86-64 CPU: the kernel compiled
with its tile instructions done in C as Intel's manual defines them (csrc/amx_emulated.c), against numpy's
product of the same BF16-rounded operands. tests/nn/test_amx.py runs the real instructions where the CPU has AMX;
CI's machines have none."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from .test_amx import bf16

ROOT = Path(__file__).resolve().parents[2]
GGML_INCLUDE = ROOT / "vendor" / "ggml" / "src" / "ggml" / "include"
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or CC is None or not (GGML_INCLUDE / "ggml.h").is_file(),
    reason="needs an x86-64 CPU, a C compiler and the ggml sources that `build_ext.py fetch` extracts")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    from cffi import FFI

    out = tmp_path_factory.mktemp("amx-emulated") / "libamx_emulated.so"
    source = Path(__file__).parent / "csrc" / "amx_emulated.c"
    subprocess.run([CC, "-O1", "-shared", "-fPIC", "-o", str(out), str(source), f"-I{ROOT / 'omnivoice' / 'csrc'}",
                    f"-I{GGML_INCLUDE}"], check=True, capture_output=True)
    ffi = FFI()
    ffi.cdef("int64_t omnivoice_amx_packed_bytes(int64_t, int64_t);"
             "void emulated_product(const float *, int64_t, int64_t, uint16_t *, int64_t, float *, int, void *);")
    lib = ffi.dlopen(str(out))

    def product(w: np.ndarray, x: np.ndarray, nth: int) -> np.ndarray:
        (M, K), N = w.shape, x.shape[0]
        xb = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
        xb = ((xb + 0x7FFF + ((xb >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even, as ggml's cast
        y = np.full((N, M), np.nan, np.float32)
        packed = np.empty(lib.omnivoice_amx_packed_bytes(M, K), np.uint8)
        lib.emulated_product(ffi.from_buffer("float[]", np.ascontiguousarray(w, np.float32)), M, K,
                             ffi.from_buffer("uint16_t[]", xb), N, ffi.from_buffer("float[]", y), nth,
                             ffi.from_buffer(packed))
        return y

    return product


# M: units of 32 outputs (one partial: 328 = 10.25 units); N: blocks of 32 tokens, the last through the padded
# copy (13: only that one; 37: one full block and a tail); nth: threads splitting the units (more than units too)
@pytest.mark.parametrize("M,K,N,nth", [(32, 32, 32, 1), (48, 256, 13, 2), (328, 128, 37, 3), (16, 96, 1, 4),
                                       (200, 64, 70, 7)])
def test_emulated_kernel_is_the_bf16_product(emulated, rng, M, K, N, nth):
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.05
    x = rng.standard_normal((N, K)).astype(np.float32) * 3
    y = emulated(w, x, nth)
    want = bf16(x) @ bf16(w).T
    assert np.max(np.abs(y - want)) <= 1e-4 * np.sqrt(K) * 0.15  # every output written, in its place
