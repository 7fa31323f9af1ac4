"""Weight records of the small modules that several model parts share (ggml shapes, ne0 first)."""

from __future__ import annotations

from dataclasses import dataclass

from ..ggml import Tensor


@dataclass(frozen=True)
class Linear:
    """y = W x + b: weight [IN, OUT] (torch (OUT, IN)), bias [OUT] or None."""

    weight: Tensor
    bias: Tensor | None = None


@dataclass(frozen=True)
class Conv:
    """A Conv1d: weight [K, IC / groups, OC] (torch (OC, IC / groups, K)), bias [OC] or None. A ConvTranspose1d
    keeps the converter's layout instead: weight [IC, K * OC] (omnivoice.gguf.layouts)."""

    weight: Tensor
    bias: Tensor | None = None


@dataclass(frozen=True)
class Norm:
    """An affine LayerNorm or GroupNorm: weight and bias [C]."""

    weight: Tensor
    bias: Tensor
