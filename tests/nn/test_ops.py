"""Every graph helper against an independent float64 numpy reference on fresh random inputs.

Shapes: numpy order (reversed ggml ne). A transformer activation ggml [C, T] is numpy (T, C); a conv
activation ggml [T, C] is numpy (C, T). Error bounds are stated per test: F32 paths are held to float32
rounding; F16/BF16/Q8_0 weights to the precision of their format (the CPU also rounds the activations to the
weight's format before the dot product).
"""

from __future__ import annotations

import math
import signal

import gguf
import numpy as np
import pytest
from scipy.special import erf

from omnivoice import nn
from omnivoice.gguf.layouts import conv_transpose_weight
from omnivoice.ggml import ffi, lib, types

from .test_amx import bf16


def rel_err(got, want) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)) / (np.max(np.abs(want)) + 1e-30))


# ------------------------------------------------------------------------------------------------ linear
@pytest.mark.parametrize("wtype,bound", [(None, 2e-6), ("f16", 2e-3), ("bf16", 1.5e-2), ("q8_0", 1.5e-2)])
def test_linear(run, rng, wtype, bound):
    x = rng.standard_normal((7, 64)).astype(np.float32)          # ggml [IN=64, T=7]
    w = rng.standard_normal((48, 64)).astype(np.float32)          # torch (OUT, IN)
    b = rng.standard_normal(48).astype(np.float32)
    stored = w if wtype is None else (wtype, w)
    y = run(lambda ctx, ws, x: nn.linear(ctx, x, ws["w"], ws["b"]), {"x": x}, {"w": stored, "b": b})
    if wtype in ("f16", "bf16", "q8_0"):
        qt = gguf.GGMLQuantizationType[wtype.upper()]
        w = gguf.quants.dequantize(gguf.quants.quantize(w, qt), qt)  # what the file holds
    want = x.astype(np.float64) @ w.astype(np.float64).T + b
    assert y.shape == (7, 48)
    assert rel_err(y, want) < bound


def test_linear_q8_0_is_not_f32(run, rng):
    """Guard: the Q8_0 path really quantizes (a silently-F32 store would make the bound above meaningless)."""
    w = rng.standard_normal((32, 64)).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.linear(ctx, x, ws["w"]), {"x": x}, {"w": ("q8_0", w)})
    assert 1e-5 < rel_err(y, x.astype(np.float64) @ w.T) < 1.5e-2


# ------------------------------------------------------------------------------------------------- norms
def test_rms_norm(run, rng):
    x = rng.standard_normal((5, 128)).astype(np.float32) * 3
    w = rng.uniform(0.5, 1.5, 128).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.rms_norm(ctx, x, ws["w"], 1e-6), {"x": x}, {"w": w})
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 ** 2, axis=-1, keepdims=True) + 1e-6) * w
    assert rel_err(y, want) < 1e-5


def test_rms_norm_cpu_node_is_ggmls(cpu_run, rng):
    """The one-node CPU norm (csrc/ops.c) gives ggml's RMS_NORM and MUL results, here on strided rows: the
    heads of a projection [D, H, L] viewed from a wider tensor, as q and k are normed."""
    from omnivoice.ggml import ops

    if ops is None:
        pytest.skip("a ggml build without the package's kernels")
    x = rng.standard_normal((7, 4 * 64 + 32)).astype(np.float32) * 3      # ggml [288, 7]: 4 heads of 64, then more
    w = rng.uniform(0.5, 1.5, 64).astype(np.float32)

    def heads(ctx, x):
        return lib.ggml_view_3d(ctx, x, 64, 4, 7, 64 * 4, x.nb[1], 0)          # [64, 4, 7], rows 288 apart

    ours = cpu_run(lambda ctx, ws, x: nn.rms_norm(ctx, heads(ctx, x), ws["w"], 1e-6, cpu=True), {"x": x}, {"w": w})
    ggml = cpu_run(lambda ctx, ws, x: nn.rms_norm(ctx, heads(ctx, x), ws["w"], 1e-6), {"x": x}, {"w": w})
    np.testing.assert_allclose(ours, ggml, rtol=2e-7, atol=0)
    x64 = x[:, :256].reshape(7, 4, 64).astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 ** 2, axis=-1, keepdims=True) + 1e-6) * w
    assert rel_err(ours, want) < 1e-6


@pytest.mark.parametrize("lengths", [[200, 146], [3, 1, 5, 2, 7, 1, 1, 4, 9, 2, 6, 3, 8]])
def test_concat_columns_is_numpys(cpu_run, one_thread_cpu_run, rng, lengths):
    """The CPU's memcpy concat (csrc/ops.c omnivoice_concat_cols) on 2 and 13 parts (two levels of nodes of at
    most 9 sources), on one thread and several: numpy's concatenation, bit for bit."""
    parts = {f"p{i}": rng.standard_normal((n, 24)).astype(np.float32) for i, n in enumerate(lengths)}
    want = np.concatenate(list(parts.values()))
    for run in (cpu_run, one_thread_cpu_run):
        got = run(lambda ctx, ws, **xs: nn.concat_columns(ctx, [xs[k] for k in parts]), parts)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("left,right", [(3, 3), (0, 5), (7, 0)])
def test_pad_columns_cpu_node_is_numpys(cpu_run, one_thread_cpu_run, rng, left, right):
    """The CPU's pad node (csrc/ops.c omnivoice_pad_cols, memset and memcpy) on one thread and several: numpy's
    zero padding along T of x [C, T], bit for bit, as ggml's PAD gives it."""
    from omnivoice.nn.conv import pad_columns

    x = rng.standard_normal((37, 24)).astype(np.float32)  # ggml [24, 37]
    want = np.pad(x, ((left, right), (0, 0)))
    for run in (cpu_run, one_thread_cpu_run):
        np.testing.assert_array_equal(run(lambda ctx, ws, x: pad_columns(ctx, x, left, right, cpu=True), {"x": x}),
                                      want)
    np.testing.assert_array_equal(cpu_run(lambda ctx, ws, x: pad_columns(ctx, x, left, right), {"x": x}), want)


def test_layer_norm(run, rng):
    x = (rng.standard_normal((6, 96)) * 2 + 1).astype(np.float32)
    w, b = rng.standard_normal(96).astype(np.float32), rng.standard_normal(96).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.layer_norm(ctx, x, ws["w"], ws["b"], 1e-5), {"x": x}, {"w": w, "b": b})
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w + b
    assert rel_err(y, want) < 1e-5


@pytest.mark.parametrize("groups", [1, 4, 16])
def test_group_norm(run, rng, groups):
    C, T = 16, 50
    x = (rng.standard_normal((C, T)) * 3 + rng.standard_normal((C, 1))).astype(np.float32)  # ggml [T, C]
    w, b = rng.standard_normal(C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.group_norm(ctx, x, groups, ws["w"], ws["b"], 1e-5), {"x": x}, {"w": w, "b": b})
    xg = x.astype(np.float64).reshape(groups, -1)
    norm = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(C, T)
    assert rel_err(y, norm * w[:, None] + b[:, None]) < 1e-5


# ----------------------------------------------------------------------------------------- activations
def test_gelu_erf(run, rng):
    x = (rng.standard_normal((4, 300)) * 4).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.gelu(ctx, x), {"x": x})
    x64 = x.astype(np.float64)
    assert np.max(np.abs(y - 0.5 * x64 * (1 + erf(x64 / math.sqrt(2))))) < 1e-5


def test_gelu_erf_cpu_node_is_ggmls(run, cpu_run, rng):
    """The one-node CPU GELU (csrc/ops.c: ggml's float operations with libmvec's vector erff where glibc has it)
    against ggml's GELU_ERF (another erff), over several threads' shares and an odd count: both erffs are within a
    few ulps of 1, so where 1 + erf cancels (x < -2) the two differ by a few ulps of x, not of the result."""
    x = (rng.standard_normal((37, 301)) * 4).astype(np.float32)
    x[0, :5] = [0.0, -0.0, 1e-30, -40.0, 40.0]
    ggml = run(lambda ctx, ws, x: nn.gelu(ctx, x), {"x": x})
    y = cpu_run(lambda ctx, ws, x: nn.gelu(ctx, x, cpu=True), {"x": x})
    assert np.all(np.abs(y - ggml) <= 4 * np.finfo(np.float32).eps * np.maximum(np.abs(x), 1))
    x64 = x.astype(np.float64)
    assert np.max(np.abs(y - 0.5 * x64 * (1 + erf(x64 / math.sqrt(2))))) < 1e-5


def test_gelu_erf_differs_from_tanh(run, rng):
    """The erf and tanh forms differ by ~1e-3 near |x| = 2: the test above would catch a swap."""
    x = np.linspace(-3, 3, 64, dtype=np.float32)[None]
    y = run(lambda ctx, ws, x: nn.gelu(ctx, x, exact=False), {"x": x})
    x64 = x.astype(np.float64)
    assert np.max(np.abs(y - 0.5 * x64 * (1 + erf(x64 / math.sqrt(2))))) > 1e-4


def test_swiglu(run, rng):
    x = rng.standard_normal((5, 32)).astype(np.float32)
    wg, wu = rng.standard_normal((3, 48, 32)).astype(np.float32)[:2]
    wd = rng.standard_normal((32, 48)).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.swiglu(ctx, x, ws["g"], ws["u"], ws["d"]), {"x": x},
            {"g": wg, "u": wu, "d": wd})
    x64 = x.astype(np.float64)
    g, u = x64 @ wg.T, x64 @ wu.T
    want = (g / (1 + np.exp(-g)) * u) @ wd.T
    assert rel_err(y, want) < 1e-5


def test_snake(run, rng):
    C, T = 12, 200
    x = rng.standard_normal((C, T)).astype(np.float32)            # ggml [T, C]
    alpha = rng.uniform(0.2, 2.0, (C, 1)).astype(np.float32)      # ggml [1, C]
    inv = (1.0 / (alpha.astype(np.float64) + 1e-9)).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.snake(ctx, x, ws["a"], ws["ib"]), {"x": x}, {"a": alpha, "ib": inv})
    x64 = x.astype(np.float64)
    want = x64 + np.sin(alpha * x64) ** 2 / (alpha.astype(np.float64) + 1e-9)
    assert np.max(np.abs(y - want)) < 1e-5


@pytest.mark.parametrize("cpu", ["chain", "native", "numpy"])
def test_snake_channels_last(run, cpu_run, rng, cpu, monkeypatch):
    """x [C, T] with alpha [C]: the ggml chain, and the one-node CPU version (several blocks, both threads) with
    the package's C kernel or, for builds without it, numpy: both the chain's float32 steps, numpy's to the bit
    and the C kernel's within a few ulps (another vector sin)."""
    from omnivoice.nn import conv

    if cpu == "numpy":
        monkeypatch.setattr(conv, "ops", None)
    C, T = 24, 9000
    x = (3 * rng.standard_normal((T, C))).astype(np.float32)      # ggml [C, T]
    alpha = rng.uniform(0.2, 2.0, C).astype(np.float32)
    inv = (1.0 / (alpha.astype(np.float64) + 1e-9)).astype(np.float32)
    one_node = cpu != "chain"
    y = (cpu_run if one_node else run)(lambda ctx, ws, x: nn.snake(ctx, x, ws["a"], ws["ib"], cpu=one_node),
                                       {"x": x}, {"a": alpha, "ib": inv})
    x64 = x.astype(np.float64)
    want = x64 + np.sin(alpha * x64) ** 2 / (alpha.astype(np.float64) + 1e-9)
    assert np.max(np.abs(y - want)) < 1e-5
    t = np.sin(x * alpha)
    steps = (t * t) * inv + x  # float32, step by step as the chain computes it
    if cpu == "numpy":
        np.testing.assert_array_equal(y, steps)
    elif cpu == "native":  # libmvec's sinf is within 4 ulp: sin^2 * inv_beta within 8 ulp of 1 times inv_beta
        eps = np.finfo(np.float32).eps
        assert np.all(np.abs(y - steps) <= 8 * eps * inv + np.spacing(np.abs(steps)))


def test_the_package_kernels_are_built():
    """The build makes libomnivoice-ops beside ggml (CMakeLists.txt), with the Snake kernel the codec decodes
    with on the CPU."""
    from omnivoice.ggml import ops

    assert ops is not None and ops.omnivoice_snake_rows


@pytest.mark.parametrize("fails_with", [KeyboardInterrupt, ValueError])
def test_an_exception_in_the_snake_node(one_thread_cpu_run, rng, monkeypatch, fails_with):
    """A Ctrl-C whose handler runs inside the one-node CPU Snake (the main thread computes a share of every node)
    reaches the graph's caller once ggml returns, instead of dying in the C callback; any other exception there
    is logged and poisons the node's output with NaN."""
    C, T = 24, 900
    x = rng.standard_normal((T, C)).astype(np.float32)            # ggml [C, T]
    alpha = rng.uniform(0.2, 2.0, C).astype(np.float32)
    real_sin = np.sin

    def sin(*args, **kwargs):
        if fails_with is KeyboardInterrupt:
            signal.raise_signal(signal.SIGINT)  # Python's handler raises KeyboardInterrupt in this thread
        else:
            raise fails_with("boom")
        return real_sin(*args, **kwargs)

    from omnivoice.nn import conv

    monkeypatch.setattr(conv, "ops", None)  # the numpy kernel: a Python callback, where a signal can land
    monkeypatch.setattr(np, "sin", sin)
    # one thread: the callback runs on the main thread, where Python handles signals
    run = one_thread_cpu_run
    build = lambda ctx, ws, x: nn.snake(ctx, x, ws["a"], ws["ib"], cpu=True)  # noqa: E731
    if fails_with is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            run(build, {"x": x}, {"a": alpha, "ib": alpha})
    else:
        assert np.isnan(run(build, {"x": x}, {"a": alpha, "ib": alpha})).all()


def test_embedding(run, rng):
    table = rng.standard_normal((50, 16)).astype(np.float32)     # torch (N, C) = ggml [C, N]
    ids = rng.integers(0, 50, 23).astype(np.int32)
    y = run(lambda ctx, ws, ids: nn.embedding(ctx, ws["t"], ids), {"ids": ids}, {"t": table})
    np.testing.assert_array_equal(y, table[ids])


@pytest.mark.parametrize("width,stride,offset", [(1024, 4096, 3072), (8, 12, 4), (6, 6, 0), (8, 9, 1)])
@pytest.mark.parametrize("dst", ["f32", "f16", "bf16"])
def test_set_rows_writes_f32_rows_as_numpy_rounds_them(run, rng, width, stride, offset, dst):
    """set_rows of F32 rows read through a strided view (as the LM's V rows in its q/k/v product: width 1024, row
    stride 4096, offset 3072) into F32, F16 or BF16 rows at permuted ids: every value rounded to nearest even.
    On CUDA the first two shapes take patch 0015's four-values-a-thread kernel, the others (a width or stride not
    a multiple of four, or an unaligned start) the one-value kernel."""
    L = 37
    x = rng.standard_normal((L, stride)).astype(np.float32)
    ids = rng.permutation(L).astype(np.int64)
    t = types.by_name(dst)

    def build(ctx, ws, x, ids):
        rows = lib.ggml_view_2d(ctx, x, width, L, x.nb[1], offset * 4)                          # [width, L]
        y = lib.ggml_set_rows(ctx, lib.ggml_new_tensor_2d(ctx, t, width, L), rows, ids)
        return y if t == types.F32 else lib.ggml_cast(ctx, y, types.F32)  # F16 and BF16 to F32: exact

    y = run(build, {"x": x, "ids": ids})
    rows = x[:, offset:offset + width]
    want = np.empty_like(rows)
    want[ids] = {"f32": rows, "f16": rows.astype(np.float16).astype(np.float32), "bf16": bf16(rows)}[dst]
    np.testing.assert_array_equal(y, want)


# ------------------------------------------------------------------------------------------ rope, attention
def rope_neox_ref(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
    """x (T, H, D): HF's rotate_half convention (pairs i and i + D/2)."""
    D = x.shape[-1]
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = pos[:, None].astype(np.float64) * inv[None]                # (T, D/2)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    rot = np.concatenate([-x2, x1], -1)
    return x * cos[:, None] + rot * sin[:, None]


def test_rope_neox(run, rng):
    T, H, D = 9, 3, 128
    x = rng.standard_normal((T, H, D)).astype(np.float32)         # ggml [D, H, T]
    pos = np.concatenate([np.arange(6), np.arange(3)]).astype(np.int32) * 37  # packed rows restart at 0
    y = run(lambda ctx, ws, x, pos: nn.rope_neox(ctx, x, pos, 1e6), {"x": x, "pos": pos})
    # float32 angles: at position 185 one ulp is 1.5e-5 rad, so a kernel whose angle is an ulp off (CUDA's powf:
    # 1.06e-5 on the H200) is as right as one that is not (the CPU: under 1e-5)
    assert rel_err(y, rope_neox_ref(x.astype(np.float64), pos, 1e6)) < 2e-5


def test_q_k_v_of_the_stacked_product_as_the_lm_writes_them(run, rng):
    """One layer's q and k (RMSNorm x weight, then RoPE) and v out of the stacked q/k/v product, k and v written as
    F16 rows by set_rows over row ids, built in the LM graph's order and with its heads and head size (on CUDA,
    ggml patch 0017 runs the three as one kernel): q to float32 rounding of the reference, k to F16's, v exactly
    as numpy rounds it to F16."""
    from omnivoice.models.lm import rows_as

    T, H, Hkv, D, eps, theta = 37, 16, 8, 128, 1e-6, 1e6
    qkv = rng.standard_normal((T, (H + 2 * Hkv) * D)).astype(np.float32)   # ggml [(H + 2 Hkv) D, T]
    wq, wk = (rng.uniform(0.5, 1.5, D).astype(np.float32) for _ in range(2))
    pos = (np.arange(T) * 3).astype(np.int32)

    def build(ctx, ws, qkv, pos, ids):
        def heads(first, n):                                                                  # [D, n, T]
            return lib.ggml_view_3d(ctx, qkv, D, n, T, D * 4, qkv.nb[1], first * D * 4)
        q = nn.rope_neox(ctx, nn.rms_norm(ctx, heads(0, H), ws["wq"], eps), pos, theta)
        k = nn.rope_neox(ctx, nn.rms_norm(ctx, heads(H, Hkv), ws["wk"], eps), pos, theta)
        return q, rows_as(ctx, k, types.F16, ids), rows_as(ctx, heads(H + Hkv, Hkv), types.F16, ids)

    q, k, v = run(build, {"qkv": qkv, "pos": pos, "ids": np.arange(T, dtype=np.int64)}, {"wq": wq, "wk": wk},
                  outputs=("q", "k", "v"))
    x = qkv.reshape(T, H + 2 * Hkv, D).astype(np.float64)

    def normed(x, w):
        return x / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + eps) * w

    assert rel_err(q.reshape(T, H, D), rope_neox_ref(normed(x[:, :H], wq), pos, theta)) < 2e-5
    assert k.dtype == np.float16 and v.dtype == np.float16
    assert rel_err(k.reshape(T, Hkv, D), rope_neox_ref(normed(x[:, H:H + Hkv], wk), pos, theta)) < 1e-3
    assert np.array_equal(v.reshape(T, Hkv, D), qkv.reshape(T, H + 2 * Hkv, D)[:, H + Hkv:].astype(np.float16))


def attention_ref(q, k, v, mask, scale):
    """q (T, Hq, D), k/v (S, Hkv, D), additive mask (T, S) -> (T, Hq*D)."""
    rep = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) * scale + mask[None]
    s = np.exp(s - s.max(-1, keepdims=True))
    p = s / s.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(q.shape[0], -1)


def qkv(rng, T: int, Hq: int, Hkv: int, D: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random float32 q (T, Hq, D), k and v (T, Hkv, D): ggml [D, heads, T]."""
    return tuple(rng.standard_normal((T, H, D)).astype(np.float32) for H in (Hq, Hkv, Hkv))


@pytest.mark.parametrize("flash,kv", [(False, None), (True, "f16"), (True, "f32")])
def test_attention_block_mask_gqa(run, runtime, rng, flash, kv):
    kv_type = types.by_name(kv) if kv else None
    if flash and not runtime.supports_flash_attn(128, kv_type):
        pytest.skip(f"{runtime.device.spec} has no flash attention with {kv} K/V")  # plain path tested regardless
    T, Hq, Hkv, D = 20, 4, 2, 128
    q, k, v = qkv(rng, T, Hq, Hkv, D)
    # two packed sequences of 13 and 7 positions, each attending only to itself (bidirectional)
    seg = np.array([0] * 13 + [1] * 7)
    mask = np.where(seg[:, None] == seg[None, :], 0.0, -np.inf).astype(np.float32)
    mask_in = mask.astype(np.float16) if flash else mask
    scale = 1 / math.sqrt(D)
    # the plain path as the models call it: float32 products on every backend (products_need_contiguous)
    y = run(lambda ctx, ws, q, k, v, m: nn.attention(ctx, q, k, v, m, scale, flash, kv_type,
                                                     contiguous_qk=runtime.products_need_contiguous),
            {"q": q, "k": k, "v": v, "m": mask_in})
    want = attention_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), mask, scale)
    # flash attention with F16 K/V rounds them; with F32 K/V only the summation order changes
    assert rel_err(y, want) < (3e-3 if kv == "f16" else 1e-5)


@pytest.mark.parametrize("P", [20, 150, 700])
def test_flash_attention_padded_sequences(run, runtime, rng, P):
    """ggml_flash_attn_ext as the batched engine's padded attention calls it: S sequences padded to P rows
    ([D, P, H, S] queries, F16 K/V [D, P, Hkv, S]), a mask per sequence hiding its padding keys, grouped-query
    heads; lengths that end inside a 64-key chunk and past several of them (ggml patch 0007's short kernel on
    CUDA leaves these many-sequence calls to ggml's own kernels)."""
    if not runtime.supports_flash_attn(128):
        pytest.skip(f"{runtime.device.spec} has no flash attention with F16 K/V")
    S, H, Hkv, D = 3, 4, 2, 128
    lengths = [P, max(1, P - 19), max(1, P // 2 + 3)]
    q = rng.standard_normal((S, H, P, D)).astype(np.float32)
    k = rng.standard_normal((S, Hkv, P, D)).astype(np.float16)
    v = rng.standard_normal((S, Hkv, P, D)).astype(np.float16)
    mask = np.zeros((S, 1, P, P), np.float16)  # [keys, queries, 1, S] in ggml order
    for i, n in enumerate(lengths):
        mask[i, 0, :, n:] = -np.inf
    scale = 1 / math.sqrt(D)

    def build(ctx, ws, q, k, v, m):
        out = lib.ggml_flash_attn_ext(ctx, q, k, v, m, scale, 0.0, 0.0)                      # [D, H, P, S]
        lib.ggml_flash_attn_ext_set_prec(out, lib.GGML_PREC_F32)
        return out

    y = run(build, {"q": q, "k": k, "v": v, "m": mask})                                        # (S, P, H, D)
    for i, n in enumerate(lengths):
        qi, ki, vi = (x.transpose(1, 0, 2).astype(np.float64) for x in (q[i], k[i, :, :n], v[i, :, :n]))
        want = attention_ref(qi, ki, vi, np.zeros((P, n)), scale)
        assert rel_err(y[i].reshape(P, H * D), want) < 3e-3, f"sequence {i} ({n} of {P} keys)"


@pytest.mark.parametrize("same_rows", [False, True])
def test_flash_attention_alone_equals_padded_bit_for_bit(run, runtime, rng, same_rows):
    """A sequence's attention computed alone (one call of its own length, no mask: a lone request) and inside a
    padded call of four (a batched engine's bucket) is the same to the bit: the batched engine's tokens equal one by
    one's only so. The model's heads and head size, lengths that end inside a 64-key chunk and on one; on CUDA ggml
    patch 0007's kernel takes both calls with other query tiles a block (on the H200 two alone, four here) and must
    sum each row's keys in the same order whatever the call's padding and tiling. `same_rows`: the padded call
    says that its mask's rows are equal (op_params[5], as models.lm.padded_attention does), which ggml patch 0019's
    kernel takes to read one mask row a sequence, here each a length: the sequence then runs as it does alone."""
    if not runtime.supports_flash_attn(128):
        pytest.skip(f"{runtime.device.spec} has no flash attention with F16 K/V")
    P, H, Hkv, D = 600, 16, 8, 128
    lengths = [600, 300, 100, 256]
    q = rng.standard_normal((len(lengths), H, P, D)).astype(np.float32)
    k = rng.standard_normal((len(lengths), Hkv, P, D)).astype(np.float16)
    v = rng.standard_normal((len(lengths), Hkv, P, D)).astype(np.float16)
    mask = np.zeros((len(lengths), 1, P, P), np.float16)                          # [keys, queries, 1, S]
    for i, n in enumerate(lengths):
        mask[i, 0, :, n:] = -np.inf
    scale = 1 / math.sqrt(D)

    def build(ctx, ws, q, k, v, m=None):
        out = lib.ggml_flash_attn_ext(ctx, q, k, v, m if m is not None else ffi.NULL, scale, 0.0, 0.0)
        lib.ggml_flash_attn_ext_set_prec(out, lib.GGML_PREC_F32)
        if m is not None and same_rows:
            out.op_params[5] = 1
        return out                                                                            # [D, H, Lq, S]

    padded = run(build, {"q": q, "k": k, "v": v, "m": mask})                                   # (S, P, H, D)
    for i, n in enumerate(lengths):
        alone = run(build, {"q": q[i:i + 1, :, :n], "k": k[i:i + 1, :, :n], "v": v[i:i + 1, :, :n]})
        assert np.array_equal(alone.reshape(n, H, D), padded[i, :n]), f"sequence {i} ({n} of {P} keys)"
        qi, ki, vi = (x.transpose(1, 0, 2).astype(np.float64) for x in (q[i, :, :n], k[i, :, :n], v[i, :, :n]))
        want = attention_ref(qi, ki, vi, np.zeros((n, n)), scale)
        assert rel_err(alone.reshape(n, H * D), want) < 3e-3, f"sequence {i} ({n} keys)"


def test_flash_attention_mask_rows_said_equal(run, runtime, rng):
    """A padded call whose mask's rows are the same for every query of a sequence, said so (op_params[5] = 1, as
    models.lm.padded_attention does), equals the same call unsaid, bit for bit, whatever the row holds: ggml patch
    0019's kernel on CUDA takes a row of zeros then -inf as the sequence's length, any other row (finite values,
    -inf between them, a row all -inf) as one row added to every query's scores. Elsewhere the hint is ignored."""
    if not runtime.supports_flash_attn(128):
        pytest.skip(f"{runtime.device.spec} has no flash attention with F16 K/V")
    S, P, H, Hkv, D = 4, 200, 16, 8, 128
    q = rng.standard_normal((S, H, P, D)).astype(np.float32)
    k = rng.standard_normal((S, Hkv, P, D)).astype(np.float16)
    v = rng.standard_normal((S, Hkv, P, D)).astype(np.float16)
    rows = np.zeros((S, P), np.float16)
    rows[0, 131:] = -np.inf                                                    # a length
    rows[1] = rng.choice(np.array([0.0, -0.5, 1.25], np.float16), P)          # finite, no -inf
    rows[2, 70:90] = -np.inf                                                   # -inf between zeros
    rows[2, 150:] = -np.inf
    rows[3] = -np.inf                                                          # nothing to attend
    mask = np.repeat(rows[:, None, None, :], P, axis=2)                        # [keys, queries, 1, S]
    scale = 1 / math.sqrt(D)

    def build(said):
        def graph(ctx, ws, q, k, v, m):
            out = lib.ggml_flash_attn_ext(ctx, q, k, v, m, scale, 0.0, 0.0)
            lib.ggml_flash_attn_ext_set_prec(out, lib.GGML_PREC_F32)
            if said:
                out.op_params[5] = 1
            return out                                                         # [D, H, P, S]
        return graph

    inputs = {"q": q, "k": k, "v": v, "m": mask}
    unsaid, said = run(build(False), inputs), run(build(True), inputs)
    assert np.array_equal(unsaid[:3], said[:3])
    assert np.array_equal(np.nan_to_num(unsaid[3]), np.nan_to_num(said[3]))  # (CPU: NaN for a row all -inf)
    for i in range(3):
        qi, ki, vi = (x.transpose(1, 0, 2).astype(np.float64) for x in (q[i], k[i], v[i]))
        want = attention_ref(qi, ki, vi, np.broadcast_to(rows[i].astype(np.float64), (P, P)), scale)
        assert rel_err(said[i].reshape(P, H * D), want) < 3e-3, f"sequence {i}"


@pytest.mark.parametrize("lengths", [(147, 125), (40, 530, 9)])
def test_flash_attention_packed_segments(run, runtime, rng, lengths):
    """One flash-attention call over packed segments with a block-diagonal mask (the LM's one_attention graph:
    one request's cond and uncond rows), lengths that end inside a 64-key chunk and span many (ggml patch
    0007's kernel on CUDA skips the chunks a block's queries have masked out)."""
    if not runtime.supports_flash_attn(128):
        pytest.skip(f"{runtime.device.spec} has no flash attention with F16 K/V")
    T, Hq, Hkv, D = sum(lengths), 4, 2, 128
    q, k, v = qkv(rng, T, Hq, Hkv, D)
    seg = np.repeat(np.arange(len(lengths)), lengths)
    mask = np.where(seg[:, None] == seg[None, :], 0.0, -np.inf)
    y = run(lambda ctx, ws, q, k, v, m: nn.attention(ctx, q, k, v, m, 0.09, True, types.F16),
            {"q": q, "k": k, "v": v, "m": mask.astype(np.float16)})
    want = attention_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), mask, 0.09)
    assert rel_err(y, want) < 3e-3


@pytest.mark.parametrize("lengths", [(147, 125), (40, 530), (590, 500)])
def test_segmented_attention_two_segments(run, runtime, rng, lengths):
    """One request's attention as the LM builds it: a flash-attention call per segment (cond, uncond) and a concat
    of the two results (ggml patch 0009 on CUDA writes both straight into the concat's result; Q is a node here,
    so that the allocator may give the concat Q's memory, which the patch allows only element for element).
    590 + 500 (a 20 s request): on the H200 280 blocks of patch 0012's paired kernel, more than two an SM hold, which
    patch 0020 runs three an SM."""
    from types import SimpleNamespace

    from omnivoice.models.lm import segmented_attention

    if not runtime.supports_flash_attn(128):
        pytest.skip(f"{runtime.device.spec} has no flash attention with F16 K/V")
    T, Hq, Hkv, D = sum(lengths), 16, 8, 128
    q, k, v = qkv(rng, T, Hq, Hkv, D)
    segments = [(0, lengths[0]), (lengths[0], lengths[1])]

    def build(ctx, ws, q, k, v):
        q = lib.ggml_scale(ctx, q, 1.0)  # a node, its memory free once the second attention has read it
        return segmented_attention(ctx, SimpleNamespace(head_dim=D), q, k, v, segments, types.F16)

    y = run(build, {"q": q, "k": k, "v": v})                                                  # (T, Hq * D)
    for s, n in segments:
        want = attention_ref(*(x[s:s + n].astype(np.float64) for x in (q, k, v)), np.zeros((n, n)), 1 / math.sqrt(D))
        assert rel_err(y[s:s + n], want) < 3e-3, f"segment at {s} ({n} positions)"


def test_plain_attention_on_device_operands(run, runtime, rng):
    """Q, K and V held in a device buffer, so that the products run on the runtime's device (a graph made of
    inputs only is run by the scheduler on the CPU backend): the plain path stays float32 where the backend
    would round a strided operand (Runtime.products_need_contiguous: ggml-vulkan rounds it to F16, 3e-4)."""
    T, Hq, Hkv, D = 23, 4, 2, 16
    q, k, v = qkv(rng, T, Hq, Hkv, D)
    y = run(lambda ctx, ws, x: lib.ggml_add(ctx, x, nn.attention(
                ctx, ws["q"], ws["k"], ws["v"], None, 0.25, False,
                contiguous_qk=runtime.products_need_contiguous)),
            {"x": np.zeros((T, Hq * D), np.float32)}, weights={"q": q, "k": k, "v": v})
    want = attention_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), np.zeros((T, T)), 0.25)
    assert rel_err(y, want) < 1e-5


@pytest.mark.parametrize("flash", [False, True])
def test_attention_without_mask(run, runtime, rng, flash):
    if flash and not runtime.supports_flash_attn(128):
        pytest.skip(f"{runtime.device.spec} has no flash attention with F16 K/V")  # plain path tested regardless
    T, Hq, Hkv, D = 11, 4, 2, 128
    q, k, v = qkv(rng, T, Hq, Hkv, D)
    y = run(lambda ctx, ws, q, k, v: nn.attention(ctx, q, k, v, None, 0.1, flash,
                                                  contiguous_qk=runtime.products_need_contiguous),
            {"q": q, "k": k, "v": v})
    want = attention_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), np.zeros((T, T)), 0.1)
    assert rel_err(y, want) < (3e-3 if flash else 1e-5)


@pytest.mark.parametrize("V", [1025, 1024, 997, 7])
def test_row_max(run, rng, V):
    x = rng.standard_normal((13, V)).astype(np.float32)
    x[3, V // 2] = 50.0  # a maximum in the middle of a row, and one at each end
    x[5, 0], x[7, -1] = 60.0, 70.0
    y = run(lambda ctx, ws, x: nn.row_max(ctx, x), {"x": x})
    np.testing.assert_array_equal(y.reshape(13), x.max(axis=1))


@pytest.mark.parametrize("V", [1025, 7])
def test_row_max_cpu_node(cpu_run, one_thread_cpu_run, rng, V):
    """The CPU's row-max node (csrc/ops.c omnivoice_row_max) on rows read with a stride (a view of every other
    row), on one thread and several: numpy's maxima, a row with a NaN NaN, a row of -inf -inf."""
    x = rng.standard_normal((26, V)).astype(np.float32)
    x[4, V // 2], x[6, 0], x[8, -1] = 50.0, 60.0, 70.0
    x[10, V - 1] = np.nan
    x[12] = -np.inf

    def build(ctx, ws, x):
        every_other = lib.ggml_view_2d(ctx, x, V, 13, 2 * x.nb[1], 0)
        return nn.row_max(ctx, every_other, cpu=True)

    want = x[::2].max(axis=1)
    assert np.isnan(want[5]) and want[6] == -np.inf
    for run in (cpu_run, one_thread_cpu_run):
        np.testing.assert_array_equal(run(build, {"x": x}).reshape(13), want)


# ------------------------------------------------------------------------------- guidance and greedy pick
def guided_pick_inputs(rng, N: int = 300, V: int = 1025) -> dict:
    """Logits of N conditional then N unconditional columns, a class bias (-inf on the last class, as the mask
    id's), per-column guidance factors; the logits drawn wide apart so that no pick is a near tie."""
    g = rng.uniform(0.5, 3.0, N)
    return {"logits": (rng.standard_normal((2 * N, V)) * 4).astype(np.float32),
            "bias": np.where(np.arange(V) == V - 1, -np.inf, 0).astype(np.float32),
            "keep": (1 + g).astype(np.float32).reshape(N, 1), "mix": g.astype(np.float32).reshape(N, 1)}


def guided_pick(run, inputs: dict, per_column: bool):
    """models.lm's guidance and greedy pick on the inputs (the GPU form where the runtime is a GPU): pred, score."""
    from omnivoice.models import lm as lm_graph

    gpu = run.runtime.is_gpu

    def build(ctx, ws, logits, bias, keep=None, mix=None):
        V, N = logits.ne[0], logits.ne[1] // 2
        cond = lib.ggml_view_2d(ctx, logits, V, N, logits.nb[1], 0)
        uncond = lib.ggml_view_2d(ctx, logits, V, N, logits.nb[1], N * logits.nb[1])
        lp = (lm_graph.guided_log_probs_per_column(ctx, cond, uncond, keep, mix, cpu=not gpu) if per_column
              else lm_graph.guided_log_probs(ctx, cond, uncond, 2.0, cpu=not gpu))
        return lm_graph.greedy_pick(ctx, lp, bias, cpu=not gpu)

    used = inputs if per_column else {k: inputs[k] for k in ("logits", "bias")}
    pred, score = run(build, used, outputs=("pred", "score"))
    return pred.reshape(-1), score.reshape(-1)


@pytest.mark.parametrize("per_column", [False, True])
def test_guided_greedy_pick(run, rng, per_column):
    """The graph's guidance, log-softmax and pick (on CUDA with patch 0021: one kernel) against float64 numpy:
    the same picks, never the masked class, scores within float32 rounding."""
    from ..models.lm_reference import guided

    inputs = guided_pick_inputs(rng)
    pred, score = guided_pick(run, inputs, per_column)
    lg = inputs["logits"].astype(np.float64)
    N = lg.shape[0] // 2
    lp = guided(lg[:N], lg[N:], inputs["mix"].astype(np.float64) if per_column else 2.0) + inputs["bias"]
    np.testing.assert_array_equal(pred, lp.argmax(axis=1))
    assert (pred != lg.shape[1] - 1).all()
    np.testing.assert_allclose(score, lp.max(axis=1), rtol=0, atol=2e-5)


def test_guided_greedy_pick_fused_equals_its_kernels(run, rng, tmp_path):
    """Patch 0021's one CUDA kernel gives the picks and scores of the 13 kernels it replaces bit for bit (those
    run in a second process, the fusion switched off there: ggml reads the switch once a process)."""
    from omnivoice.ggml.backend import GUIDED_PICK

    if not run.runtime.has(GUIDED_PICK):
        pytest.skip("the guided-pick fusion is patch 0021's, on CUDA")
    import os
    import subprocess
    import sys
    from pathlib import Path

    inputs = guided_pick_inputs(rng)
    np.savez(tmp_path / "in.npz", **inputs)
    code = ("import sys, numpy as np; from omnivoice.ggml import Runtime; from tests.nn.conftest import GraphRunner; "
            "from tests.nn.test_ops import guided_pick; i = dict(np.load(sys.argv[1])); "
            "rt = Runtime('cuda'); r = GraphRunner(rt); "
            "np.savez(sys.argv[2], *[x for pc in (False, True) for x in guided_pick(r, i, pc)])")
    env = dict(os.environ, GGML_CUDA_DISABLE_GUIDED_PICK="1")
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")], env=env,
                   cwd=root, check=True, timeout=120)
    unfused = np.load(tmp_path / "out.npz")
    for k, per_column in enumerate((False, True)):
        pred, score = guided_pick(run, inputs, per_column)
        np.testing.assert_array_equal(pred, unfused[f"arr_{2 * k}"])
        np.testing.assert_array_equal(score.view(np.uint32), unfused[f"arr_{2 * k + 1}"].view(np.uint32))


# --------------------------------------------------------------------------------------------- convolution
def conv1d_ref(x, w, b, stride, padding, dilation, groups):
    """x (IC, T), w (OC, IC/g, K) -> (OC, T_out), PyTorch semantics."""
    IC, T = x.shape
    OC, ICg, K = w.shape
    xp = np.pad(x, ((0, 0), (padding, padding)))
    t_out = (T + 2 * padding - dilation * (K - 1) - 1) // stride + 1
    y = np.zeros((OC, t_out))
    ocg = OC // groups
    for oc in range(OC):
        g = oc // ocg
        for k in range(K):
            seg = xp[g * ICg:(g + 1) * ICg, k * dilation: k * dilation + stride * (t_out - 1) + 1: stride]
            y[oc] += w[oc, :, k] @ seg
    return y + (b[:, None] if b is not None else 0)


@pytest.mark.parametrize("stride,padding,dilation,groups,K",
                         [(1, 3, 1, 1, 7), (1, 9, 3, 1, 7), (1, 27, 9, 1, 7), (5, 0, 1, 1, 10), (2, 0, 1, 1, 3),
                          (1, 8, 1, 4, 16), (2, 1, 1, 1, 4), (1, 0, 1, 1, 1)])
def test_conv1d(run, rng, stride, padding, dilation, groups, K):
    IC, OC, T = 8, 12, 57
    x = rng.standard_normal((IC, T)).astype(np.float32)            # ggml [T, IC]
    w = rng.standard_normal((OC, IC // groups, K)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.conv1d(ctx, x, ws["w"], ws["b"], stride, padding, dilation, groups),
            {"x": x}, {"w": w, "b": b})
    want = conv1d_ref(x.astype(np.float64), w.astype(np.float64), b, stride, padding, dilation, groups)
    assert y.shape == want.shape
    assert rel_err(y, want) < 1e-5


@pytest.mark.parametrize("IC,OC", [(8, 12), (5, 12), (8, 1)])
@pytest.mark.parametrize("cpu", [False, True, "sets"])
@pytest.mark.parametrize("stride,padding,dilation,K",
                         [(1, 3, 1, 7), (1, 9, 3, 7), (1, 27, 9, 7), (5, 0, 1, 10), (2, 1, 1, 4), (3, 2, 1, 6),
                          (1, 0, 1, 1), (1, 1, 1, 3), (1, 70, 1, 3)])
def test_conv1d_channels_last(run, cpu_run, rng, stride, padding, dilation, K, cpu, IC, OC, monkeypatch):
    """The DAC's layout: x [IC, T] (numpy (T, IC)), weight rows tap-major (conv_weight_cl); columns written by
    one IM2COL node (GPU backends; on any backend), or on the CPU by the package's C kernel, or (builds without
    it, "sets") into an empty CPU node tap by tap, its padding zeroed (padding 70 > T: all padding). IC 8 and 5:
    rows of whole float4s or not (ggml patch 0010's row copies on CUDA). One output channel (the DAC's last
    conv) at stride 1: no columns, each tap's product and strided views of it added."""
    if cpu == "sets":
        from omnivoice.nn import conv

        monkeypatch.setattr(conv, "ops", None)
    T = 57
    x = rng.standard_normal((IC, T)).astype(np.float32)
    w = rng.standard_normal((OC, IC, K)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    y = (cpu_run if cpu else run)(
        lambda ctx, ws, x: nn.conv1d_cl(ctx, x, ws["w"], ws["b"], stride, padding, dilation, cpu=bool(cpu)),
        {"x": np.ascontiguousarray(x.T)}, {"w": nn.conv_weight_cl(w), "b": b})
    want = conv1d_ref(x.astype(np.float64), w.astype(np.float64), b, stride, padding, dilation, 1)
    assert y.shape == want.T.shape
    assert rel_err(y, want.T) < 1e-5


def conv_transpose1d_ref(x, w, b, stride, padding, output_padding):
    """x (IC, T), w (IC, OC, K) -> (OC, T_out), PyTorch ConvTranspose1d semantics (scatter form)."""
    IC, T = x.shape
    _, OC, K = w.shape
    t_out = (T - 1) * stride - 2 * padding + K + output_padding
    y = np.zeros((OC, t_out))
    for k in range(K):  # tap k sends input t to output t*stride - padding + k (distinct outputs for one k)
        o = np.arange(T) * stride - padding + k
        keep = (o >= 0) & (o < t_out)
        y[:, o[keep]] += w[:, :, k].T @ x[:, keep]
    return y + b[:, None]


@pytest.mark.parametrize("stride", [8, 5, 4, 2, 3])
def test_conv_transpose1d_dac_strides(run, rng, stride):
    """The DAC decoder's blocks: K = 2s, padding ceil(s/2), output_padding s % 2 -> exactly s * T samples."""
    IC, OC, T = 6, 5, 11
    K, p, op = 2 * stride, math.ceil(stride / 2), stride % 2
    x = rng.standard_normal((IC, T)).astype(np.float32)
    w = rng.standard_normal((IC, OC, K)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.conv_transpose1d(ctx, x, ws["w"], ws["b"], stride, p, op, OC),
            {"x": x}, {"w": conv_transpose_weight(w), "b": b})
    want = conv_transpose1d_ref(x.astype(np.float64), w.astype(np.float64), b, stride, p, op)
    assert y.shape == (OC, stride * T) == want.shape
    assert rel_err(y, want) < 1e-5
    # the last sample of an odd stride holds real overlap-added signal (NOTES.md: the exactness trap)
    assert abs(want[:, -1] - b).max() > 1e-3


@pytest.mark.parametrize("stride,K", [(8, 16), (5, 10), (4, 8), (2, 4), (3, 6), (3, 3), (2, 6)])
def test_conv_transpose1d_channels_last(run, rng, stride, K):
    """Channels-last transposed conv (kernel m * stride; the DAC's m = 2) against the scatter form."""
    IC, OC, T = 6, 5, 11
    p, op = math.ceil(stride / 2), stride % 2
    x = rng.standard_normal((IC, T)).astype(np.float32)
    w = rng.standard_normal((IC, OC, K)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    stored = conv_transpose_weight(w)
    y = run(lambda ctx, ws, x: nn.conv_transpose1d_cl(ctx, x, ws["w"], ws["b"], stride, p, op, OC),
            {"x": np.ascontiguousarray(x.T)}, {"w": nn.conv_transpose_weight_cl(stored, OC), "b": b})
    want = conv_transpose1d_ref(x.astype(np.float64), w.astype(np.float64), b, stride, p, op)
    assert y.shape == want.T.shape
    assert rel_err(y, want.T) < 1e-5


def test_conv_transpose1d_channels_last_long_signal(run, rng):
    """More than 65535 input columns (the DAC's last upsampling of 20 s of audio takes 80 000): CUDA's PAD
    kernel cannot launch a grid that tall, so the padding is done on the flat tensor."""
    IC, OC, T, stride, K = 2, 3, 70000, 2, 4
    p, op = 1, 0
    x = rng.standard_normal((IC, T)).astype(np.float32)
    w = rng.standard_normal((IC, OC, K)).astype(np.float32)
    b = rng.standard_normal(OC).astype(np.float32)
    y = run(lambda ctx, ws, x: nn.conv_transpose1d_cl(ctx, x, ws["w"], ws["b"], stride, p, op, OC),
            {"x": np.ascontiguousarray(x.T)}, {"w": nn.conv_transpose_weight_cl(conv_transpose_weight(w), OC), "b": b})
    want = conv_transpose1d_ref(x.astype(np.float64), w.astype(np.float64), b, stride, p, op)
    assert y.shape == want.T.shape
    assert rel_err(y, want.T) < 1e-5
