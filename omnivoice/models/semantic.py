"""The codec's SemanticEncoder: convolutions over HuBERT features (`encoder_semantic.*`), conv layout [T, C].

    conv (k, pad k // 2, no bias)
    per block i: residual units (ELU, conv k_unit dilation d no bias, ELU, conv k1 no bias, + shortcut) for each
                 dilation, then conv (k 3 if stride 1 else 2 * stride, pad (k - 1) // 2, bias)
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import nn
from ..ggml import lib, named
from .common import Conv


@dataclass(frozen=True)
class SemanticConfig:
    strides: tuple[int, ...] = (1, 1)
    block_dilations: tuple[int, ...] = (1, 1)


@dataclass(frozen=True)
class ResidualUnit:
    conv1: Conv        # [k_unit, C, C], no bias
    conv2: Conv        # [1, C, C], no bias


@dataclass(frozen=True)
class Block:
    res_units: tuple[ResidualUnit, ...]   # one per block dilation
    conv: Conv                            # [k, C, C'] + [C'], k = 3 for stride 1, else 2 * stride


@dataclass(frozen=True)
class SemanticWeights:
    conv: Conv                            # [k, C, C], no bias
    blocks: tuple[Block, ...]


def residual_unit(ctx, u: ResidualUnit, x, dilation: int):
    """x [T, C] -> [T, C]."""
    k = u.conv1.weight.ne[0]
    y = nn.conv1d(ctx, lib.ggml_elu(ctx, x), u.conv1.weight, u.conv1.bias,
                  padding=(k - 1) // 2 * dilation, dilation=dilation)
    y = nn.conv1d(ctx, lib.ggml_elu(ctx, y), u.conv2.weight, u.conv2.bias)
    return lib.ggml_add(ctx, x, y)


def encode(ctx, w: SemanticWeights, cfg: SemanticConfig, x):
    """Semantic features x [T, C] -> [T / prod(strides), C']."""
    x = nn.conv1d(ctx, x, w.conv.weight, w.conv.bias, padding=w.conv.weight.ne[0] // 2)
    for i, (block, stride) in enumerate(zip(w.blocks, cfg.strides)):
        for unit, d in zip(block.res_units, cfg.block_dilations):
            x = residual_unit(ctx, unit, x, d)
        weight = block.conv.weight
        x = nn.conv1d(ctx, x, weight, block.conv.bias, stride=stride, padding=(weight.ne[0] - 1) // 2)
        named(x, "sem_block", i)
    return x
