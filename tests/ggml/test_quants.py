"""ggml's quantization through the binding: bytes checked against gguf-py's independent numpy codecs, and the
CPU backend's matrix product and row gather on every type the K-quant schemes store."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from omnivoice.ggml import Graph, Runtime, WeightStore, lib
from omnivoice.ggml import quants

K_TYPES = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


def ggml_type(name: str) -> int:
    return getattr(lib, f"GGML_TYPE_{name}")


@pytest.fixture
def weights(rng) -> np.ndarray:
    return (rng.standard_normal((16, 512)) * 0.05).astype(np.float32)


@pytest.mark.parametrize("name", ["Q8_0", "BF16"])
def test_bytes_equal_gguf_py(weights, name):
    """gguf-py quantizes these two in numpy as ggml's reference code does; ggml's own bytes must be the same."""
    ours = quants.quantize(weights, ggml_type(name))
    ref = gguf.quants.quantize(weights, gguf.GGMLQuantizationType[name])
    assert ours.tobytes() == ref.tobytes()


@pytest.mark.parametrize("name", K_TYPES + ("Q8_0",))
def test_dequantize_agrees_with_gguf_py_and_is_close(weights, name):
    data = quants.quantize(weights, ggml_type(name))
    assert data.nbytes == quants.row_bytes(ggml_type(name), 512) * 16
    back = quants.dequantize(data, ggml_type(name), weights.size).reshape(weights.shape)
    ref = gguf.quants.dequantize(data.reshape(16, -1), gguf.GGMLQuantizationType[name])
    np.testing.assert_array_equal(back, ref)
    # relative RMS error of the round trip, loose per type (2 bits ... 8 bits)
    bound = {"Q2_K": 0.5, "Q3_K": 0.25, "Q4_K": 0.12, "Q5_K": 0.06, "Q6_K": 0.03, "Q8_0": 0.01}[name]
    err = np.sqrt(np.mean((back - weights) ** 2) / np.mean(weights ** 2))
    assert 0 < err < bound


def test_refusals(weights):
    with pytest.raises(ValueError, match="blocks of 256"):
        quants.quantize(weights[:, :100], ggml_type("Q4_K"))
    with pytest.raises(ValueError, match="importance matrix"):
        quants.quantize(weights, ggml_type("IQ2_XXS"))
    with pytest.raises(ValueError, match="do not hold"):
        quants.dequantize(np.zeros(10, np.uint8), ggml_type("Q4_K"), 256)
    with pytest.raises(ValueError, match="do not hold"):
        quants.dequantize(weights, ggml_type("F32"), weights.size - 1)


def test_dequantize_f32_gives_its_values(weights):
    """F32, which has no to_float in ggml, reads as itself (the int16 loader packs F32 files too)."""
    np.testing.assert_array_equal(quants.dequantize(weights.view(np.uint8), ggml_type("F32"), weights.size),
                                  weights.ravel())


@pytest.mark.parametrize("name", K_TYPES + ("Q8_0", "BF16", "F16"))
def test_cpu_product_and_gather(runtime, rng, weights, name):
    """mul_mat(W, x) within the activation quantization error of the dequantized product, and get_rows exact."""
    t = ggml_type(name)
    data = weights.astype(np.float16) if name == "F16" else quants.quantize(weights, t)
    w_f32 = quants.dequantize(data, t, weights.size).reshape(weights.shape)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    ids = np.array([5, 0, 15, 5], np.int32)
    with WeightStore(runtime) as ws, Graph(runtime) as g:
        w = ws.add("w", t, [512, 16], np.asarray(data).view(np.uint8).reshape(-1))
        ws.upload()
        xt = g.input("x", np.float32, (3, 512))
        it = g.input("ids", np.int32, (4,))
        g.output("y", lib.ggml_mul_mat(g.ctx, w, xt))               # [16, 3]
        g.output("rows", lib.ggml_get_rows(g.ctx, w, it))           # [512, 4]
        g.allocate()
        out = g.compute(x=x, ids=ids)
    want = x.astype(np.float64) @ w_f32.T.astype(np.float64)       # [3, 16]
    scale = np.abs(want).max()
    np.testing.assert_allclose(out["y"].reshape(3, 16), want, atol=2e-2 * scale)
    np.testing.assert_array_equal(out["rows"].reshape(4, 512), w_f32[ids])



def test_repacked_k_quants_multiply_as_the_plain_ones(rng):
    """A K-quant file's matrices through main's repack path (WeightStore.upload's `repack`): the types ggml
    re-lays out on this CPU (Runtime.repacks: Q4_K with AVX2) go to CPU_REPACK, the others (Q6_K on x86) and the
    F32 vector stay in place in the mapped region; the products agree with the plain layout's to rounding."""
    w4 = (rng.standard_normal((64, 512)) * 0.05).astype(np.float32)
    w6 = (rng.standard_normal((16, 512)) * 0.05).astype(np.float32)
    q4, q6 = quants.quantize(w4, ggml_type("Q4_K")), quants.quantize(w6, ggml_type("Q6_K"))
    norm = rng.standard_normal(512).astype(np.float32)
    region = np.zeros(q4.nbytes + q6.nbytes + norm.nbytes + 64, np.uint8)  # stands for a mapped file
    views, at = [], 0
    for blob in (q4, norm.view(np.uint8), q6):
        at = -(-at // 32) * 32
        region[at:at + blob.nbytes] = blob
        views.append(region[at:at + blob.nbytes])
        at += blob.nbytes
    x = rng.standard_normal((5, 512)).astype(np.float32)
    out = {}
    with Runtime("cpu") as runtime:  # CPU_REPACK is the CPU backend's (a GPU runtime refuses in-place weights)
        for repack in (None, lambda name: name != "norm"):
            out[repack is not None] = _product_through_store(runtime, region, views, x, repack)
    for k in ("y4", "y6"):
        a, b = out[False][k], out[True][k]
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-5 * np.abs(a).max())


def _product_through_store(runtime, region, views, x, repack) -> dict:
    """y4, y6 of the repack test's weights uploaded in place (with `repack`), buffers as expected."""
    from omnivoice.ggml import ffi

    with WeightStore(runtime, region=region) as ws, Graph(runtime) as g:
        t4 = ws.add("w4", ggml_type("Q4_K"), [512, 64], views[0])
        tn = ws.add("norm", lib.GGML_TYPE_F32, [512], views[1])
        t6 = ws.add("w6", ggml_type("Q6_K"), [512, 16], views[2])
        ws.upload(in_place=True, repack=repack)
        where = {n: ffi.string(lib.ggml_backend_buffer_name(t.buffer)).decode()
                 for n, t in (("w4", t4), ("w6", t6), ("norm", tn))}
        for name, t in (("w4", t4), ("w6", t6)):  # the buffer Runtime.weight_buffer names, or a plain one
            want = runtime.weight_buffer(t.type, [512, t.ne[1]]) if repack is not None else None
            assert where[name] == want if want else where[name] not in runtime.extra_buffer_types, name
        assert where["norm"] not in runtime.extra_buffer_types
        xt = g.input("x", np.float32, (5, 512))
        xn = lib.ggml_mul(g.ctx, xt, tn)
        g.output("y4", lib.ggml_mul_mat(g.ctx, t4, xn))
        g.output("y6", lib.ggml_mul_mat(g.ctx, t6, xn))
        g.allocate()
        return g.compute(x=x)
