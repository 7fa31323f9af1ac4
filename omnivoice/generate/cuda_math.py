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
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    a, b, c = (np.broadcast_to(np.asarray(v, _F32), shape).reshape(-1) for v in (a, b, c))
    out = np.empty(a.size, _F32)
    _Fma(a.size)(a, b.astype(_F64), c.astype(_F64), out)
    return out.reshape(shape)


_LOW29 = np.uint64(0x1FFFFFFF)
_HALF29 = np.uint64(0x10000000)


class _Fma:
    """fmaf over 1-D arrays of one length into float32 `out`, in float64 buffers reused from call to call
    (fresh temporaries of 64 000 values, one MaskGIT step of 64 requests, cost page faults that made logf 25 %
    slower than the operations themselves)."""

    def __init__(self, n: int) -> None:
        self.s = np.empty(n, _F64)
        self.low = np.empty(n, np.uint64)
        self.tie = np.empty(n, bool)

    def __call__(self, a, b: np.ndarray, c, out: np.ndarray) -> np.ndarray:
        """out = float32(a * b + c), one rounding: `a` float32 values (array or number), `b` a float64
        array of float32 values, `c` float64 of float32 values (array or number)."""
        s = self.s
        np.multiply(a, b, out=s)       # exact: two float32 factors
        np.add(s, c, out=s)            # one float64 rounding
        # Halfway between float32 neighbours: the 29 mantissa bits below float32 precision are 100...0.
        np.bitwise_and(s.view(np.uint64), _LOW29, out=self.low)
        np.equal(self.low, _HALF29, out=self.tie)
        fix = None
        if self.tie.any():  # decided before `out` is written: it may be `a` or `c`
            t = self.tie
            ps = (a[t] if np.ndim(a) else _F64(a)) * b[t]
            cs = c[t] if np.ndim(c) else c
            ss = s[t]
            rs = ss.astype(_F32)
            bv = ss - ps
            err = (ps - (ss - bv)) + (cs - bv)
            n = np.nextafter(rs, np.where(ss > rs.astype(_F64), _F32(np.inf), _F32(-np.inf)))
            # The exact value lies on the side of the error: go to the neighbour when it points there.
            pick_n = (err != 0) & ((n.astype(_F64) - ss) * err > 0)
            fix = (t.copy(), np.where(pick_n, n, rs))
        np.copyto(out, s, casting="unsafe")
        if fix is not None:
            out[fix[0]] = fix[1]
        return out


# Constants of the polynomial, as the PTX holds them (hex float32 bit patterns).
_C = [_f32_bits(x) for x in (0xBE055027, 0x3E1039F6, 0xBDF8CDCC, 0x3E0F2955, 0xBE2AD8B9, 0x3E4CED0B,
                             0xBE7FFF22, 0x3EAAAA78, 0xBF000000)]
_LN2 = _f32_bits(0x3F317218)
_TWO_M23 = _f32_bits(0x34000000)
_FLT_MIN = _f32_bits(0x00800000)
_C64 = [float(c) for c in _C]


def logf(x: np.ndarray) -> np.ndarray:
    """CUDA's ``logf`` for a float32 array (same bits as ``torch.log`` of float32 on an NVIDIA GPU).

    The polynomial's fused multiply-adds run as exact float64 products rounded once to float32, in
    buffers reused across them (_Fma), the reduced argument converted to float64 once. A MaskGIT step
    draws Gumbel noise with two of these per masked position."""
    x = np.asarray(x, dtype=_F32)
    shape = x.shape
    x = x.reshape(-1)
    small = x < _FLT_MIN
    xs = x.copy()
    xs[small] *= _F32(2.0**23)   # subnormals (and zero, negatives: special below) scaled into the normals
    bits = xs.view(np.uint32).astype(np.int64)
    e = (bits - 0x3F2AAAAB) & 0xFF800000  # as the 32-bit and of the PTX, kept non-negative here
    e = np.where(e >= 2**31, e - 2**32, e)  # reinterpret as int32
    m = ((bits - e) & 0xFFFFFFFF).astype(np.uint32).view(_F32)
    # fma(e, 2^-23, i0): an integer, exact in float32 and float64
    i = e.astype(_F64) * 2.0**-23
    i[small] -= 23.0
    f = (m - _F32(1.0)).astype(_F64)   # exact (m lies in [2/3, 4/3])
    fma = _Fma(x.size)
    p = np.empty(x.size, _F32)
    fma(_F32(_C[0]), f, _C64[1], p)
    for c in _C64[2:]:
        fma(p, f, c, p)
    q = np.multiply(f, p, out=fma.s).astype(_F32)   # a float32 product: one rounding
    r = fma(q, f, f, np.empty(x.size, _F32))
    r = fma(_LN2, i, r.astype(_F64), r)
    # Special inputs as the kernel treats them: +inf -> +inf, NaN or negative -> NaN, 0 -> -inf.
    special = xs.view(np.uint32) >= np.uint32(0x7F800000)
    with np.errstate(invalid="ignore"):
        r[special] = xs[special] * _F32(np.inf) + _F32(np.inf)
    r[xs == 0] = -np.inf
    return r.reshape(shape)
