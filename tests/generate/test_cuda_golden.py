"""Our Philox generator, logf and Gumbel noise against values recorded on an NVIDIA H200.

Golden: tests/golden/generate_cuda.npz, written on the GPU by
``python3 tools/reference/philox_cuda_check.py --write-golden tests/golden/generate_cuda.npz`` (torch.cuda
draws after ``torch.cuda.manual_seed``, with the generator offset after each draw; ``torch.log``
on inputs where CUDA's logf is not the correctly rounded log; Gumbel noise). That script also runs
the full-size comparison on the GPU.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from omnivoice.generate import CudaPhiloxGenerator, gumbel_noise, logf
from omnivoice.generate.cuda_math import fma_f32

_PATH = os.path.join(os.path.dirname(__file__), "..", "golden", "generate_cuda.npz")


@pytest.fixture(scope="module")
def cuda_golden() -> dict:
    if not os.path.exists(_PATH):
        raise FileNotFoundError(
            f"{_PATH} is missing; regenerate it on a GPU with "
            "`python3 tools/reference/philox_cuda_check.py --write-golden tests/golden/generate_cuda.npz`"
        )
    with np.load(_PATH) as z:
        return {k: z[k] for k in z.files}


def _bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def test_rand_stream_equals_torch_cuda(cuda_golden):
    meta = json.loads(str(cuda_golden["meta_json"]))
    for seed in meta["golden_seeds"]:
        gen = CudaPhiloxGenerator(seed, num_sms=meta["num_sms"], max_threads_per_sm=meta["max_threads_per_sm"])
        i = 0
        while f"rand_{seed}_{i}__n" in cuda_golden:
            key = f"rand_{seed}_{i}"
            n = int(cuda_golden[key + "__n"])
            u = gen.rand(n)
            idx = cuda_golden[key + "__idx"]
            np.testing.assert_array_equal(_bits(u[idx]), _bits(cuda_golden[key + "__val"]), err_msg=key)
            assert gen.offset == int(cuda_golden[key + "__offset"]), key
            i += 1
        assert i >= 5, f"seed {seed}: too few recorded draws"


def test_logf_equals_cuda(cuda_golden):
    x, y = cuda_golden["logf__x"], cuda_golden["logf__y"]
    np.testing.assert_array_equal(_bits(logf(x)), _bits(y))
    # Most recorded inputs are ones where a correctly rounded log would be wrong.
    rounded = np.log(x.astype(np.float64)).astype(np.float32)
    assert np.mean(_bits(rounded) != _bits(y)) > 0.4


def test_logf_special_values():
    x = np.array([0.0, -0.0, 1.0, np.inf, -1.0, np.nan, 1e-40, 2.0**-149], dtype=np.float32)
    y = logf(x)
    assert y[0] == -np.inf and y[1] == -np.inf and y[2] == 0.0 and y[3] == np.inf
    assert np.isnan(y[4]) and np.isnan(y[5])
    # Subnormal inputs take the rescaled path; compare with the float64 log to float32 accuracy.
    np.testing.assert_allclose(y[6:], np.log(x[6:].astype(np.float64)), rtol=2e-7)


def _logf_by_fma(x: np.ndarray) -> np.ndarray:
    """CUDA's logf step by step with fma_f32, as the PTX reads (the slow, plain composition)."""
    from omnivoice.generate import cuda_math as cm

    f32 = np.float32
    small = x < cm._FLT_MIN
    with np.errstate(over="ignore"):  # the large inputs' products are not taken
        xs = np.where(small, x * f32(2.0**23), x).astype(f32)
    i0 = np.where(small, f32(-23.0), f32(0.0)).astype(f32)
    bits = xs.view(np.uint32).astype(np.int64)
    e = (bits - 0x3F2AAAAB) & 0xFF800000
    e = np.where(e >= 2**31, e - 2**32, e)
    m = ((bits - e) & 0xFFFFFFFF).astype(np.uint32).view(f32)
    i = fma_f32(e.astype(f32), cm._TWO_M23, i0)
    f = (m - f32(1.0)).astype(f32)
    p = fma_f32(cm._C[0], f, cm._C[1])
    for c in cm._C[2:]:
        p = fma_f32(p, f, c)
    r = fma_f32((f * p).astype(f32), f, f)
    return fma_f32(i, cm._LN2, r)


def test_logf_equals_its_fma_composition(fresh_seed):
    """The fast logf (float64 products, one rounding per fused multiply-add) gives the bits of the plain
    composition of fma_f32 on random inputs across the float32 range, subnormals included."""
    rng = np.random.default_rng(fresh_seed)
    bits = rng.integers(1, 0x7F800000, 200_000, dtype=np.uint32)   # every positive finite float32
    x = np.concatenate([bits.view(np.float32), rng.random(100_000).astype(np.float32)])
    np.testing.assert_array_equal(_bits(logf(x)), _bits(_logf_by_fma(x)), err_msg=f"seed {fresh_seed}")
    assert logf(x.reshape(100, -1)).shape == (100, 3000)


def test_gumbel_noise_equals_cuda(cuda_golden):
    np.testing.assert_array_equal(_bits(gumbel_noise(cuda_golden["gumbel__u"])), _bits(cuda_golden["gumbel__g"]))


def test_fma_in_place_decides_ties_before_writing():
    """logf's fused multiply-adds write over an operand (p = fma(p, f, c)); a halfway case must still be
    decided from the operand's value, not from the result written over it."""
    from omnivoice.generate.cuda_math import _Fma

    a = np.array([1 + 2.0**-12, 1 + 2.0**-12, 1.5], np.float32)
    b = a.astype(np.float64)
    c = np.array([2.0**-80, -(2.0**-80), 0.25])
    want = fma_f32(a, a, c.astype(np.float32))
    got = _Fma(3)(a, b, c, a)   # out is a
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert got[0] == np.float32(1 + 2.0**-11 + 2.0**-23) and got[1] == np.float32(1 + 2.0**-11)


def test_fma_rounds_once(fresh_seed):
    # (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 is halfway between two float32 values; a tiny addend,
    # lost when the float64 sum rounds, must still decide the direction.
    a = np.float32(1 + 2.0**-12)
    assert fma_f32(a, a, np.float32(2.0**-80)) == np.float32(1 + 2.0**-11 + 2.0**-23)
    assert fma_f32(a, a, np.float32(-(2.0**-80))) == np.float32(1 + 2.0**-11)
    assert fma_f32(a, a, np.float32(0.0)) == np.float32(1 + 2.0**-11)  # tie to even
    # Random operands against exact rational arithmetic.
    from fractions import Fraction

    rng = np.random.default_rng(fresh_seed)
    a = rng.standard_normal(2000).astype(np.float32)
    b = rng.standard_normal(2000).astype(np.float32)
    c = (rng.standard_normal(2000) * np.exp2(rng.integers(-30, 30, 2000))).astype(np.float32)
    got = fma_f32(a, b, c)
    for ai, bi, ci, gi in zip(a, b, c, got):
        exact = Fraction(float(ai)) * Fraction(float(bi)) + Fraction(float(ci))
        lo, hi = np.nextafter(gi, np.float32(-np.inf)), np.nextafter(gi, np.float32(np.inf))
        err = abs(Fraction(float(gi)) - exact)
        assert err <= abs(Fraction(float(lo)) - exact) and err <= abs(Fraction(float(hi)) - exact), (
            f"seed {fresh_seed}: fma({ai}, {bi}, {ci}) = {gi}"
        )
