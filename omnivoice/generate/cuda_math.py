"""CUDA's float32 ``logf``, bit for bit, in numpy.

The reference's Gumbel noise is ``-log(-log(u + 1e-10) + 1e-10)`` evaluated by ``torch.log`` on the
GPU, that is CUDA's ``logf`` (libdevice ``__nv_logf``). It is not correctly rounded, so a correctly
rounded log differs from it in the last bit for a few percent of inputs. This module re-creates
its instruction sequence (read from ``nvcc -arch=sm_90 -ptx`` of a kernel calling ``logf``, CUDA
13.0) with an exact float32 fused multiply-add, so the port's noise equals the reference's.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fma_f32", "logf"]

_F32 = np.float32
_F64 = np.float64


def _f32_bits(x: int) -> np.float32:
    return np.array([x], dtype=np.uint32).view(np.float32)[0]


def fma_f32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``fmaf(a, b, c)``: ``a * b + c`` rounded once to float32 (round to nearest even).

    The float64 product of two float32 is exact and the float64 sum rounds at most once; that
    rounding can only mislead the final rounding when the float64 sum lands exactly halfway
    between two float32 values, so there (rarely) the exact error of the sum (TwoSum) decides.
    Valid for normal float32 results (no overflow or underflow handling is needed here).
    """
    p = np.atleast_1d(np.asarray(a, _F32).astype(_F64) * np.asarray(b, _F32).astype(_F64))
    c64 = np.asarray(c, _F32).astype(_F64)
    s = np.atleast_1d(p + c64)
    r = s.astype(_F32)
    # Halfway between float32 neighbours: the 29 mantissa bits below float32 precision are 100...0.
    tie = (s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    if tie.any():
        ps, cs = np.broadcast_to(p, s.shape)[tie], np.broadcast_to(c64, s.shape)[tie]
        ss, rs = s[tie], r[tie]
        bv = ss - ps
        err = (ps - (ss - bv)) + (cs - bv)
        r64 = rs.astype(_F64)
        n = np.nextafter(rs, np.where(ss > r64, _F32(np.inf), _F32(-np.inf)))
        # The exact value lies on the side of the error: go to the neighbour when it points there.
        pick_n = (err != 0) & ((n.astype(_F64) - ss) * err > 0)
        r[tie] = np.where(pick_n, n, rs)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    return r.reshape(shape)


# Constants of the polynomial, as the PTX holds them (hex float32 bit patterns).
_C = [_f32_bits(x) for x in (0xBE055027, 0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B,
                             0xBE7FFF22, 0x3EAAAA78, 0xBF000000)]
_LN2 = _f32_bits(0x3F317218)
_TWO_M23 = _f32_bits(0x34000000)
_FLT_MIN = _f32_bits(0x00800000)


def logf(x: np.ndarray) -> np.ndarray:
    """CUDA's ``logf`` for a float32 array (same bits as ``torch.log`` of float32 on an NVIDIA GPU)."""
    x = np.asarray(x, dtype=_F32)
    small = x < _FLT_MIN
    xs = np.where(small, x * _F32(2.0**23), x).astype(_F32)
    i0 = np.where(small, _F32(-23.0), _F32(0.0)).astype(_F32)
    bits = xs.view(np.uint32).astype(np.int64)
    e = (bits - 0x3F2AAAAB) & 0xFF800000  # as the 32-bit and of the PTX, kept non-negative here
    e = np.where(e >= 2**31, e - 2**32, e)  # reinterpret as int32
    m = ((bits - e) & 0xFFFFFFFF).astype(np.uint32).view(_F32)
    i = fma_f32(e.astype(_F32), _TWO_M23, i0)
    f = (m - _F32(1.0)).astype(_F32)
    p = fma_f32(_C[0], f, _C[1])
    for c in _C[2:]:
        p = fma_f32(p, f, c)
    q = (f * p).astype(_F32)
    r = fma_f32(q, f, f)
    r = fma_f32(i, _LN2, r)
    # Special inputs as the kernel treats them: +inf -> +inf, NaN or negative -> NaN, 0 -> -inf.
    special = xs.view(np.uint32) >= np.uint32(0x7F800000)
    with np.errstate(invalid="ignore"):
        r = np.where(special, xs * _F32(np.inf) + _F32(np.inf), r)
    r = np.where(xs == 0, _F32(-np.inf), r)
    return r.astype(_F32)
