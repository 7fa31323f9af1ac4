"""Matrix products in 16-bit integers on x86 CPUs with AVX2: the package's kernel (omnivoice/csrc/products.c).

A matrix is packed once at load (`PackedMatrix`: 13-bit values with a float scale per row and block of 128
along K); a product is then one custom CPU node that quantizes its input to 13 bits per column and block and
multiplies with VPMADDWD (16 multiply-adds an instruction against an FMA's 8). On the 2-core Zen 3 (AVX2, no
AVX-512) the LM's products ran 1.4-1.8x ggml's F16 GEMM and 2.3-2.6x its F32 one, with the rounding error of
F16 operands (BENCHMARKS.md, "int16 products"). Elsewhere ggml's own kernels are the faster ones: CPUs with
AVX-512 have wider FMAs, BF16 dot products or AMX.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..ggml import ffi, lib, ops, types

# products.c's KB, QW and QX: K a block (K must be a multiple), and the largest |q| of W's and of x's values
BLOCK = 128
W_LEVELS = 4095
X_LEVELS = 4095


def available() -> bool:
    """Whether the build has the kernel (libomnivoice-ops with products.c) and this CPU runs it (AVX2, FMA)."""
    if ops is None:
        return False
    try:
        return bool(ops.omnivoice_i16_supported())
    except AttributeError:  # a libomnivoice-ops built before products.c
        return False


def fits(ne: tuple[int, ...] | list[int]) -> bool:
    """Whether a matrix of ggml shape ne = [K, M] can be packed (2-D, K a multiple of the block)."""
    return len(ne) == 2 and ne[0] % BLOCK == 0


class PackedMatrix:
    """A float matrix [M, K] (numpy order; ggml's [K, M]) in the kernel's layout, with the node's userdata."""

    def __init__(self, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=np.float32)
        if values.ndim != 2 or values.shape[1] % BLOCK:
            raise ValueError(f"int16 products pack [M, K] matrices with K a multiple of {BLOCK}, got "
                             f"{list(values.shape)}")
        self.M, self.K = (int(n) for n in values.shape)
        self.buffer = np.empty(int(ops.omnivoice_i16_packed_bytes(self.M, self.K)), np.uint8)
        ops.omnivoice_i16_pack(ffi.cast("const float *", ffi.from_buffer(values)), self.M, self.K,
                               ffi.from_buffer(self.buffer))
        # the node reads the weight through this struct: it lives as long as the PackedMatrix
        self.userdata = ffi.new("struct omnivoice_i16_weight *",
                                {"data": ffi.from_buffer(self.buffer), "M": self.M, "K": self.K})

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def product(self, ctx, x):
        """W x for x [K, N] F32 with contiguous rows -> [M, N] F32: one custom node on ggml's threads."""
        args = ffi.new("struct ggml_tensor *[1]", [x])
        return lib.ggml_custom_4d(ctx, types.F32, self.M, x.ne[1], 1, 1, args, 1, ops.omnivoice_i16_mul_mat, -1,
                                  self.userdata)


def _address(t) -> int:
    return int(ffi.cast("uintptr_t", t))


class Int16Products:
    """The packed matrices of a model, by the ggml weight tensor each replaces."""

    def __init__(self) -> None:
        self._packed: dict[int, PackedMatrix] = {}

    def add(self, weight, values: np.ndarray) -> None:
        """Pack `values` [M, K] as the product of the weight tensor `weight` (ggml shape [K, M])."""
        if (int(weight.ne[0]), int(weight.ne[1])) != (values.shape[1], values.shape[0]):
            raise ValueError(f"values {list(values.shape)} do not match the weight's ggml shape "
                             f"{[int(weight.ne[0]), int(weight.ne[1])]}")
        self._packed[_address(weight)] = PackedMatrix(values)

    def __len__(self) -> int:
        return len(self._packed)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self._packed.values())

    def over(self, base: Callable) -> Callable:
        """A product function (ctx, w, x) that runs the packed kernel where `w` was packed and x is an F32
        matrix of rows as long as its K, and `base` (e.g. ggml_mul_mat) otherwise."""
        def product(ctx, w, x):
            packed = self._packed.get(_address(w))
            if (packed is None or x.type != types.F32 or x.nb[0] != 4 or x.ne[0] != packed.K
                    or x.ne[2] != 1 or x.ne[3] != 1):
                return base(ctx, w, x)
            return packed.product(ctx, x)
        return product
