"""Philox4x32 and the re-created PyTorch CUDA generator.

Checked against the Random123 known-answer vectors and against a scalar, line-by-line
transcription of cuRAND's Philox state machine and PyTorch's grid-stride uniform kernel (written
here independently of the vectorised implementation). The comparison with real ``torch.cuda``
draws is tools/reference/philox_cuda_check.py (needs a GPU).
"""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.generate.philox import CudaPhiloxGenerator, curand_uniform, philox4x32

# Random123 kat_vectors, "philox4x32 R  ctr[4]  key[2]  -> out[4]" (hex uint32).
KAT = """
philox4x32 7 00000000 00000000 00000000 00000000 00000000 00000000   5f6fb709 0d893f64 4f121f81 4f730a48
philox4x32 7 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   5207ddc2 45165e59 4d8ee751 8c52f662
philox4x32 7 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   4dfccaba 190a87f0 c47362ba b6b5242a
philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
"""


def _kat_rows():
    for line in KAT.strip().splitlines():
        f = line.split()
        words = [int(x, 16) for x in f[2:]]
        yield int(f[1]), words[0:4], words[4:6], words[6:10]


@pytest.mark.parametrize("rounds,ctr,key,expected", list(_kat_rows()))
def test_known_answer_vectors(rounds, ctr, key, expected):
    out = philox4x32(np.array(ctr, dtype=np.uint32), np.array(key, dtype=np.uint32), rounds=rounds)
    assert out.tolist() == expected


def test_vectorised_over_batches_and_broadcast_key(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    ctr = rng.integers(0, 2**32, size=(5, 3, 4), dtype=np.uint64).astype(np.uint32)
    key = rng.integers(0, 2**32, size=2, dtype=np.uint64).astype(np.uint32)
    out = philox4x32(ctr, key)
    for idx in np.ndindex(5, 3):
        assert out[idx].tolist() == _philox_scalar(ctr[idx].tolist(), key.tolist(), 10), f"seed {fresh_seed}"


# ------------------------------------------------------------------------------------------
# Scalar transcription of cuRAND (curand_philox4x32_x.h, curand_uniform.h) and of PyTorch's
# calc_execution_policy / distribution_elementwise_grid_stride_kernel / uniform_kernel.
# ------------------------------------------------------------------------------------------

M32 = 0xFFFFFFFF


def _philox_scalar(ctr, key, rounds):
    x, y, z, w = ctr
    k0, k1 = key
    for r in range(rounds):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * x
        p1 = 0xCD9E8D57 * z
        x, y, z, w = (p1 >> 32) ^ y ^ k0, p1 & M32, (p0 >> 32) ^ w ^ k1, p0 & M32
    return [x, y, z, w]


class _CurandPhiloxState:
    """curandStatePhilox4_32_10_t with curand_init / curand4 as cuRAND writes them."""

    def __init__(self, seed, subsequence, offset):
        self.ctr = [0, 0, 0, 0]
        self.key = [seed & M32, (seed >> 32) & M32]
        self.state = 0
        # skipahead_sequence: add to the high 64 bits of the counter.
        self._incr_hi(subsequence)
        self.output = _philox_scalar(self.ctr, self.key, 10)
        # skipahead
        self.state += offset & 3
        n = offset // 4
        if self.state > 3:
            n += 1
            self.state -= 4
        self._incr(n)
        self.output = _philox_scalar(self.ctr, self.key, 10)

    def _incr_hi(self, n):
        nlo, nhi = n & M32, n >> 32
        self.ctr[2] = (self.ctr[2] + nlo) & M32
        if self.ctr[2] < nlo:
            nhi += 1
        self.ctr[3] = (self.ctr[3] + nhi) & M32

    def _incr(self, n):
        nlo, nhi = n & M32, n >> 32
        self.ctr[0] = (self.ctr[0] + nlo) & M32
        if self.ctr[0] < nlo:
            nhi += 1
        self.ctr[1] = (self.ctr[1] + nhi) & M32
        if nhi <= self.ctr[1]:
            return
        self.ctr[2] = (self.ctr[2] + 1) & M32
        if self.ctr[2]:
            return
        self.ctr[3] = (self.ctr[3] + 1) & M32

    def curand4(self):
        tmp = self.output
        self._incr(1)
        self.output = _philox_scalar(self.ctr, self.key, 10)
        s = self.state
        return (tmp + self.output)[s : s + 4]


def _uniform_exact(bits):
    # float(x) * 2^-32 + 2^-33 is exact in float64 (at most 33 significant bits here), so one
    # rounding to float32 follows, as in the fused float32 expression.
    return np.float32(np.float64(np.float32(bits)) * 2.0**-32 + 2.0**-33)


def _torch_cuda_rand_scalar(seed, offset, numel, num_sms, max_threads_per_sm):
    """torch.rand(numel) on CUDA, simulated thread by thread. Returns (values, offset increment)."""
    block = 256
    grid = min((numel + block - 1) // block, num_sms * (max_threads_per_sm // block))
    unroll = 4
    increment = ((numel - 1) // (block * grid * unroll) + 1) * 4
    out = np.full(numel, np.nan, dtype=np.float32)
    stride = block * grid
    rounded = ((numel - 1) // (stride * unroll) + 1) * stride * unroll
    for idx in range(stride):
        state = _CurandPhiloxState(seed, idx, offset)
        for linear in range(idx, rounded, stride * unroll):
            rand = [_uniform_exact(b) for b in state.curand4()]
            for ii in range(unroll):
                li = linear + stride * ii
                if li < numel:
                    v = rand[ii]
                    out[li] = np.float32(0.0) if v == np.float32(1.0) else v
    return out, (increment + 3) // 4 * 4


@pytest.mark.parametrize(
    "numel,num_sms,threads_per_sm",
    [
        (1, 132, 2048),  # 8 * T for T = 1 on an H200
        (56, 132, 2048),
        (1000, 132, 2048),
        (255, 2, 512),
        (1024, 2, 512),  # exactly one round of the capped grid
        (1025, 2, 512),  # one element into the second component
        (5000, 2, 512),  # several grid-stride rounds of float4
        (4097, 1, 256),
    ],
)
def test_rand_matches_kernel_simulation(numel, num_sms, threads_per_sm, fresh_seed):
    seed = fresh_seed * 2654435761 % 2**64
    gen = CudaPhiloxGenerator(seed, num_sms=num_sms, max_threads_per_sm=threads_per_sm)
    offset = 0
    for draw in range(3):  # successive draws thread the offset
        expected, inc = _torch_cuda_rand_scalar(seed, offset, numel, num_sms, threads_per_sm)
        got = gen.rand(numel)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected, err_msg=f"seed {seed}, draw {draw}")
        offset += inc
        assert gen.offset == offset, f"seed {seed}, draw {draw}"


def test_rand_like_and_large_key(fresh_seed):
    seed = 2**63 + fresh_seed  # both key words non-zero
    gen = CudaPhiloxGenerator(seed, offset=40)
    expected, inc = _torch_cuda_rand_scalar(seed, 40, 6 * 7, 132, 2048)
    got = gen.rand_like((6, 7))
    assert got.shape == (6, 7)
    np.testing.assert_array_equal(got.reshape(-1), expected)
    assert gen.offset == 40 + inc


def test_curand_uniform_conversion(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    bits = np.concatenate(
        [
            rng.integers(0, 2**32, size=10000, dtype=np.uint64),
            np.array([0, 1, 2**24 - 1, 2**24 + 1, 2**31, 2**32 - 129, 2**32 - 128, 2**32 - 1], dtype=np.uint64),
        ]
    ).astype(np.uint32)
    expected = np.array([_uniform_exact(b) for b in bits], dtype=np.float32)
    np.testing.assert_array_equal(curand_uniform(bits), expected)
    assert curand_uniform(np.uint32(2**32 - 1)) == np.float32(1.0)  # cuRAND's (0, 1] includes 1


def test_rand_maps_one_to_zero():
    # The top 128 uint32 values round to 1.0; torch.rand maps them to 0.0 so that rand is in [0, 1).
    class Fixed(CudaPhiloxGenerator):
        def rand_bits(self, numel):
            return np.array([2**32 - 1, 2**32 - 100, 5], dtype=np.uint32)[:numel]

    u = Fixed(0).rand(3)
    assert u[0] == 0.0 and u[1] == 0.0 and 0.0 < u[2] < 1e-8


def test_uniform_statistics(fresh_seed):
    u = CudaPhiloxGenerator(fresh_seed).rand(400_000)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / u.size), f"seed {fresh_seed}"
    counts = np.bincount((u * 100).astype(np.int64), minlength=100)
    chi2 = ((counts - u.size / 100) ** 2 / (u.size / 100)).sum()
    assert chi2 < 200, f"seed {fresh_seed}: chi2 {chi2:.1f} for 99 degrees of freedom"


def test_state_and_seeding():
    gen = CudaPhiloxGenerator(123)
    gen.rand(10)
    state = gen.get_state()
    a = gen.rand(300_000)  # more than one grid round on an H200
    gen.set_state(state)
    np.testing.assert_array_equal(gen.rand(300_000), a)
    gen.manual_seed(123)
    assert gen.get_state() == (123, 0)
    # Negative seeds wrap to uint64 as torch.cuda.manual_seed does.
    np.testing.assert_array_equal(CudaPhiloxGenerator(-1).rand(7), CudaPhiloxGenerator(2**64 - 1).rand(7))
    # An empty draw leaves the generator untouched, like torch.
    gen.rand(0)
    assert gen.offset == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of 4"):
        CudaPhiloxGenerator(0, offset=6)
    with pytest.raises(ValueError, match="seed"):
        CudaPhiloxGenerator(2**64)
    with pytest.raises(ValueError, match="numel"):
        CudaPhiloxGenerator(0).rand(-1)
    with pytest.raises(ValueError, match="counter"):
        philox4x32(np.zeros(3, np.uint32), np.zeros(2, np.uint32))
