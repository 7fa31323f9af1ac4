"""The DAC acoustic encoder and decoder of the Higgs Audio v2 codec, as ggml graphs.

Activations are channels-last [C, T] (channels contiguous, nn.conv1d_cl). Weights come as records
(`DacEncoder`, `DacDecoder`) that omnivoice.loaders.codec fills from the GGUF (`acoustic_encoder.*`,
`acoustic_decoder.*`, weight norm already folded by the checkpoint), made at load time: each Snake's
`inv_beta` = 1 / (alpha + 1e-9), and every conv weight of kernel > 1 rearranged for channels-last
(nn.conv_weight_cl, nn.conv_transpose_weight_cl). `cpu` says the graph runs on the CPU backend, where Snake is
one custom node (nn.snake). Kernel sizes and channel counts come from the weights, strides from the config
(the checkpoint's ratios 8 5 4 2 3).

Decoder (the reference's DacDecoder with HiggsAudioV2's changes: output_padding = stride % 2, no tanh):
    conv1 k7 -> 5 x [snake, conv_transpose (k 2s, stride s, pad ceil(s/2)), 3 residual units] -> snake -> conv2 k7
Encoder:
    conv1 k7 -> 5 x [3 residual units, snake, conv (k 2s, stride s, pad ceil(s/2))] -> snake -> conv2 k3
Residual unit (dilation d in 1, 3, 9): x + conv2_k1(snake2(conv1_k7_dil_d(snake1(x)))). Its padding 3d keeps the
length, so the reference's centre crop of the shortcut never triggers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import nn
from ..ggml import Tensor, lib, named
from .common import Conv

DILATIONS = (1, 3, 9)  # of the three residual units of every block


@dataclass(frozen=True)
class Snake:
    alpha: Tensor       # [C] (the file's [1, C, 1])
    inv_beta: Tensor    # [C]: 1 / (alpha + eps), made at load
    cpu: bool = False   # the graph runs on the CPU backend


@dataclass(frozen=True)
class ResidualUnit:
    snake1: Snake
    conv1: Conv         # [C, 7, C] (channels-last), dilated
    snake2: Snake
    conv2: Conv         # [C, 1, C]


@dataclass(frozen=True)
class DecoderBlock:
    snake1: Snake
    conv_t1: Conv       # transposed, [IC, K * OC] with oc fastest (K = 2 stride), OC = IC / 2
    res_units: tuple[ResidualUnit, ...]


@dataclass(frozen=True)
class EncoderBlock:
    res_units: tuple[ResidualUnit, ...]
    snake1: Snake
    conv1: Conv         # [C, 2 stride, 2 C]


@dataclass(frozen=True)
class DacDecoder:
    conv1: Conv         # [hidden, 7, C0]
    blocks: tuple[DecoderBlock, ...]
    snake1: Snake
    conv2: Conv         # [C_last, 7, 1]


@dataclass(frozen=True)
class DacEncoder:
    conv1: Conv         # [1, 7, C0]
    blocks: tuple[EncoderBlock, ...]
    snake1: Snake
    conv2: Conv         # [C_last, 3, hidden]


def snake(ctx, s: Snake, x):
    """Snake1d on x [C, T]."""
    return nn.snake(ctx, x, s.alpha, s.inv_beta, cpu=s.cpu)


def conv(ctx, c: Conv, x, stride: int = 1, padding: int | None = None, dilation: int = 1, cpu: bool = False):
    """Conv1d with bias on x [IC, T], weight [IC, K, OC]; `padding` defaults to 'same' for odd kernels:
    (K - 1) // 2 * dilation."""
    if padding is None:
        padding = (c.weight.ne[1] - 1) // 2 * dilation
    return nn.conv1d_cl(ctx, x, c.weight, c.bias, stride=stride, padding=padding, dilation=dilation, cpu=cpu)


def masked(ctx, x, mask):
    """x [C, T * S] times a frame mask [1, 1, T] (each frame's S samples alike); x itself without a mask.

    Several sequences packed side by side with zero frames between them (the codec runner's decode_batch) are
    decoded as one: every convolution sees zeros beyond a sequence's ends, as it does decoding that sequence
    alone, provided the gaps are zero at its input and wider than its reach; a convolution's output is masked
    so that the next one's input is (Snake keeps zeros)."""
    if mask is None:
        return x
    C, n, T = x.ne[0], x.ne[1], mask.ne[2]
    y = lib.ggml_mul(ctx, lib.ggml_reshape_3d(ctx, x, C, n // T, T), mask)          # [C, S, T]
    return lib.ggml_reshape_2d(ctx, y, C, n)


def residual_unit(ctx, u: ResidualUnit, x, dilation: int, mask=None):
    """DacResidualUnit: x [C, T] -> [C, T] (`mask`: see `masked`)."""
    y = snake(ctx, u.snake1, x)
    y = conv(ctx, u.conv1, y, dilation=dilation, cpu=u.snake1.cpu)
    y = snake(ctx, u.snake2, y)
    y = conv(ctx, u.conv2, y, cpu=u.snake1.cpu)
    return masked(ctx, lib.ggml_add(ctx, x, y), mask)


def decoder_block(ctx, b: DecoderBlock, x, stride: int, mask=None):
    """DacDecoderBlock: x [IC, T] -> [IC / 2, stride * T] (`mask`: see `masked`)."""
    x = snake(ctx, b.snake1, x)
    x = nn.conv_transpose1d_cl(ctx, x, b.conv_t1.weight, b.conv_t1.bias, stride=stride,
                               padding=math.ceil(stride / 2), output_padding=stride % 2,
                               out_channels=b.conv_t1.bias.ne[0], cpu=b.snake1.cpu)
    x = masked(ctx, x, mask)
    for unit, d in zip(b.res_units, DILATIONS):
        x = residual_unit(ctx, unit, x, d, mask)
    return x


def decode(ctx, w: DacDecoder, latent, upsampling_ratios: tuple[int, ...], mask=None):
    """DAC decoder: latent [hidden, T] -> audio [1, T * prod(ratios)]. With a frame `mask` [1, 1, T] (1 in the
    frames of the packed sequences, 0 in the gaps between them; see `masked`), each sequence's samples are
    those it gets decoded alone; the gaps' samples are left over."""
    cpu = w.snake1.cpu
    x = masked(ctx, latent, mask)
    x = masked(ctx, named(conv(ctx, w.conv1, x, cpu=cpu), "dec_conv_in"), mask)      # [C0, T]
    for i, (block, stride) in enumerate(zip(w.blocks, upsampling_ratios)):
        x = named(decoder_block(ctx, block, x, stride, mask), "dec_block", i)        # [C / 2, T * s]
    x = snake(ctx, w.snake1, x)
    return named(conv(ctx, w.conv2, x, cpu=cpu), "dec_out")                         # [1, T * hop]


def encoder_block(ctx, b: EncoderBlock, x, stride: int):
    """DacEncoderBlock: x [C, T] -> [2 C, T / stride]."""
    for unit, d in zip(b.res_units, DILATIONS):
        x = residual_unit(ctx, unit, x, d)
    x = snake(ctx, b.snake1, x)
    return conv(ctx, b.conv1, x, stride=stride, padding=math.ceil(stride / 2), cpu=b.snake1.cpu)


def encode(ctx, w: DacEncoder, audio, downsampling_ratios: tuple[int, ...]):
    """DAC encoder: audio [1, N] -> [hidden, N / hop] (lengths as PyTorch's conv arithmetic gives them)."""
    cpu = w.snake1.cpu
    x = named(conv(ctx, w.conv1, audio, cpu=cpu), "enc_conv_in")                   # [C0, N]
    for i, (block, stride) in enumerate(zip(w.blocks, downsampling_ratios)):
        x = named(encoder_block(ctx, block, x, stride), "enc_block", i)              # [2 C, T / s]
    x = snake(ctx, w.snake1, x)
    return named(conv(ctx, w.conv2, x, cpu=cpu), "enc_out")                         # [hidden, N / hop]


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
