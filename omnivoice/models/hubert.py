"""HuBERT (transformers' HubertModel, post-norm variant) as the codec's semantic feature extractor.

Input: 16 kHz audio [N, 1] (conv layout), already padded by the caller's graph. Output: the mean of all hidden
states (the input of layer 0 plus every layer's output, 13 for HuBERT base) as [C, T] (transformer layout).

    feature extractor   7 convs (no bias), GroupNorm(C groups) after the first ("group" norm) or a LayerNorm after
                        each ("layer" norm), GELU after each                       [N, 1] -> [512, T]
    feature projection  LayerNorm + Linear                                         -> [768, T]
    positional conv     grouped conv (k 128, 16 groups, pad 64, weight norm folded), last sample dropped, GELU,
                        added to the projection; then the encoder's LayerNorm      -> hidden state 0
    layers              post-norm: h = LN(h + attn(h)); h = LN(h + ffn(h))         -> hidden states 1..L
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import nn
from ..ggml import ffi, lib, named
from .common import Conv, Linear, Norm


@dataclass(frozen=True)
class HubertConfig:
    n_layer: int
    n_head: int
    conv_stride: tuple[int, ...]
    feat_extract_norm: str = "group"     # "group" (GroupNorm on the first conv) or "layer" (LayerNorm on each)
    feat_proj_layer_norm: bool = True
    pos_conv_groups: int = 16
    pos_conv_trim: int = 1               # samples dropped after the positional conv (1 for its even kernel)
    eps: float = 1e-5                    # config.layer_norm_eps (feature projection and encoder norms)
    norm_eps: float = 1e-5               # torch's default for the feature extractor's GroupNorm / LayerNorm


# Weights, ggml shapes: C the hidden width (768), I the feed-forward width, C_i the feature convs' widths.

@dataclass(frozen=True)
class FeatureConv:
    conv: Conv                  # [K_i, C_(i-1), C_i], bias only with conv_bias; on the CPU's FMA kernel channels-last
                                # (nn.fma.PackedConv of [C_(i-1), K_i, C_i]) where no GroupNorm follows
    norm: Norm | None           # [C_i]: GroupNorm on conv 0 ("group") or LayerNorm on each ("layer"), else None

    @property
    def channels_last(self) -> bool:
        return isinstance(self.conv.weight, nn.fma.PackedConv)

    @property
    def kernel(self) -> int:
        return self.conv.weight.ne[1 if self.channels_last else 0]


@dataclass(frozen=True)
class HubertLayer:
    q: Linear                   # [C, C] + [C], and k, v, out alike
    k: Linear
    v: Linear
    out: Linear
    attn_norm: Norm             # [C]
    ffn_up: Linear              # [C, I] + [I]
    ffn_down: Linear            # [I, C] + [C]
    ffn_norm: Norm              # [C]


@dataclass(frozen=True)
class HubertWeights:
    feature_convs: tuple[FeatureConv, ...]
    projection_norm: Norm | None  # [C_last], with feat_proj_layer_norm
    projection: Linear            # [C_last, C] + [C]
    pos_conv: Conv                # [K, C / groups, C] + [C], weight norm folded
    encoder_norm: Norm            # [C]
    layers: tuple[HubertLayer, ...]


def feature_extractor(ctx, w: HubertWeights, cfg: HubertConfig, audio, cpu: bool = False):
    """Conv feature encoder: audio [N, 1] -> [C, T] (channels-last). `cpu`: the graph runs on the CPU backend
    (nn.gelu's one-node GELU).

    Convs run in the [T, C] layout (im2col + GEMM), or channels-last on the CPU's FMA kernel from the first conv
    the loader packed (the "group" variant's after the first): one transpose between the two, where the [T, C]
    path transposes its output for the projection anyway. ggml's im2col and products of these convs were a
    quarter of a clip's encode on a 2-core CPU (tools/op_profile.py encode)."""
    x = audio                                                                               # [N, 1]
    channels_last = False
    for i, (fc, stride) in enumerate(zip(w.feature_convs, cfg.conv_stride)):
        if fc.channels_last:
            if not channels_last:
                x = nn.transpose(ctx, x)                                                    # [C, T]
                channels_last = True
            x = nn.conv1d_cl(ctx, x, fc.conv.weight, fc.conv.bias, stride=stride)          # [C_i, T_i]
        else:
            if channels_last:
                raise ValueError("hubert: a [T, C] feature conv after a channels-last one")
            x = nn.conv1d(ctx, x, fc.conv.weight, fc.conv.bias, stride=stride)             # [T_i, C_i]
        if cfg.feat_extract_norm == "group" and fc.norm is not None:
            # GroupNorm with one group per channel: each channel normalised over time (conv 0, in [T, C])
            x = nn.group_norm(ctx, x, x.ne[1], fc.norm.weight, fc.norm.bias, cfg.norm_eps)
        elif cfg.feat_extract_norm == "layer":
            x = nn.transpose(ctx, nn.layer_norm(ctx, nn.transpose(ctx, x), fc.norm.weight, fc.norm.bias, cfg.norm_eps))
        x = named(nn.gelu(ctx, x, cpu=cpu), "hubert_feat", i)
    return x if channels_last else nn.transpose(ctx, x)                                    # [C, T]


def feature_projection(ctx, w: HubertWeights, cfg: HubertConfig, features):
    """features [C_conv, T] -> [C, T]."""
    x = features
    if cfg.feat_proj_layer_norm:
        x = nn.layer_norm(ctx, x, w.projection_norm.weight, w.projection_norm.bias, cfg.eps)
    return named(nn.linear(ctx, x, w.projection.weight, w.projection.bias), "hubert_proj")  # [C, T]


def positional_embedding(ctx, w: HubertWeights, cfg: HubertConfig, h, cpu: bool = False):
    """Grouped positional conv of h [C, T] -> [C, T]. `cpu`: see feature_extractor."""
    K = w.pos_conv.weight.ne[0]                                                             # [K, C/g, C]
    x = nn.conv1d(ctx, nn.transpose(ctx, h), w.pos_conv.weight, w.pos_conv.bias, padding=K // 2,
                  groups=cfg.pos_conv_groups)                                               # [T + 1, C] (K even)
    if cfg.pos_conv_trim:  # HubertSamePadLayer drops the extra last sample(s)
        x = lib.ggml_view_2d(ctx, x, x.ne[0] - cfg.pos_conv_trim, x.ne[1], x.nb[1], 0)     # [T, C]
    return named(nn.gelu(ctx, nn.transpose(ctx, x), cpu=cpu), "hubert_pos")                # [C, T]


def attention(ctx, layer: HubertLayer, cfg: HubertConfig, h, contiguous_qk: bool = False):
    """Bidirectional multi-head self-attention with biases, h [C, T] -> [C, T]. `contiguous_qk`: see
    nn.attention (Runtime.products_need_contiguous)."""
    C, T = h.ne[0], h.ne[1]
    D = C // cfg.n_head
    q, k, v = (lib.ggml_reshape_3d(ctx, nn.linear(ctx, h, p.weight, p.bias), D, cfg.n_head, T)
               for p in (layer.q, layer.k, layer.v))                                       # [D, H, T]
    # F32 softmax path: the codes downstream are argmaxes, so no F16 rounding of K and V.
    out = nn.attention(ctx, q, k, v, ffi.NULL, 1.0 / math.sqrt(D), flash=False,
                       contiguous_qk=contiguous_qk)                                                # [C, T]
    return nn.linear(ctx, out, layer.out.weight, layer.out.bias)


def encoder_layer(ctx, layer: HubertLayer, cfg: HubertConfig, h, contiguous_qk: bool = False, cpu: bool = False):
    """HubertEncoderLayer (post-norm): h [C, T] -> [C, T]. `cpu`: see feature_extractor."""
    h = lib.ggml_add(ctx, h, attention(ctx, layer, cfg, h, contiguous_qk))
    h = nn.layer_norm(ctx, h, layer.attn_norm.weight, layer.attn_norm.bias, cfg.eps)
    ff = nn.linear(ctx, h, layer.ffn_up.weight, layer.ffn_up.bias)                          # [I, T]
    ff = nn.linear(ctx, nn.gelu(ctx, ff, cpu=cpu), layer.ffn_down.weight, layer.ffn_down.bias)  # [C, T]
    h = lib.ggml_add(ctx, h, ff)
    return nn.layer_norm(ctx, h, layer.ffn_norm.weight, layer.ffn_norm.bias, cfg.eps)


def mean_hidden_state(ctx, w: HubertWeights, cfg: HubertConfig, audio, contiguous_qk: bool = False,
                      cpu: bool = False):
    """audio [N, 1] at 16 kHz -> mean over the L + 1 hidden states [C, T]. `contiguous_qk`: see attention; `cpu`:
    see feature_extractor."""
    h = feature_projection(ctx, w, cfg, feature_extractor(ctx, w, cfg, audio, cpu))         # [C, T]
    h = lib.ggml_add(ctx, h, positional_embedding(ctx, w, cfg, h, cpu))
    h = nn.layer_norm(ctx, h, w.encoder_norm.weight, w.encoder_norm.bias, cfg.eps)
    total = h
    for i, layer in enumerate(w.layers):
        h = named(encoder_layer(ctx, layer, cfg, h, contiguous_qk, cpu), "hubert_layer", i)
        total = lib.ggml_add(ctx, total, h)
    return named(lib.ggml_scale(ctx, total, 1.0 / (len(w.layers) + 1)), "hubert_mean")


def output_length(n: int, kernels: list[int], strides: tuple[int, ...]) -> int:
    """Frames the feature extractor makes of n samples (valid convs)."""
    for k, s in zip(kernels, strides):
        n = (n - k) // s + 1
    return n
