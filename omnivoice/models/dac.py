"""The DAC acoustic encoder and decoder of the Higgs Audio v2 codec, as ggml graphs.

Activations are conv layout [T, C] (time contiguous). Weights keep their GGUF names (`acoustic_encoder.*`,
`acoustic_decoder.*`, weight norm already folded by the checkpoint); each Snake's `inv_beta` = 1 / (alpha + 1e-9)
is derived at load time (`derived_tensors`). Kernel sizes and channel counts come from the weights, strides
from the config (the checkpoint's ratios 8 5 4 2 3).

Decoder (the reference's DacDecoder with HiggsAudioV2's changes: output_padding = stride % 2, no tanh):
    conv1 k7 -> 5 x [snake, conv_transpose (k 2s, stride s, pad ceil(s/2)), 3 residual units] -> snake -> conv2 k7
Encoder:
    conv1 k7 -> 5 x [3 residual units, snake, conv (k 2s, stride s, pad ceil(s/2))] -> snake -> conv2 k3
Residual unit (dilation d in 1, 3, 9): x + conv2_k1(snake2(conv1_k7_dil_d(snake1(x)))). Its padding 3d keeps the
length, so the reference's centre crop of the shortcut never triggers.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np

from .. import nn
from ..ggml import lib

DILATIONS = (1, 3, 9)


def derived_tensors(names: Iterable[str], prefixes: tuple[str, ...] = ("acoustic_encoder.", "acoustic_decoder."),
                    eps: float = 1e-9) -> dict[str, Callable]:
    """inv_beta = 1 / (alpha + eps) for every Snake under `prefixes`, in float32 as the reference computes it."""
    out: dict[str, Callable] = {}
    for name in names:
        if name.endswith(".alpha") and name.startswith(prefixes):
            out[name[: -len("alpha")] + "inv_beta"] = (
                lambda get, a=name: np.float32(1.0) / (get(a) + np.float32(eps)))
    return out


def snake(ctx, w, p: str, x):
    """Snake1d named `p` (p + "alpha", p + "inv_beta") on x [T, C]."""
    return nn.snake(ctx, x, w[p + "alpha"], w[p + "inv_beta"])


def conv(ctx, w, p: str, x, stride: int = 1, padding: int | None = None, dilation: int = 1):
    """Conv1d named `p` with bias; `padding` defaults to 'same' for odd kernels: (K - 1) // 2 * dilation."""
    weight = w[p + "weight"]
    if padding is None:
        padding = (weight.ne[0] - 1) // 2 * dilation
    return nn.conv1d(ctx, x, weight, w[p + "bias"], stride=stride, padding=padding, dilation=dilation)


def residual_unit(ctx, w, p: str, x, dilation: int):
    """DacResidualUnit: x [T, C] -> [T, C]."""
    y = snake(ctx, w, p + "snake1.", x)
    y = conv(ctx, w, p + "conv1.", y, dilation=dilation)
    y = snake(ctx, w, p + "snake2.", y)
    y = conv(ctx, w, p + "conv2.", y)
    return lib.ggml_add(ctx, x, y)


def decoder_block(ctx, w, p: str, x, stride: int):
    """DacDecoderBlock: x [T, IC] -> [stride * T, IC / 2]."""
    x = snake(ctx, w, p + "snake1.", x)
    bias = w[p + "conv_t1.bias"]
    x = nn.conv_transpose1d(ctx, x, w[p + "conv_t1.weight"], bias, stride=stride, padding=math.ceil(stride / 2),
                            output_padding=stride % 2, out_channels=bias.ne[0])
    for i, d in enumerate(DILATIONS):
        x = residual_unit(ctx, w, f"{p}res_unit{i + 1}.", x, d)
    return x


def decode(ctx, w, latent, upsampling_ratios: tuple[int, ...]):
    """DAC decoder: latent [T, hidden] -> audio [T * prod(ratios), 1]."""
    x = conv(ctx, w, "acoustic_decoder.conv1.", latent)                              # [T, C0]
    for i, stride in enumerate(upsampling_ratios):
        x = decoder_block(ctx, w, f"acoustic_decoder.block.{i}.", x, stride)          # [T * s, C / 2]
    x = snake(ctx, w, "acoustic_decoder.snake1.", x)
    return conv(ctx, w, "acoustic_decoder.conv2.", x)                                # [T * hop, 1]


def encoder_block(ctx, w, p: str, x, stride: int):
    """DacEncoderBlock: x [T, C] -> [T / stride, 2 C]."""
    for i, d in enumerate(DILATIONS):
        x = residual_unit(ctx, w, f"{p}res_unit{i + 1}.", x, d)
    x = snake(ctx, w, p + "snake1.", x)
    return conv(ctx, w, p + "conv1.", x, stride=stride, padding=math.ceil(stride / 2))


def encode(ctx, w, audio, downsampling_ratios: tuple[int, ...]):
    """DAC encoder: audio [N, 1] -> [N / hop, hidden] (lengths as PyTorch's conv arithmetic gives them)."""
    x = conv(ctx, w, "acoustic_encoder.conv1.", audio)                               # [N, C0]
    for i, stride in enumerate(downsampling_ratios):
        x = encoder_block(ctx, w, f"acoustic_encoder.block.{i}.", x, stride)          # [T / s, 2 C]
    x = snake(ctx, w, "acoustic_encoder.snake1.", x)
    return conv(ctx, w, "acoustic_encoder.conv2.", x)                                # [N / hop, hidden]


def encoder_conv_layers(kernels: list[int], downsampling_ratios: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """(kernel, stride, padding, dilation) of every Conv1d of the encoder in module order, as the reference lists
    them to predict the encoder's output length. `kernels` = [conv1, res-unit conv1 (k7), conv2]."""
    k_in, k_res, k_out = kernels
    layers = [(k_in, 1, (k_in - 1) // 2, 1)]
    for s in downsampling_ratios:
        for d in DILATIONS:
            layers += [(k_res, 1, (k_res - 1) // 2 * d, d), (1, 1, 0, 1)]
        layers.append((2 * s, s, math.ceil(s / 2), 1))
    layers.append((k_out, 1, (k_out - 1) // 2, 1))
    return layers


def conv_output_length(n: int, layers: list[tuple[int, int, int, int]]) -> int:
    """Output length of a chain of convs, with transformers' `conv1d_output_length` arithmetic (it truncates a
    float quotient toward zero, which differs from floor only for inputs shorter than a kernel)."""
    for k, s, p, d in layers:
        n = int((n + 2 * p - d * (k - 1) - 1) / s + 1)
    return n
