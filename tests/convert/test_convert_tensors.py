"""Every tensor of the converted GGUFs equals its safetensors source after the documented transform."""

from __future__ import annotations

import numpy as np
import pytest

from tests.convert.conftest import BASIC_QUANTS as QUANTS

EMBEDDINGS = {"llm.embed_tokens.weight", "audio_embeddings.weight"}
POS = "semantic_model.encoder.pos_conv_embed.conv"


def expected_type(name: str, ndim: int, quant: str) -> str:
    """The storage policy, restated: norms F32; embeddings and matrices follow the quant (as omnivoice.cpp's)."""
    if ndim == 1:
        return "F32"
    return {"f32": "F32", "f16": "F16", "bf16": "BF16", "q8_0": "Q8_0"}[quant]


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even (no NaNs in these weights)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def q8_0_reference(x: np.ndarray) -> np.ndarray:
    """ggml's quantize_row_q8_0_ref: per 32 values d = amax / 127, q = roundf(x / d), stored as f16 d + int8 q."""
    blocks = x.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    inv = np.where(d == 0, np.float32(0), np.float32(1) / np.where(d == 0, 1, d))
    v = blocks * inv
    a = np.abs(v)
    fl = np.floor(a)
    q = (np.sign(v) * (fl + (a - fl >= 0.5))).astype(np.int8)  # C roundf: halves away from zero
    out = np.concatenate([d.astype(np.float16).view(np.uint8), q.view(np.uint8)], axis=1)
    return out.reshape(*x.shape[:-1], -1)


@pytest.mark.parametrize("quant", QUANTS)
def test_lm_tensors_equal_source(quant, converted, parse, source_tensors):
    import gguf

    lm_src, _ = source_tensors
    g = parse(converted[quant][0])
    assert set(g.tensors) == set(lm_src) - {"codebook_layer_offsets"}
    for name, src in lm_src.items():
        if name == "codebook_layer_offsets":
            continue
        info = g.tensors[name]
        assert info.ne == tuple(reversed(src.shape)), name
        want = expected_type(name, src.ndim, quant)
        assert info.type_name == want, name
        stored = g.array(name)
        if want == "F32":
            assert np.array_equal(stored, src), name
        elif want == "F16":
            assert np.array_equal(stored, src.astype(np.float16)), name
            # and it is the nearest half: within half an f16 ulp (2^-11 relative)
            assert np.all(np.abs(stored.astype(np.float32) - src) <= np.abs(src) * 2.0 ** -11 + 2.0 ** -25), name
        elif want == "BF16":
            assert np.array_equal(stored, bf16_bits(src)), name
            back = (stored.astype(np.uint32) << 16).view(np.float32)
            assert np.all(np.abs(back - src) <= np.abs(src) * 2.0 ** -8), name
        else:
            assert np.array_equal(stored, q8_0_reference(src)), name
            deq = gguf.quants.dequantize(stored, gguf.GGMLQuantizationType.Q8_0)
            blocks = src.reshape(-1, 32)
            d = np.abs(blocks).max(axis=1, keepdims=True) / 127
            err = np.abs(deq.reshape(-1, 32) - blocks)
            assert np.all(err <= d * (0.5 + 127 * 2.0 ** -11) + 1e-12), name


def test_q8_0_quantizes_embeddings_and_leaves_norms(converted, parse):
    g = parse(converted["q8_0"][0])
    kinds = {t.type_name for n, t in g.tensors.items() if n in EMBEDDINGS}
    norms = {t.type_name for n, t in g.tensors.items() if n.endswith("norm.weight")}
    assert kinds == {"Q8_0"} and norms == {"F32"}
    assert g.value("general.quantization_version") == 2


def test_codec_tensors_equal_source_after_transforms(converted, parse, source_tensors):
    _, src = source_tensors
    g = parse(converted["f32"][1])
    dropped = {n for n in src if n.startswith(("decoder_semantic.", "fc1."))
               or n.endswith((".codebook.embed_avg", ".codebook.cluster_size", ".codebook.inited"))}
    weight_norm = {POS + ".parametrizations.weight.original0", POS + ".parametrizations.weight.original1"}
    assert set(g.tensors) == (set(src) - dropped - weight_norm) | {POS + ".weight"}
    assert {t.type_name for t in g.tensors.values()} == {"F32"}
    n_conv_t = 0
    for name, info in g.tensors.items():
        stored = g.array(name)
        if name.endswith(".conv_t1.weight"):
            w = src[name]
            ic, oc, k = w.shape
            assert info.ne == (ic, oc * k)
            for o in range(oc):
                for j in range(k):
                    assert np.array_equal(stored[o * k + j], w[:, o, j]), (name, o, j)
            n_conv_t += 1
        elif name == POS + ".weight":
            g0 = src[POS + ".parametrizations.weight.original0"].astype(np.float64)
            v = src[POS + ".parametrizations.weight.original1"].astype(np.float64)
            assert info.ne == tuple(reversed(v.shape))
            want = np.empty_like(v)
            for j in range(v.shape[2]):
                want[:, :, j] = v[:, :, j] * g0[0, 0, j] / np.linalg.norm(v[:, :, j])
            np.testing.assert_allclose(stored, want, rtol=2e-6, atol=1e-8)
        else:
            assert info.ne == tuple(reversed(src[name].shape)), name
            assert np.array_equal(stored, src[name]), name
    assert n_conv_t == 5


def test_codec_file_does_not_depend_on_lm_quant(converted):
    blobs = {converted[q][1].read_bytes() for q in QUANTS}
    assert len(blobs) == 1
