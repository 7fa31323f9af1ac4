"""Philox4x32-10 in numpy, and PyTorch's CUDA generator built on it.

The reference samples its Gumbel noise with ``torch.rand_like`` on the GPU. PyTorch's CUDA
generator is a (seed, offset) pair feeding cuRAND's Philox4x32-10; how a draw maps counters to
elements depends on the launch grid of PyTorch's ``distribution_nullary_kernel``, which depends on
the device (multiprocessor count and threads per multiprocessor). :class:`CudaPhiloxGenerator`
re-creates that mapping on the host, so a port seeded like ``torch.cuda.manual_seed(seed)`` draws
the same float32 numbers as the reference on that device, and advances the offset as torch does
so the stream threads across MaskGIT calls and chunks.

Sources followed (PyTorch ``aten/src/ATen/native/cuda/DistributionTemplates.h``,
``CUDAGeneratorImpl.cpp``; cuRAND ``curand_philox4x32_x.h``, ``curand_uniform.h``):

- ``calc_execution_policy``: block 256, grid ``min(ceil(n / 256), SMs * (threads_per_SM / 256))``,
  offset increment ``ceil(n / (block * grid * 4)) * 4`` (then rounded up to a multiple of 4).
- ``distribution_elementwise_grid_stride_kernel``: thread ``i`` runs ``curand_init(seed, i,
  offset)`` and calls ``curand_uniform4`` once per grid-stride round ``j``; element
  ``j * 4 * threads + c * threads + i`` gets component ``c`` of that call.
- ``curand_init``: key = (seed low, seed high), counter = (offset / 4 + j, subsequence = i)
  as two 64-bit halves (offset is always a multiple of 4 here, so cuRAND's intra-block state is 0).
- ``curand_uniform4``: ``u = float(x) * 2**-32 + 2**-33`` in float32, in (0, 1]; torch's uniform
  then maps 1.0 to 0.0 so ``rand`` lies in [0, 1).

tools/reference/philox_cuda_check.py compares this with ``torch.cuda`` draws; on an H200 (torch 2.11,
CUDA 13.0) every value and every offset matched, and tests/golden/generate_cuda.npz keeps a sample.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

__all__ = [
    "PHILOX_M0",
    "PHILOX_M1",
    "PHILOX_W0",
    "PHILOX_W1",
    "philox4x32",
    "curand_uniform",
    "CudaPhiloxGenerator",
    "rand_like_many",
]

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85

_MASK32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)

# PyTorch constants from DistributionTemplates.h.
_BLOCK_SIZE = 256
_UNROLL = 4  # float4 from curand_uniform4
_MAX_OFFSETS_PER_CALL = 4
# Above this PyTorch splits the launch into 32-bit-indexable pieces, which changes the mapping.
_MAX_NUMEL = 2**31 - 1


def philox4x32(counter: np.ndarray, key: np.ndarray, rounds: int = 10) -> np.ndarray:
    """Apply the Philox4x32 bijection (Random123 / cuRAND) to many counters at once.

    Args:
        counter: uint32 array of shape [..., 4] (words x, y, z, w).
        key: uint32 array of shape [..., 2], broadcastable against ``counter[..., :2]``.
        rounds: number of rounds (10 for Philox4x32-10, 7 for Philox4x32-7).

    Returns:
        uint32 array of shape [..., 4].
    """
    counter = np.asarray(counter)
    key = np.asarray(key)
    if counter.shape[-1:] != (4,):
        raise ValueError(f"philox4x32: counter must have a last axis of 4 words, got shape {counter.shape}")
    if key.shape[-1:] != (2,):
        raise ValueError(f"philox4x32: key must have a last axis of 2 words, got shape {key.shape}")
    if rounds < 1:
        raise ValueError(f"philox4x32: rounds must be >= 1, got {rounds}")
    shape = np.broadcast_shapes(counter.shape[:-1], key.shape[:-1])
    c = np.broadcast_to(counter, shape + (4,)).reshape(-1, 4)
    k = np.broadcast_to(key, shape + (2,)).reshape(-1, 2)
    words = _philox_lanes(*(c[:, i].astype(np.uint64) for i in range(4)),
                          *(k[:, i].astype(np.uint64) for i in range(2)), rounds)
    return np.stack(words, axis=-1).astype(np.uint32).reshape(shape + (4,))


def _philox_lanes(c0: np.ndarray, c1: np.ndarray, c2: np.ndarray, c3: np.ndarray, k0: np.ndarray,
                  k1: np.ndarray, rounds: int = 10) -> tuple[np.ndarray, ...]:
    """Philox4x32 on 1-D uint64 lanes holding 32-bit words (so the 32x32 -> 64 products are exact), which it
    overwrites: every operation writes into an existing buffer, no temporaries per round."""
    m0, m1 = np.uint64(PHILOX_M0), np.uint64(PHILOX_M1)
    w0, w1 = np.uint64(PHILOX_W0), np.uint64(PHILOX_W1)
    p0, p1 = np.empty_like(c0), np.empty_like(c0)
    for r in range(rounds):
        if r:
            np.add(k0, w0, out=k0)
            np.bitwise_and(k0, _MASK32, out=k0)
            np.add(k1, w1, out=k1)
            np.bitwise_and(k1, _MASK32, out=k1)
        np.multiply(c0, m0, out=p0)
        np.multiply(c2, m1, out=p1)
        # (c0, c1, c2, c3) <- (hi(p1) ^ c1 ^ k0, lo(p1), hi(p0) ^ c3 ^ k1, lo(p0)); c0 and c2 are spent
        np.right_shift(p1, _SHIFT32, out=c0)
        np.bitwise_xor(c0, c1, out=c0)
        np.bitwise_xor(c0, k0, out=c0)
        np.right_shift(p0, _SHIFT32, out=c2)
        np.bitwise_xor(c2, c3, out=c2)
        np.bitwise_xor(c2, k1, out=c2)
        np.bitwise_and(p1, _MASK32, out=c1)
        np.bitwise_and(p0, _MASK32, out=c3)
    return c0, c1, c2, c3


def curand_uniform(bits: np.ndarray) -> np.ndarray:
    """cuRAND's ``_curand_uniform``: uint32 -> float32 in (0, 1], as ``x * 2^-32 + 2^-33``.

    The uint32 is first rounded to float32 (round to nearest even, as CUDA's conversion does); the
    product by 2^-32 is exact, so one rounding at the add remains, which equals the fused form.
    """
    x = np.asarray(bits, dtype=np.uint32).astype(np.float32)
    return x * np.float32(2.0**-32) + np.float32(2.0**-33)


class CudaPhiloxGenerator:
    """Host re-creation of PyTorch's CUDA default generator (Philox4x32-10, seed + offset).

    ``CudaPhiloxGenerator(seed)`` is in the state of ``torch.cuda.manual_seed(seed)`` (offset 0).
    Each :meth:`rand` returns what ``torch.rand(numel, device="cuda")`` (or ``torch.rand_like`` of
    a contiguous float32 tensor of that size) returns on a device with ``num_sms``
    multiprocessors and ``max_threads_per_sm`` threads per multiprocessor, and advances
    :attr:`offset` by the same increment, so successive calls follow torch's successive draws.

    The defaults describe an NVIDIA H200 (132 SMs, 2048 threads per SM). Draws of at most
    ``256 * grid`` elements (270,336 on an H200) use only the first word of each Philox block and
    depend on the device only through that bound; larger draws depend on the grid size.
    """

    def __init__(self, seed: int = 0, offset: int = 0, *, num_sms: int = 132, max_threads_per_sm: int = 2048):
        if num_sms < 1:
            raise ValueError(f"CudaPhiloxGenerator: num_sms must be >= 1, got {num_sms}")
        if max_threads_per_sm < _BLOCK_SIZE:
            raise ValueError(
                f"CudaPhiloxGenerator: max_threads_per_sm must be >= {_BLOCK_SIZE}, got {max_threads_per_sm}"
            )
        self.num_sms = int(num_sms)
        self.max_threads_per_sm = int(max_threads_per_sm)
        self.manual_seed(seed)
        self.offset = offset

    # -- state ---------------------------------------------------------------------------------

    @property
    def seed(self) -> int:
        """The 64-bit seed (as ``torch.cuda.initial_seed()`` reports it)."""
        return self._seed

    @property
    def offset(self) -> int:
        """Philox offset per thread (``philox_offset_per_thread``); always a multiple of 4."""
        return self._offset

    @offset.setter
    def offset(self, value: int) -> None:
        value = int(value)
        if value < 0 or value >= 2**64:
            raise ValueError(f"CudaPhiloxGenerator: offset must be in [0, 2**64), got {value}")
        if value % 4:
            raise ValueError(f"CudaPhiloxGenerator: offset must be a multiple of 4 (as in PyTorch), got {value}")
        self._offset = value

    def manual_seed(self, seed: int) -> "CudaPhiloxGenerator":
        """Reset to ``torch.cuda.manual_seed(seed)``: set the seed, offset 0.

        Negative seeds down to -2**63 wrap to uint64 as PyTorch does.
        """
        seed = int(seed)
        if not -(2**63) <= seed < 2**64:
            raise ValueError(f"CudaPhiloxGenerator: seed must be in [-2**63, 2**64), got {seed}")
        self._seed = seed % 2**64
        self._offset = 0
        return self

    def get_state(self) -> tuple[int, int]:
        """Return ``(seed, offset)``, enough to resume the stream later."""
        return self._seed, self._offset

    def set_state(self, state: tuple[int, int]) -> None:
        """Restore a state from :meth:`get_state`."""
        seed, offset = state
        self.manual_seed(seed)
        self.offset = offset

    # -- launch geometry -----------------------------------------------------------------------

    def launch(self, numel: int) -> tuple[int, int]:
        """Return ``(threads, offset_increment)`` of PyTorch's launch for a draw of ``numel``.

        ``threads`` = block size * grid size; the increment is what the draw adds to the offset.
        """
        numel = int(numel)
        if numel < 1:
            raise ValueError(f"CudaPhiloxGenerator: numel must be >= 1, got {numel}")
        grid = (numel + _BLOCK_SIZE - 1) // _BLOCK_SIZE
        blocks_per_sm = self.max_threads_per_sm // _BLOCK_SIZE
        grid = min(self.num_sms * blocks_per_sm, grid)
        threads = _BLOCK_SIZE * grid
        increment = ((numel - 1) // (threads * _UNROLL) + 1) * _MAX_OFFSETS_PER_CALL
        increment = (increment + 3) // 4 * 4
        return threads, increment

    # -- draws ---------------------------------------------------------------------------------

    def rand_bits(self, numel: int) -> np.ndarray:
        """The uint32 Philox words behind the next ``rand(numel)``, in element order.

        Advances the offset exactly as :meth:`rand` does.
        """
        numel = int(numel)
        if numel < 0:
            raise ValueError(f"CudaPhiloxGenerator: numel must be >= 0, got {numel}")
        if numel == 0:
            return np.empty(0, dtype=np.uint32)  # torch returns before touching the generator
        if numel > _MAX_NUMEL:
            raise ValueError(
                f"CudaPhiloxGenerator: draws of more than {_MAX_NUMEL} elements are split by PyTorch "
                f"into several launches, which is not modelled (asked for {numel})"
            )
        threads, increment = self.launch(numel)
        rounds = (numel - 1) // (threads * _UNROLL) + 1  # curand_uniform4 calls per thread
        base = self._offset // 4
        # Counter of thread i in call j: low 64 bits = offset/4 + j, high 64 bits = i.
        j = np.arange(rounds, dtype=np.uint64)[:, None]
        i = np.arange(threads, dtype=np.uint64)[None, :]
        lo64 = np.uint64(base) + j  # base < 2**62, no wrap for any realistic j
        counter = np.empty((rounds, threads, 4), dtype=np.uint32)
        counter[..., 0] = (lo64 & _MASK32).astype(np.uint32)
        counter[..., 1] = (lo64 >> _SHIFT32).astype(np.uint32)
        counter[..., 2] = (i & _MASK32).astype(np.uint32)
        counter[..., 3] = (i >> _SHIFT32).astype(np.uint32)
        key = np.array([self._seed & 0xFFFFFFFF, self._seed >> 32], dtype=np.uint32)
        words = philox4x32(counter, key)  # [rounds, threads, 4]
        # Element j*4*threads + c*threads + i takes word c of thread i's call j.
        flat = words.transpose(0, 2, 1).reshape(-1)[:numel]
        self._offset += increment
        return flat

    def rand(self, numel: int) -> np.ndarray:
        """Draw like ``torch.rand(numel, device='cuda')``: float32 in [0, 1), 1-D, advancing the offset."""
        u = curand_uniform(self.rand_bits(numel))
        # torch's uniform_ flips cuRAND's (0, 1] to [0, 1) by mapping 1.0 to 0.0.
        u[u == np.float32(1.0)] = np.float32(0.0)
        return u

    def rand_like(self, shape: tuple[int, ...]) -> np.ndarray:
        """Draw like ``torch.rand_like`` of a contiguous float32 tensor of ``shape``."""
        shape = tuple(int(s) for s in shape)
        numel = int(np.prod(shape, dtype=np.int64))
        return self.rand(numel).reshape(shape)

    def __repr__(self) -> str:
        return (
            f"CudaPhiloxGenerator(seed={self._seed}, offset={self._offset}, "
            f"num_sms={self.num_sms}, max_threads_per_sm={self.max_threads_per_sm})"
        )


def rand_like_many(generators: Sequence[CudaPhiloxGenerator], shapes: Sequence[tuple[int, ...]],
                   where: Optional[Sequence[np.ndarray]] = None) -> list[np.ndarray]:
    """``[g.rand_like(s) for g, s in zip(generators, shapes)]`` with one Philox evaluation for all of them.

    Each generator advances exactly as its own ``rand_like`` would, and the draws are bit for bit the same:
    this only gathers the counters and keys of many small draws (a MaskGIT step's position noise, one
    [C, T] per request of a batch) into one vectorised call instead of one call per request. With ``where``
    (one boolean array of each shape), only those elements are computed and returned, as 1-D arrays in C
    order: each element is one Philox word of its own counter (thread, call), so the others need not be
    computed. A draw with several calls per thread and no mask (or a mask keeping over a quarter of it) is made
    whole, one call per thread giving four elements.
    """
    if len(generators) != len(shapes) or (where is not None and len(where) != len(shapes)):
        raise ValueError(f"rand_like_many: {len(generators)} generators, {len(shapes)} shapes"
                         + (f", {len(where)} masks" if where is not None else ""))
    shapes = [tuple(int(d) for d in s) for s in shapes]
    out: list[Optional[np.ndarray]] = [None] * len(shapes)
    # The draws made here, one row each: index, element count, threads, elements per call, offset / 4, seed.
    rows: list[tuple[int, int, int, int, int, int]] = []
    for j, (g, shape) in enumerate(zip(generators, shapes)):
        numel = math.prod(shape)
        if where is not None and np.shape(where[j]) != shape:
            raise ValueError(f"rand_like_many: mask {j} has shape {np.shape(where[j])}, the draw {shape}")
        if numel == 0:
            out[j] = np.empty(shape if where is None else 0, dtype=np.float32)
            continue
        threads, increment = g.launch(numel)
        per_call = threads * _UNROLL
        if numel > per_call and (where is None or 4 * np.count_nonzero(where[j]) > numel):
            u = g.rand(numel)  # several calls per thread, most elements wanted: whole calls are cheaper
            out[j] = u.reshape(shape) if where is None else u[np.asarray(where[j]).reshape(-1)]
            continue
        rows.append((j, numel, threads, per_call, g.offset // 4, g.seed))
        g.offset = g.offset + increment
    if rows:
        # Every wanted element of every draw at once: its draw d, and its index e in that draw (C order). (Set
        # up per draw, the counters of 32 five-second requests' masked positions took longer than the Philox
        # rounds themselves.)
        j_of, size, threads, per_call, base, seed = (np.array(col, dtype=np.uint64) for col in zip(*rows))
        starts = np.zeros(len(rows) + 1, dtype=np.uint64)
        np.cumsum(size, out=starts[1:])
        if where is None:
            flat = np.arange(int(starts[-1]), dtype=np.uint64)
        else:
            flat = np.flatnonzero(np.concatenate([np.asarray(where[int(j)]).reshape(-1) for j in j_of]))
            flat = flat.astype(np.uint64)
        d = np.searchsorted(starts[1:], flat, side="right")
        counts = np.bincount(d, minlength=len(rows))
        e = flat - starts[d]
        lo64 = base[d]  # base < 2**62, no wrap for any realistic call count
        if (size <= threads).all():  # one element a thread (a MaskGIT step's draws): word 0 of call 0
            thread, word = e, None
        else:  # element e is word (e % per_call) // threads of thread e % threads's call e // per_call
            thread = e % threads[d]
            lo64 = lo64 + e // per_call[d]
            word = (e % per_call[d]) // threads[d]
        words = _philox_lanes(lo64 & _MASK32, lo64 >> _SHIFT32, thread & _MASK32, thread >> _SHIFT32,
                              seed[d] & _MASK32, seed[d] >> _SHIFT32)
        bits = words[0] if word is None else np.choose(word.astype(np.intp), words)
        u = curand_uniform(bits.astype(np.uint32))
        u[u == np.float32(1.0)] = np.float32(0.0)
        for (j, *_), part in zip(rows, np.split(u, np.cumsum(counts)[:-1])):
            out[j] = part.reshape(shapes[j]) if where is None else part
    return out
