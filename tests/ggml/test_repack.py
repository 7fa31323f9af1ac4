"""Quantized matrices in the CPU backend's repack buffer (Runtime.repacks, WeightStore): the same products
through ggml's interleaved kernels, whether the matrix comes from numpy or from a memory-mapped GGUF file, and
only for the matrices the caller names (a table read by row must keep the plain layout)."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from omnivoice.ggml import Graph, WeightStore, ffi, lib, types
from omnivoice.gguf import read_gguf

ROWS, COLS, N = 64, 256, 40


def product(runtime, w, x: np.ndarray) -> np.ndarray:
    with Graph(runtime) as g:
        t = g.input("x", np.float32, x.shape)
        g.output("y", lib.ggml_mul_mat(g.ctx, w, t))
        return g.compute(x=x)["y"]                                    # [N, ROWS]


def buffer_name(t) -> str:
    return ffi.string(lib.ggml_backend_buffer_name(t.buffer)).decode()


@pytest.fixture
def q4_0(runtime, rng):
    if not runtime.repacks(types.Q4_0, [COLS, ROWS]):
        pytest.skip(f"{runtime.device.spec} has no repacked Q4_0 product")
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    return w, gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_0)


def test_repacked_product_equals_the_plain_one(runtime, rng, q4_0):
    w, _ = q4_0
    x = rng.standard_normal((N, COLS)).astype(np.float32)
    with WeightStore.from_arrays(runtime, {"w": ("q4_0", w)}, repack=lambda _: True) as packed, \
            WeightStore.from_arrays(runtime, {"w": ("q4_0", w)}) as plain:
        assert buffer_name(packed["w"]) == runtime.weight_buffer(types.Q4_0, [COLS, ROWS])
        assert buffer_name(plain["w"]) not in runtime.extra_buffer_types
        y, y_plain = product(runtime, packed["w"], x), product(runtime, plain["w"], x)
    # Both round x to Q8_0 and sum the same integer products; only the order of the float scalings differs.
    scale = np.abs(y_plain).max()
    assert np.abs(y - y_plain).max() / scale < 1e-5
    wq = gguf.quants.dequantize(gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_0),
                                gguf.GGMLQuantizationType.Q4_0)
    assert np.abs(y - x @ wq.T).max() / scale < 2e-2                  # x as Q8_0: about 1 % of the scale


@pytest.mark.parametrize("n", [1, N])
def test_amx_product_equals_the_plain_one(runtime, rng, n):
    """Q8_0 in ggml's AMX buffer (Runtime.weight_buffer on CPUs with AMX): one column (its AVX512-VNNI path) and
    many (AMX tiles). GCC 12.2 built the tiles' configuration from zeros and stack garbage, and the many-column
    product died of a general-protection fault (vendor/ggml/patches/0016)."""
    if runtime.weight_buffer(types.Q8_0, [COLS, ROWS]) != "AMX":
        pytest.skip(f"{runtime.device.spec}: no AMX buffer for Q8_0 (no AMX, or a build without its kernels)")
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x = rng.standard_normal((n, COLS)).astype(np.float32)
    with WeightStore.from_arrays(runtime, {"w": ("q8_0", w)}, repack=lambda _: True) as packed, \
            WeightStore.from_arrays(runtime, {"w": ("q8_0", w)}) as plain:
        assert buffer_name(packed["w"]) == "AMX" and buffer_name(plain["w"]) != "AMX"
        y, y_plain = product(runtime, packed["w"], x), product(runtime, plain["w"], x)
    assert np.abs(y - y_plain).max() / np.abs(y_plain).max() < 1e-5


def mapped(runtime, f, repack):
    """The tensors of GGUF file `f` in a store that may use the file's memory map in place."""
    store = WeightStore(runtime, f.path, f.metadata, region=f.data)
    for t in f.tensors:
        store.add(t.name, t.tensor_type, t.shape, t.data)
    store.upload(in_place=True, repack=repack)
    return store


def test_mapped_file_repacks_its_matrices_only(runtime, rng, q4_0, tmp_path):
    w, packed_bytes = q4_0
    path = tmp_path / "q4.gguf"
    writer = gguf.GGUFWriter(str(path), "test")
    writer.add_tensor("w", packed_bytes, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    writer.add_tensor("norm", rng.standard_normal(COLS).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    x = rng.standard_normal((N, COLS)).astype(np.float32)
    f = read_gguf(str(path))
    with mapped(runtime, f, lambda _: True) as store, mapped(runtime, f, None) as plain:
        assert buffer_name(store["w"]) == "CPU_REPACK"
        assert buffer_name(store["norm"]) == buffer_name(plain["norm"]) == buffer_name(plain["w"])
        y, y_plain = product(runtime, store["w"], x), product(runtime, plain["w"], x)
    assert np.abs(y - y_plain).max() / np.abs(y_plain).max() < 1e-5




def test_tables_read_by_row_keep_their_layout(runtime, rng, q4_0):
    w, _ = q4_0
    ids = np.array([3, 0, 63, 3], np.int32)
    with WeightStore.from_arrays(runtime, {"emb": ("q4_0", w), "w": ("q4_0", w)},
                                 repack=lambda name: name != "emb") as store:
        assert buffer_name(store["emb"]) != "CPU_REPACK" and buffer_name(store["w"]) == "CPU_REPACK"
        with Graph(runtime) as g:
            t = g.input("ids", np.int32, ids.shape)
            g.output("rows", lib.ggml_get_rows(g.ctx, store["emb"], t))
            rows = g.compute(ids=ids)["rows"]
    wq = gguf.quants.dequantize(gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_0),
                                gguf.GGMLQuantizationType.Q4_0)
    np.testing.assert_array_equal(rows, wq[ids])
