"""Float32 products and channels-last convolutions with FMA on x86 CPUs: the package's kernel
(omnivoice/csrc/fma.c).

A matrix is packed once at load into panels of 16 (AVX2) or 32 (AVX-512) outputs; a product is one custom CPU
node, blocked for the caches, every output one chain of FMAs in k order. A channels-last Conv1d reads its columns
straight from the activation (`conv`): no column buffer, and the bias is added in the same node. ggml's F32 GEMM
reads its right operand unblocked, which the codec's long, narrow products pay for (BENCHMARKS.md).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..ggml import ffi, ops
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
