"""The integer product kernels against float64 numpy, and against their own quantization done in numpy (the
kernels' sums of integer products must be exact): int16 (omnivoice/csrc/products.c, omnivoice.nn.int16: 13-bit W
and x) and int8 (omnivoice/csrc/int8.c, omnivoice.nn.int8: 7-bit W, 8-bit x stored as q + 128)."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.ggml import ffi, lib
from omnivoice.nn import int8, int16
from omnivoice.nn.packed import PackedProducts

KERNELS = [pytest.param(m, marks=pytest.mark.skipif(not m.available(),
                                                    reason=f"no AVX2 {m.KERNEL.name} kernel on this CPU or build"),
                        id=m.KERNEL.name) for m in (int16, int8)]
needs_int16 = pytest.mark.skipif(not int16.available(), reason="no AVX2 int16 kernel on this CPU or build")
needs_int8 = pytest.mark.skipif(not int8.available(), reason="no AVX2 int8 kernel on this CPU or build")


def quantized(a: np.ndarray, qmax: int, block: int) -> np.ndarray:
    """numpy's copy of the kernels' rounding: per row and block, q = round(a / (amax / qmax))."""
    blocks = a.reshape(a.shape[0], -1, block).astype(np.float32)
    scale = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(qmax)
    q = np.rint(blocks * np.where(scale > 0, np.float32(1) / scale, 0).astype(np.float32))
    return (q * scale).reshape(a.shape)


def product(run, w: np.ndarray, x: np.ndarray, threads_runner=None, kernel=int16) -> np.ndarray:
    packed = kernel.pack(w)
    return (threads_runner or run)(lambda ctx, ws, x: packed.product(ctx, x), {"x": x})


def rms(e) -> float:
    return float(np.sqrt(np.mean(e ** 2)))


# M: panels of 16 rows, one partial (8200 = the audio heads' rows); N: groups of 6 columns, one partial
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("M,K,N", [(48, 256, 6), (40, 512, 7), (8200 // 25, 1024, 13), (16, 3072, 1)])
def test_product_matches_its_quantization(cpu_run, rng, kernel, M, K, N):
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.05
    x = rng.standard_normal((N, K)).astype(np.float32) * 3
    y = product(cpu_run, w, x, kernel=kernel).reshape(N, M)  # the runner drops a trailing dimension of 1
    # the same quantized operands multiplied in float64: only the float sums of the blocks differ
    want = (quantized(x, kernel.X_LEVELS, kernel.BLOCK).astype(np.float64)
            @ quantized(w, kernel.W_LEVELS, kernel.BLOCK).astype(np.float64).T)
    assert np.max(np.abs(y - want)) <= 2e-6 * np.max(np.abs(want))
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    if kernel is int16:  # the error against the float product is that of F16 operands
        f16 = x.astype(np.float16).astype(np.float64) @ w.astype(np.float16).astype(np.float64).T
        assert rms(y - exact) < 2 * rms(f16 - exact)
    else:  # that of 7- and 8-bit operands (1.5-2.5 % of a typical output)
        assert rms(y - exact) < 0.03 * rms(exact)


@needs_int16
def test_int16_extremes_do_not_overflow(cpu_run, rng):
    """Every product at its largest magnitude and sign: a block's int32 sum stays exact (128 * 4095 * 4095)."""
    K = 512
    w = np.full((16, K), -7.0, np.float32)
    x = np.full((6, K), -3.0, np.float32)
    x[:, 1::2] = 3.0
    w[:, 1::2] = 7.0
    y = product(cpu_run, w, x)
    np.testing.assert_allclose(y, np.full((6, 16), 21.0 * K), rtol=1e-6)


@needs_int8
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_int8_extremes_do_not_saturate(cpu_run, sign):
    """Every pair of products at the largest magnitude the unsigned bytes allow (x at +-amax: bytes 255 or 1; w at
    +-63): VPMADDUBSW's int16 pair sums stay below saturation and a block's int32 sum exact."""
    K = 512
    w = np.full((16, K), 7.0, np.float32)
    w[:, 1::4] = -7.0
    x = np.full((6, K), 3.0 * sign, np.float32)
    x[:, 1::4] = -3.0 * sign
    y = product(cpu_run, w, x, kernel=int8)
    np.testing.assert_allclose(y, np.full((6, 16), 21.0 * K * sign), rtol=1e-6)


@pytest.mark.parametrize("kernel", KERNELS)
def test_zero_and_nan_columns(cpu_run, rng, kernel):
    """A zero block, or one too small to scale, quantizes to zeros (int8: the offset's correction cancels
    exactly); a NaN or inf in a column makes its outputs NaN, as a float product would, and leaves the other
    columns alone."""
    w = rng.standard_normal((32, 512)).astype(np.float32)
    x = rng.standard_normal((4, 512)).astype(np.float32)
    x[1] = 0
    x[1, 200:210] = 1e-42  # a block of subnormals: 1 / its scale would overflow
    x[2, 300] = np.nan
    x[3, 10] = np.inf
    y = product(cpu_run, w, x, kernel=kernel)
    assert np.all(y[1] == 0)
    assert np.all(np.isnan(y[2])) and np.all(np.isnan(y[3]))
    assert np.all(np.isfinite(y[0]))


@pytest.mark.parametrize("kernel", KERNELS)
def test_threads_split_columns(one_thread_cpu_run, cpu_run, rng, kernel):
    """One thread and several give the same bits (each column's sums are the same, whoever computes them)."""
    w = rng.standard_normal((64, 1024)).astype(np.float32)
    x = rng.standard_normal((37, 1024)).astype(np.float32)
    np.testing.assert_array_equal(product(None, w, x, one_thread_cpu_run, kernel),
                                  product(cpu_run, w, x, kernel=kernel))


@pytest.mark.parametrize("kernel", KERNELS)
def test_columns_do_not_depend_on_the_batch(cpu_run, rng, kernel):
    """A column's result is the same in a product of 37 columns and of 5000 (whose packed columns, over 16 MiB a
    thread, are freed after each product), run twice."""
    w = rng.standard_normal((16, 3072)).astype(np.float32)
    x = rng.standard_normal((5000, 3072)).astype(np.float32)
    small = product(cpu_run, w, x[:37], kernel=kernel)
    for _ in range(2):
        np.testing.assert_array_equal(product(cpu_run, w, x, kernel=kernel)[:37], small)


@needs_int16
def test_products_fall_back(cpu_run, rng):
    """PackedProducts.over keeps the base product for weights it did not pack and for inputs it cannot take."""
    from omnivoice.ggml import WeightStore

    w = rng.standard_normal((32, 256)).astype(np.float32)
    other = rng.standard_normal((32, 256)).astype(np.float32)
    x = rng.standard_normal((5, 256)).astype(np.float32)
    store = WeightStore.from_arrays(cpu_run.runtime, {"w": w, "other": other})
    try:
        products = PackedProducts(int16.KERNEL)
        products.add(store["w"], w)
        assert len(products) == 1 and products.nbytes == 32 * 256 * 2 + 32 * (256 // int16.BLOCK) * 4
        product = products.over(lib.ggml_mul_mat)
        y_w, y_other = cpu_run(lambda ctx, ws, x: (product(ctx, store["w"], x), product(ctx, store["other"], x)),
                               {"x": x}, outputs=("w", "other"))
    finally:
        store.close()
    want = x @ w.T
    assert 0 < np.max(np.abs(y_w - want)) < 2e-3 * np.max(np.abs(want))  # the kernel: quantized
    np.testing.assert_allclose(y_other, x @ other.T, rtol=1e-5, atol=1e-5)  # ggml's F32 product


@needs_int16
def test_products_of_one_input_share_its_cast(cpu_run, rng):
    """PackedProducts.over casts an input once for all its products (the AMX kernel's BF16 cast: q, k and v
    share one), here with the int16 kernel made to take a cast (F32 to F32) first: the three products of x read one
    cast, the product of another input its own, and the results are those of unshared casts."""
    import dataclasses

    from omnivoice.ggml import WeightStore, types
    from omnivoice.nn.packed import PackedProducts

    ws = {n: rng.standard_normal((32, 256)).astype(np.float32) for n in ("q", "k", "v")}
    x, other = (rng.standard_normal((5, 256)).astype(np.float32) for _ in range(2))
    store = WeightStore.from_arrays(cpu_run.runtime, ws)
    sources = []
    try:
        products = PackedProducts(dataclasses.replace(int16.KERNEL, input_type=types.F32))
        for n in ws:
            products.add(store[n], ws[n])

        def build(ctx, _, x, other):
            product = products.over(lib.ggml_mul_mat)
            ys = [product(ctx, store[n], x) for n in ws] + [product(ctx, store["q"], other)]
            sources.extend(int(ffi.cast("uintptr_t", y.src[0])) for y in ys)
            return tuple(ys)

        shared = cpu_run(build, {"x": x, "other": other}, outputs=("q", "k", "v", "q_other"))
    finally:
        store.close()
    assert sources[0] == sources[1] == sources[2] != sources[3]
    alone = [product(cpu_run, ws[n], x) for n in ws] + [product(cpu_run, ws["q"], other)]
    for got, want in zip(shared, alone):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", KERNELS)
def test_pack_refuses_other_shapes(kernel):
    with pytest.raises(ValueError, match=f"multiple of {kernel.BLOCK}"):
        kernel.pack(np.zeros((16, 100), np.float32))
