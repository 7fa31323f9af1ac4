"""The int8 product kernel (omnivoice/csrc/int8.c, omnivoice.nn.int8) against float64 numpy, and against its own
quantization done in numpy: the kernel's sums of integer products (and its offset correction) must be exact."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.nn import int8

pytestmark = pytest.mark.skipif(not int8.available(), reason="no AVX2 int8 kernel on this CPU or build")


def quantized(a: np.ndarray, qmax: int) -> np.ndarray:
    """numpy's copy of the kernel's rounding: per row and block, q = round(a / (amax / qmax))."""
    blocks = a.reshape(a.shape[0], -1, int8.BLOCK).astype(np.float32)
    scale = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(qmax)
    q = np.rint(blocks * np.where(scale > 0, np.float32(1) / scale, 0).astype(np.float32))
    return (q * scale).reshape(a.shape)


def product(run, w: np.ndarray, x: np.ndarray, threads_runner=None) -> np.ndarray:
    packed = int8.pack(w)
    return (threads_runner or run)(lambda ctx, ws, x: packed.product(ctx, x), {"x": x})


# M: panels of 16 rows, one partial (8200 = the audio heads' rows); N: groups of 6 columns, one partial
@pytest.mark.parametrize("M,K,N", [(48, 256, 6), (40, 512, 7), (8200 // 25, 1024, 13), (16, 3072, 1)])
def test_product_matches_its_quantization(cpu_run, rng, M, K, N):
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.05
    x = rng.standard_normal((N, K)).astype(np.float32) * 3
    y = product(cpu_run, w, x).reshape(N, M)  # the runner drops a trailing dimension of 1
    # the same quantized operands multiplied in float64: only the float sums of the blocks differ
    want = quantized(x, int8.X_LEVELS).astype(np.float64) @ quantized(w, int8.W_LEVELS).astype(np.float64).T
    assert np.max(np.abs(y - want)) <= 2e-6 * np.max(np.abs(want))
    # and the error against the float product is that of 7- and 8-bit operands (1.5-2.5 % of a typical output)
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    rms = lambda e: float(np.sqrt(np.mean(e ** 2)))  # noqa: E731
    assert rms(y - exact) < 0.03 * rms(exact)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extremes_do_not_saturate(cpu_run, sign):
    """Every pair of products at the largest magnitude the unsigned bytes allow (x at +-amax: bytes 255 or 1; w at
    +-63): VPMADDUBSW's int16 pair sums stay below saturation and a block's int32 sum exact."""
    K = 512
    w = np.full((16, K), 7.0, np.float32)
    w[:, 1::4] = -7.0
    x = np.full((6, K), 3.0 * sign, np.float32)
    x[:, 1::4] = -3.0 * sign
    y = product(cpu_run, w, x)
    np.testing.assert_allclose(y, np.full((6, 16), 21.0 * K * sign), rtol=1e-6)


def test_zero_and_nan_columns(cpu_run, rng):
    """A zero block, or one too small to scale, quantizes to zeros (the offset's correction cancels exactly); a
    NaN or inf in a column makes its outputs NaN, as a float product would, and leaves the other columns alone."""
    w = rng.standard_normal((32, 512)).astype(np.float32)
    x = rng.standard_normal((4, 512)).astype(np.float32)
    x[1] = 0
    x[1, 200:210] = 1e-42  # a block of subnormals: 1 / its scale would overflow
    x[2, 300] = np.nan
    x[3, 10] = np.inf
    y = product(cpu_run, w, x)
    assert np.all(y[1] == 0)
    assert np.all(np.isnan(y[2])) and np.all(np.isnan(y[3]))
    assert np.all(np.isfinite(y[0]))


def test_threads_split_columns(one_thread_cpu_run, cpu_run, rng):
    """One thread and several give the same bits (each column's sums are the same, whoever computes them)."""
    w = rng.standard_normal((64, 1024)).astype(np.float32)
    x = rng.standard_normal((37, 1024)).astype(np.float32)
    np.testing.assert_array_equal(product(None, w, x, one_thread_cpu_run), product(cpu_run, w, x))


def test_columns_do_not_depend_on_the_batch(cpu_run, rng):
    """A column's result is the same in a product of 37 columns and of 5000 (whose packed columns, over 16 MiB a
    thread, are freed after each product), run twice."""
    w = rng.standard_normal((16, 3072)).astype(np.float32)
    x = rng.standard_normal((5000, 3072)).astype(np.float32)
    small = product(cpu_run, w, x[:37])
    for _ in range(2):
        np.testing.assert_array_equal(product(cpu_run, w, x)[:37], small)


def test_pack_refuses_other_shapes():
    with pytest.raises(ValueError, match=f"multiple of {int8.BLOCK}"):
        int8.pack(np.zeros((16, 100), np.float32))
