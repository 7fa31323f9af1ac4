"""The FMA kernel (omnivoice/csrc/fma.c, omnivoice.nn.fma): products, channels-last convolutions and attention
against float64 numpy, over the edges of its tiles (partial panels of outputs, partial groups of columns), the
padding of a conv, its strides and dilations, and thread counts."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice import nn
from omnivoice.nn import fma

pytestmark = pytest.mark.skipif(not fma.available(), reason="no AVX2/FMA kernel on this CPU or build")


def product(run, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    packed = fma.pack(w)
    return run(lambda ctx, ws, x: packed.product(ctx, x), {"x": x}).reshape(x.shape[0], w.shape[0])


def close_to_float64(y: np.ndarray, want: np.ndarray, K: int) -> None:
    """Within float32 rounding of a K-term sum: a few units of the last place of the terms' magnitudes."""
    assert y.shape == want.shape
    assert np.max(np.abs(y - want)) <= 4 * np.sqrt(K) * np.finfo(np.float32).eps * np.max(np.abs(want)) + 1e-30


# M: panels of 16 (AVX2) or 32 (AVX-512) outputs, some partial (8200: the audio heads); N: groups of 6 or 12
# columns, some partial; K: blocks of 256 along k, some partial
@pytest.mark.parametrize("M,K,N", [(32, 256, 12), (40, 300, 7), (8200 // 25, 1024, 13), (16, 3072, 1),
                                   (1, 5, 2), (96, 64, 500)])
def test_product_is_the_float_product(cpu_run, rng, M, K, N):
    w = rng.standard_normal((M, K)).astype(np.float32)
    x = rng.standard_normal((N, K)).astype(np.float32)
    close_to_float64(product(cpu_run, w, x), x.astype(np.float64) @ w.astype(np.float64).T, K)


def test_threads_give_the_same_bits(one_thread_cpu_run, cpu_run, rng):
    """Each output is one chain of FMAs in k order, whoever computes it and however the threads split the work."""
    w = rng.standard_normal((100, 700)).astype(np.float32)
    x = rng.standard_normal((37, 700)).astype(np.float32)
    np.testing.assert_array_equal(product(one_thread_cpu_run, w, x), product(cpu_run, w, x))


def test_nan_stays_in_its_column(cpu_run, rng):
    w = rng.standard_normal((48, 64)).astype(np.float32)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    x[3, 10] = np.nan
    y = product(cpu_run, w, x)
    assert np.all(np.isnan(y[3])) and np.all(np.isfinite(np.delete(y, 3, axis=0)))


def reference_conv(x: np.ndarray, w: np.ndarray, b, stride: int, padding: int, dilation: int) -> np.ndarray:
    """torch's Conv1d in float64: x (IC, T), w (OC, IC, K) -> (OC, T_out)."""
    (IC, T), (OC, _, K) = x.shape, w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (padding, padding)))
    t_out = (T + 2 * padding - dilation * (K - 1) - 1) // stride + 1
    y = np.zeros((OC, t_out))
    for k in range(K):
        y += w[:, :, k].astype(np.float64) @ xp[:, k * dilation: k * dilation + stride * (t_out - 1) + 1: stride]
    return y + (0 if b is None else b.astype(np.float64)[:, None])


# the DAC's convs: kernel 7 with dilations 1/3/9 and 'same' padding, kernel 1, the encoder's strided ones; channel
# counts over and under a block of 256; lengths shorter than the padding's reach; one output channel (the DAC's
# last conv: dot products), with a channel count that is not a multiple of 8
@pytest.mark.parametrize("IC,OC,K,T,stride,padding,dilation,bias", [
    (32, 1, 7, 300, 1, 3, 1, True), (13, 1, 3, 40, 2, 1, 2, False),
    (64, 64, 7, 300, 1, 3, 1, True), (32, 48, 7, 100, 1, 27, 9, True), (300, 20, 7, 41, 1, 9, 3, False),
    (64, 64, 1, 77, 1, 0, 1, True), (16, 32, 8, 200, 4, 2, 1, True), (1, 32, 7, 50, 1, 3, 1, True),
    (24, 8, 7, 5, 1, 9, 3, True)])
def test_conv_is_torchs_conv1d(cpu_run, rng, IC, OC, K, T, stride, padding, dilation, bias):
    x = rng.standard_normal((IC, T)).astype(np.float32)
    w = rng.standard_normal((OC, IC, K)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32) if bias else None
    packed = fma.pack(nn.conv_weight_cl(w).reshape(OC, K * IC))

    def build(ctx, ws, x, b=None):
        return fma.conv(ctx, x, packed, K, b, stride=stride, padding=padding, dilation=dilation)

    inputs = {"x": np.ascontiguousarray(x.T)} | ({"b": b} if bias else {})  # ggml [IC, T]: numpy (T, IC)
    y = cpu_run(build, inputs)
    want = reference_conv(x, w, b, stride, padding, dilation)
    close_to_float64(np.asarray(y).reshape(want.shape[1], OC).T, want, IC * K)


def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Softmax attention in float64, every query over every key: q (n, H, D), k and v (n, Hkv, D) -> (n, H * D);
    query head h reads kv head h // (H / Hkv)."""
    n, H, D = q.shape
    group = H // k.shape[1]
    kk, vv = (np.repeat(a.astype(np.float64), group, axis=1) for a in (k, v))
    s = np.einsum("ihd,jhd->hij", q.astype(np.float64), kk) / np.sqrt(D)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hij,jhd->ihd", p, vv).reshape(n, H * D)


def segments_attention(run, q, k, v, segments) -> np.ndarray:
    """fma.attention on each (start, length) segment of the packed positions (views, as the LM's graph takes
    them), side by side."""
    from omnivoice.models.lm import positions

    def build(ctx, ws, q, k, v):
        return nn.concat(ctx, [fma.attention(ctx, positions(ctx, q, s, n), positions(ctx, k, s, n),
                                             positions(ctx, v, s, n)) for s, n in segments], 1)

    return run(build, {"q": q, "k": k, "v": v}).reshape(q.shape[0], -1)


# D: panels of 16 (AVX2) or 32 (AVX-512) values; n: blocks of 6 or 12 queries, some partial, and panels of keys
@pytest.mark.parametrize("D,H,Hkv", [(32, 4, 2), (128, 2, 2)])
@pytest.mark.parametrize("segments", [[(0, 1)], [(0, 7), (7, 37)], [(0, 150)]])
def test_attention_is_softmax_attention(cpu_run, rng, D, H, Hkv, segments):
    L = segments[-1][0] + segments[-1][1]
    q = rng.standard_normal((L, H, D)).astype(np.float32)
    k = rng.standard_normal((L, Hkv, D)).astype(np.float32)
    v = rng.standard_normal((L, Hkv, D)).astype(np.float32)
    got = segments_attention(cpu_run, q, k, v, segments)
    want = np.concatenate([reference_attention(q[s:s + n], k[s:s + n], v[s:s + n]) for s, n in segments])
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))


def test_attention_threads_give_the_same_bits(one_thread_cpu_run, cpu_run, rng):
    q = rng.standard_normal((45, 4, 32)).astype(np.float32)
    k, v = (rng.standard_normal((45, 2, 32)).astype(np.float32) for _ in range(2))
    np.testing.assert_array_equal(segments_attention(one_thread_cpu_run, q, k, v, [(0, 45)]),
                                  segments_attention(cpu_run, q, k, v, [(0, 45)]))


def test_attention_refuses_what_it_cannot_take(cpu_run):
    from omnivoice.ggml import lib, types

    q = np.zeros((5, 3, 32), np.float32)
    k = np.zeros((5, 2, 32), np.float32)
    with pytest.raises(ValueError, match="do not fit"):
        cpu_run(lambda ctx, ws, q, k: fma.attention(ctx, q, k, k), {"q": q, "k": k})
    with pytest.raises(ValueError, match="F32"):
        cpu_run(lambda ctx, ws, q: fma.attention(ctx, q, lib.ggml_cast(ctx, q, types.F16), q), {"q": q})
