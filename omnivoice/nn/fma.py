"""Float32 products and channels-last convolutions with FMA on x86 CPUs: the package's kernel
(omnivoice/csrc/fma.c).

A matrix is packed once at load into panels of 16 (AVX2) or 32 (AVX-512) outputs; a product is one custom CPU
node, blocked for the caches, every output one chain of FMAs in k order. A channels-last Conv1d reads its columns
straight from the activation (`conv`): no column buffer, and the bias is added in the same node. ggml's F32 GEMM
reads its right operand unblocked, which the codec's long, narrow products pay for (BENCHMARKS.md). The LM's
attention on the CPU (`attention`) runs on the same tiles.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..ggml import ffi, ops, types
from .basic import custom_node
from .packed import Kernel, PackedMatrix

KERNEL = Kernel("fma", "omnivoice_fma_", 1, packs_input=True)


def available() -> bool:
    """Whether the build has the kernel (libomnivoice-ops with fma.c) and this CPU runs it (AVX2 and FMA)."""
    return KERNEL.available()


def pack(values: np.ndarray) -> PackedMatrix:
    """A float matrix [M, K] (ggml's [K, M]) packed for the FMA kernel."""
    return PackedMatrix(KERNEL, values)


@dataclass(frozen=True, eq=False)
class PackedConv:
    """A conv weight packed for the kernel, standing in for its ggml tensor on the CPU: `ne` is that tensor's shape
    ([IC, K, OC] for nn.conv1d_cl, [IC, K * OC] for nn.conv_transpose1d_cl), `packed` the matrix [OC, K * IC]
    (resp. [K * OC, IC]) whose product is the conv's."""

    packed: PackedMatrix
    ne: tuple[int, ...]

    @classmethod
    def of(cls, cl: np.ndarray) -> "PackedConv":
        """From the channels-last weight (nn.conv_weight_cl's (OC, K, IC) or nn.conv_transpose_weight_cl's
        (K * OC, IC))."""
        return cls(pack(cl.reshape(cl.shape[0], -1)), tuple(reversed(cl.shape)))


def conv(ctx, x, packed: PackedMatrix, taps: int, bias=None, stride: int = 1, padding: int = 0,
         dilation: int = 1):
    """PyTorch Conv1d on channels-last x [IC, T] (F32, contiguous rows) with a weight packed from
    `nn.conv_weight_cl`'s [OC, taps * IC] -> [OC, T_out], plus `bias` [OC] when given: one node on the CPU."""
    IC, T = x.ne[0], x.ne[1]
    if packed.K != taps * IC:
        raise ValueError(f"conv: packed weight of K = {packed.K} does not fit {taps} taps of {IC} channels")
    t_out = (T + 2 * padding - dilation * (taps - 1) - 1) // stride + 1
    if t_out < 1:
        raise ValueError(f"conv: {T} samples are too few for kernel {taps}, dilation {dilation}")
    # the node reads its geometry through this struct: kept as long as the packed weight
    kept = _GEOMETRY.setdefault(packed, {})
    key = (taps, stride, dilation, padding)
    if key not in kept:
        kept[key] = ffi.new("struct omnivoice_fma_conv *", [packed.userdata, *key])
    return custom_node(ctx, ops.omnivoice_fma_conv, packed.M, t_out, [x] if bias is None else [x, bias], kept[key])


_GEOMETRY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def attention_supported(head_dim: int) -> bool:
    """Whether `attention` runs here: the kernel on this CPU, and heads whose size is a multiple of its panels
    (16 values with AVX2, 32 with AVX-512)."""
    try:
        return available() and bool(ops.omnivoice_fma_attention_supported(head_dim))
    except AttributeError:  # a libomnivoice-ops built before the attention kernel
        return False


def attention(ctx, q, k, v):
    """softmax(q k^T / sqrt(D)) v over one segment, every position attending every other: q [D, H, n], k and v
    [D, Hkv, n] (F32 views whose heads' rows of D are contiguous; H a multiple of Hkv) -> [D * H, n], one node on the
    CPU. Float32 as ggml's CPU flash attention with F32 K/V, in blocks of queries on the kernel's tiles instead of
    one query at a time (csrc/fma.c omnivoice_fma_attention)."""
    D, H, n = q.ne[0], q.ne[1], q.ne[2]
    if any(t.type != types.F32 or t.nb[0] != 4 for t in (q, k, v)):
        raise ValueError("attention: q, k and v must be F32 with contiguous rows")
    if k.ne[0] != D or v.ne[0] != D or k.ne[2] != n or v.ne[2] != n or k.ne[1] != v.ne[1] or H % k.ne[1]:
        raise ValueError(f"attention: q {list(q.ne)[:3]}, k {list(k.ne)[:3]} and v {list(v.ne)[:3]} do not fit "
                         "[D, H, n], [D, Hkv, n], [D, Hkv, n]")
    return custom_node(ctx, ops.omnivoice_fma_attention, D * H, n, [q, k, v])
