"""The codec's SemanticEncoder: convolutions over HuBERT features (`encoder_semantic.*`), conv layout [T, C].

    conv (k, pad k // 2, no bias)
    per block i: residual units (ELU, conv k_unit dilation d no bias, ELU, conv k1 no bias, + shortcut) for each
                 dilation, then conv (k 3 if stride 1 else 2 * stride, pad (k - 1) // 2, bias)
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import nn
from ..ggml import lib

P = "encoder_semantic."


@dataclass(frozen=True)
class SemanticConfig:
    strides: tuple[int, ...] = (1, 1)
    block_dilations: tuple[int, ...] = (1, 1)


def residual_unit(ctx, w, p: str, x, dilation: int):
    """x [T, C] -> [T, C]."""
    k = w[p + "conv1.weight"].ne[0]
    y = nn.conv1d(ctx, lib.ggml_elu(ctx, x), w[p + "conv1.weight"], w.get(p + "conv1.bias"),
                  padding=(k - 1) // 2 * dilation, dilation=dilation)
    y = nn.conv1d(ctx, lib.ggml_elu(ctx, y), w[p + "conv2.weight"], w.get(p + "conv2.bias"))
    return lib.ggml_add(ctx, x, y)


def encode(ctx, w, cfg: SemanticConfig, x):
    """Semantic features x [T, C] -> [T / prod(strides), C']."""
    weight = w[P + "conv.weight"]
    x = nn.conv1d(ctx, x, weight, w.get(P + "conv.bias"), padding=weight.ne[0] // 2)
    for i, stride in enumerate(cfg.strides):
        p = f"{P}conv_blocks.{i}."
        for j, d in enumerate(cfg.block_dilations):
            x = residual_unit(ctx, w, f"{p}res_units.{j}.", x, d)
        weight = w[p + "conv.weight"]
        x = nn.conv1d(ctx, x, weight, w.get(p + "conv.bias"), stride=stride, padding=(weight.ne[0] - 1) // 2)
    return x
