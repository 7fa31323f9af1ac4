"""Shared fixtures. OMNIVOICE_TEST_BACKEND picks the ggml backend the graph tests run on (default cpu)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

# cuBLAS runs float32 products in TF32 on Ampere and later unless told not to; parity is judged in real F32.
os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
# Likewise Vulkan rounds F32 products to F16 unless its float32 shaders are chosen (omnivoice.ggml.backend).
os.environ.setdefault("OMNIVOICE_EXACT_F32", "1")


@pytest.fixture(scope="session")
def backend_spec() -> str:
    from tests.backend import BACKEND

    return BACKEND


@pytest.fixture(scope="session")
def runtime(backend_spec):
    from omnivoice.ggml import Runtime

    with Runtime(backend_spec) as rt:
        yield rt


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh random inputs per test, reproducible from the test's name."""
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _make_checkpoint(tmp_path_factory, preset: str):
    """tools/make_checkpoint.py's `preset`, seed 0, in the Hugging Face layout."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("ckpt") / preset
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_checkpoint.py"), "--preset", preset, "--seed", "0",
                    "-o", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """The tiny random-weight checkpoint in the Hugging Face layout (seed 0: what the goldens were made from)."""
    return _make_checkpoint(tmp_path_factory, "tiny")


@pytest.fixture(scope="session")
def k256_checkpoint(tmp_path_factory):
    """The k256 preset, seed 0: an LM whose rows hold whole K-quant blocks (and the int16 kernel's blocks)."""
    return _make_checkpoint(tmp_path_factory, "k256")


class _ConvertedGGUF(dict):
    """{'f32'|'f16'|'bf16'|'q8_0'|'q4_k_m': LM GGUF path, 'codec': codec GGUF path} of one checkpoint converted into
    `out`: F32 and the codec at once, another quantization when a test first asks for it (most tests use F32 alone;
    the four conversions of the tiny checkpoint took 20-30 s of the first test's setup on a busy 2-core host)."""

    QUANTS = ("f32", "f16", "bf16", "q8_0", "q4_k_m")

    def __init__(self, checkpoint, out) -> None:
        super().__init__()
        self.checkpoint, self.out = checkpoint, out
        self["codec"] = out / "omnivoice-tokenizer-F32.gguf"
        self["f32"]

    def __missing__(self, quant: str):
        import subprocess
        import sys

        if quant not in self.QUANTS:
            raise KeyError(quant)
        subprocess.run([sys.executable, "-m", "omnivoice.convert", str(self.checkpoint), "-o", str(self.out),
                        "--quant", quant], check=True, capture_output=True, cwd=ROOT)
        self[quant] = path = self.out / f"omnivoice-base-{quant.upper()}.gguf"
        return path


@pytest.fixture(scope="session")
def tiny_gguf(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint converted: {'f32'|'f16'|'bf16'|'q8_0': LM GGUF path, 'codec': codec GGUF path} (the
    quantizations other than F32 converted on first use)."""
    return _ConvertedGGUF(tiny_checkpoint, tmp_path_factory.mktemp("gguf"))


@pytest.fixture(scope="session")
def k256_gguf(k256_checkpoint, tmp_path_factory):
    """The k256 checkpoint converted, as tiny_gguf: F32 (and the codec) at once, the others on first use ('q4_k_m'
    too: its rows hold whole K-quant blocks). Its head size, 128, is one CUDA's flash attention takes; the tiny
    model's 16 is not."""
    return _ConvertedGGUF(k256_checkpoint, tmp_path_factory.mktemp("k256-gguf"))


@pytest.fixture(autouse=True)
def _signal_handlers():
    """Each test starts with the process's own SIGINT and SIGTERM handlers: a command run in this process
    (`main(argv)`) that is interrupted leaves both ignored, as a process that is exiting should (omnivoice.cli.run),
    and a later test that raises SIGINT would then see nothing."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        if h is not None and signal.getsignal(s) is not h:
            signal.signal(s, h)
