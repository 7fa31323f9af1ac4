"""Products on the package's own CPU kernels (omnivoice/csrc): a matrix packed once at load into a kernel's
layout, multiplied by one custom graph node.

Four kernels share this plumbing: `nn.int16` (13-bit integers with VPMADDWD, x86 with AVX2), `nn.int8` (8-bit
activations and 7-bit weights with VPMADDUBSW, AVX2), `nn.amx` (BF16 on Intel's AMX tiles) and `nn.fma`
(float32, AVX2 or AVX-512). Each C kernel exports `<prefix>supported`, `<prefix>packed_bytes(M, K)`,
`<prefix>pack(w, M, K, out)` and `<prefix>mul_mat`, a ggml_custom_4d function whose userdata is
`struct <prefix>weight {data, M, K}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ggml import ffi, lib, ops, types
from .basic import custom_node


@dataclass(frozen=True)
class Kernel:
    """One of the package's product kernels: `name` as `cpu_products` spells it, the C symbols' `prefix`, the
    `block` K must be a multiple of, and the type the input is cast to before the node (None: F32 as it is), or
    `packs_input`: a node of the kernel's (`<prefix>pack_cols`) lays the input out for it first, in groups of
    `<prefix>cols_per_group()` columns."""

    name: str
    prefix: str
    block: int
    input_type: int | None = None
    packs_input: bool = False

    def symbol(self, name: str):
        return getattr(ops, self.prefix + name)

    def available(self) -> bool:
        """Whether the build has the kernel (libomnivoice-ops) and this CPU and OS run it."""
        if ops is None:
            return False
        try:
            return bool(self.symbol("supported")())
        except AttributeError:  # a libomnivoice-ops built before this kernel
            return False

    def fits(self, ne: tuple[int, ...] | list[int]) -> bool:
        """Whether a matrix of ggml shape ne = [K, M] can be packed (2-D, K a multiple of the block)."""
        return len(ne) == 2 and ne[0] % self.block == 0

    def prepare(self, ctx, x):
        """x as the kernel's node takes it: packed or cast to `input_type` (a node), or x itself."""
        if self.packs_input:
            n = int(self.symbol("cols_per_group")())
            return custom_node(ctx, self.symbol("pack_cols"), x.ne[0] * n, -(-x.ne[1] // n), [x])
        return x if self.input_type is None else lib.ggml_cast(ctx, x, self.input_type)


class PackedMatrix:
    """A float matrix [M, K] (numpy order; ggml's [K, M]) in a kernel's layout, with the node's userdata."""

    def __init__(self, kernel: Kernel, values: np.ndarray) -> None:
        values = np.ascontiguousarray(values, dtype=np.float32)
        if values.ndim != 2 or values.shape[1] % kernel.block:
            raise ValueError(f"{kernel.name} products pack [M, K] matrices with K a multiple of {kernel.block}, "
                             f"got {list(values.shape)}")
        self.kernel = kernel
        self.M, self.K = (int(n) for n in values.shape)
        self.buffer = _aligned(int(kernel.symbol("packed_bytes")(self.M, self.K)))
        kernel.symbol("pack")(ffi.cast("const float *", ffi.from_buffer(values)), self.M, self.K,
                              ffi.from_buffer(self.buffer))
        # the node reads the weight through this struct: it lives as long as the PackedMatrix
        self.userdata = ffi.new(f"struct {kernel.prefix}weight *",
                                {"data": ffi.from_buffer(self.buffer), "M": self.M, "K": self.K})

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def product(self, ctx, x, prepared=None):
        """W x for x [K, N] F32 with contiguous rows -> [M, N] F32: one custom node on ggml's threads, after a
        node that casts or packs x where the kernel takes it so (Kernel.prepare) unless `prepared` is that node."""
        prepared = self.kernel.prepare(ctx, x) if prepared is None else prepared
        return custom_node(ctx, self.kernel.symbol("mul_mat"), self.M, x.ne[1], [prepared], self.userdata)


def _aligned(nbytes: int, to: int = 64) -> np.ndarray:
    """An uninitialised byte array whose data starts on a `to`-byte boundary. numpy's large arrays start 16 bytes
    into their pages: a kernel's 64-byte rows of weights would then cross cache lines, and AVX-512 loads split."""
    raw = np.empty(nbytes + to, np.uint8)
    start = -int(raw.ctypes.data) % to
    return raw[start:start + nbytes]


def _address(t) -> int:
    return int(ffi.cast("uintptr_t", t))


class PackedProducts:
    """The packed matrices of a model for one kernel, by the ggml weight tensor each replaces."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._packed: dict[int, PackedMatrix] = {}

    def add(self, weight, values: np.ndarray) -> None:
        """Pack `values` [M, K] as the product of the weight tensor `weight` (ggml shape [K, M])."""
        if (int(weight.ne[0]), int(weight.ne[1])) != (values.shape[1], values.shape[0]):
            raise ValueError(f"values {list(values.shape)} do not match the weight's ggml shape "
                             f"{[int(weight.ne[0]), int(weight.ne[1])]}")
        self._packed[_address(weight)] = PackedMatrix(self.kernel, values)

    def __len__(self) -> int:
        return len(self._packed)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self._packed.values())

    def over(self, base: Callable) -> Callable:
        """A product function (ctx, w, x) that runs the packed kernel where `w` was packed and x is an F32
        matrix of rows as long as its K, and `base` (e.g. ggml_mul_mat) otherwise.

        The products of one input share its cast or packing (Kernel.prepare): q, k and v one, gate and up
        another, where each took its own (197 BF16 casts an LM step, 85 shared). The
        function keeps the nodes it made for as long as it lives: make one per graph build (models.lm.products does, per layer),
        never across graphs, whose tensors may reuse a freed one's address."""
        prepared: dict[int, object] = {}

        def product(ctx, w, x):
            packed = self._packed.get(_address(w))
            if (packed is None or x.type != types.F32 or x.nb[0] != 4 or x.ne[0] != packed.K
                    or x.ne[2] != 1 or x.ne[3] != 1):
                return base(ctx, w, x)
            key = _address(x)
            if key not in prepared:
                prepared[key] = self.kernel.prepare(ctx, x)
            return packed.product(ctx, x, prepared[key])
        return product
