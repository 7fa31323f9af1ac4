"""The AMX BF16 product kernel (omnivoice/csrc/amx.c, omnivoice.nn.amx) against float64 numpy on the same
BF16-rounded operands: only the order of the F32 sums may differ. Runs where the CPU has AMX-BF16 (Intel Xeon
since Sapphire Rapids: the GPU machine's host); elsewhere the kernel is never picked (test_lm_packed.py)."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.nn import amx

pytestmark = pytest.mark.skipif(not amx.available(), reason="no AMX-BF16 on this CPU or build")


def bf16(a: np.ndarray) -> np.ndarray:
    """numpy's copy of ggml's FP32 -> BF16 (round to nearest even), as float64."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return r.view(np.float32).astype(np.float64)


def product(run, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    packed = amx.pack(w)
    return run(lambda ctx, ws, x: packed.product(ctx, x), {"x": x})


# M: units of 32 outputs, one partial (328 = 10.25 units; 8200 / 25 as the audio heads' 8200 rows); N: blocks of
# 32 tokens, the last through the padded copy (13: only that one; 37: one full block and a tail of 5)
@pytest.mark.parametrize("M,K,N", [(32, 32, 32), (48, 256, 13), (8200 // 25, 1024, 37), (1024, 3072, 64),
                                   (16, 96, 1)])
def test_product_is_the_bf16_product(cpu_run, rng, M, K, N):
    w = rng.standard_normal((M, K)).astype(np.float32) * 0.05
    x = rng.standard_normal((N, K)).astype(np.float32) * 3
    y = product(cpu_run, w, x).reshape(N, M)  # the runner drops a trailing dimension of 1
    want = bf16(x) @ bf16(w).T
    scale = np.sqrt(K) * 0.15  # the size of a sum of K products of these magnitudes
    assert np.max(np.abs(y - want)) <= 1e-4 * scale  # F32 sums in another order; a layout error is O(scale)


def test_threads_and_batch_do_not_change_a_column(one_thread_cpu_run, cpu_run, rng):
    """A token's outputs are the same bits on one thread and several, and alone or among 70 tokens."""
    w = rng.standard_normal((96, 512)).astype(np.float32)
    x = rng.standard_normal((70, 512)).astype(np.float32)
    many = product(cpu_run, w, x)
    np.testing.assert_array_equal(product(one_thread_cpu_run, w, x), many)
    np.testing.assert_array_equal(product(cpu_run, w, x[40:41]).reshape(1, -1), many[40:41])


def test_nan_stays_in_its_column(cpu_run, rng):
    w = rng.standard_normal((32, 64)).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    x[1, 5] = np.nan
    y = product(cpu_run, w, x)
    assert np.all(np.isnan(y[1])) and np.all(np.isfinite(y[[0, 2]]))


def test_pack_refuses_other_shapes():
    with pytest.raises(ValueError, match=f"multiple of {amx.BLOCK}"):
        amx.pack(np.zeros((16, 100), np.float32))
