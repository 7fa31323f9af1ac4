"""HuBERT (transformers' HubertModel, post-norm variant) as the codec's semantic feature extractor.

Input: 16 kHz audio [N, 1] (conv layout), already padded by the caller's graph. Output: the mean of all hidden
states (the input of layer 0 plus every layer's output, 13 for HuBERT base) as [C, T] (transformer layout).

    feature extractor   7 convs (no bias), GroupNorm(C groups) after the first ("group" norm) or a LayerNorm after
                        each ("layer" norm), GELU after each                       [N, 1] -> [T, 512]
    feature projection  LayerNorm + Linear                                         -> [768, T]
    positional conv     grouped conv (k 128, 16 groups, pad 64, weight norm folded), last sample dropped, GELU,
                        added to the projection; then the encoder's LayerNorm      -> hidden state 0
    layers              post-norm: h = LN(h + attn(h)); h = LN(h + ffn(h))         -> hidden states 1..L
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import nn
from ..ggml import ffi, lib

P = "semantic_model."


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


def _transpose(ctx, x):
    return lib.ggml_cont(ctx, lib.ggml_transpose(ctx, x))


def feature_extractor(ctx, w, cfg: HubertConfig, audio):
    """Conv feature encoder: audio [N, 1] -> [T, C] (conv layout)."""
    x = audio
    for i, stride in enumerate(cfg.conv_stride):
        p = f"{P}feature_extractor.conv_layers.{i}."
        x = nn.conv1d(ctx, x, w[p + "conv.weight"], w.get(p + "conv.bias"), stride=stride)     # [T_i, C]
        if cfg.feat_extract_norm == "group" and i == 0:
            # GroupNorm with one group per channel: each channel normalised over time.
            x = nn.group_norm(ctx, x, x.ne[1], w[p + "layer_norm.weight"], w[p + "layer_norm.bias"], cfg.norm_eps)
        elif cfg.feat_extract_norm == "layer":
            x = _transpose(ctx, nn.layer_norm(ctx, _transpose(ctx, x), w[p + "layer_norm.weight"],
                                              w[p + "layer_norm.bias"], cfg.norm_eps))
        x = nn.gelu(ctx, x)
    return x


def feature_projection(ctx, w, cfg: HubertConfig, features):
    """features [T, C_conv] -> [C, T]."""
    x = _transpose(ctx, features)                                                           # [C_conv, T]
    if cfg.feat_proj_layer_norm:
        x = nn.layer_norm(ctx, x, w[P + "feature_projection.layer_norm.weight"],
                          w[P + "feature_projection.layer_norm.bias"], cfg.eps)
    return nn.linear(ctx, x, w[P + "feature_projection.projection.weight"],
                     w[P + "feature_projection.projection.bias"])                          # [C, T]


def positional_embedding(ctx, w, cfg: HubertConfig, h):
    """Grouped positional conv of h [C, T] -> [C, T]."""
    p = P + "encoder.pos_conv_embed.conv."
    weight = w[p + "weight"]                                                                # [K, C/g, C]
    K = weight.ne[0]
    x = nn.conv1d(ctx, _transpose(ctx, h), weight, w[p + "bias"], padding=K // 2,
                  groups=cfg.pos_conv_groups)                                               # [T + 1, C] (K even)
    if cfg.pos_conv_trim:  # HubertSamePadLayer drops the extra last sample(s)
        x = lib.ggml_view_2d(ctx, x, x.ne[0] - cfg.pos_conv_trim, x.ne[1], x.nb[1], 0)     # [T, C]
    return nn.gelu(ctx, _transpose(ctx, x))                                                 # [C, T]


def attention(ctx, w, cfg: HubertConfig, p: str, h):
    """Bidirectional multi-head self-attention with biases, h [C, T] -> [C, T]."""
    C, T = h.ne[0], h.ne[1]
    D = C // cfg.n_head
    q = lib.ggml_reshape_3d(ctx, nn.linear(ctx, h, w[p + "q_proj.weight"], w[p + "q_proj.bias"]), D, cfg.n_head, T)
    k = lib.ggml_reshape_3d(ctx, nn.linear(ctx, h, w[p + "k_proj.weight"], w[p + "k_proj.bias"]), D, cfg.n_head, T)
    v = lib.ggml_reshape_3d(ctx, nn.linear(ctx, h, w[p + "v_proj.weight"], w[p + "v_proj.bias"]), D, cfg.n_head, T)
    # F32 softmax path: the codes downstream are argmaxes, so no F16 rounding of K and V.
    out = nn.attention(ctx, q, k, v, ffi.NULL, 1.0 / math.sqrt(D), flash=False)                 # [C, T]
    return nn.linear(ctx, out, w[p + "out_proj.weight"], w[p + "out_proj.bias"])


def layer(ctx, w, cfg: HubertConfig, i: int, h):
    """HubertEncoderLayer (post-norm): h [C, T] -> [C, T]."""
    p = f"{P}encoder.layers.{i}."
    h = lib.ggml_add(ctx, h, attention(ctx, w, cfg, p + "attention.", h))
    h = nn.layer_norm(ctx, h, w[p + "layer_norm.weight"], w[p + "layer_norm.bias"], cfg.eps)
    ff = nn.linear(ctx, h, w[p + "feed_forward.intermediate_dense.weight"], w[p + "feed_forward.intermediate_dense.bias"])
    ff = nn.linear(ctx, nn.gelu(ctx, ff), w[p + "feed_forward.output_dense.weight"],
                   w[p + "feed_forward.output_dense.bias"])
    h = lib.ggml_add(ctx, h, ff)
    return nn.layer_norm(ctx, h, w[p + "final_layer_norm.weight"], w[p + "final_layer_norm.bias"], cfg.eps)


def mean_hidden_state(ctx, w, cfg: HubertConfig, audio):
    """audio [N, 1] at 16 kHz -> mean over the L + 1 hidden states [C, T]."""
    h = feature_projection(ctx, w, cfg, feature_extractor(ctx, w, cfg, audio))              # [C, T]
    h = lib.ggml_add(ctx, h, positional_embedding(ctx, w, cfg, h))
    h = nn.layer_norm(ctx, h, w[P + "encoder.layer_norm.weight"], w[P + "encoder.layer_norm.bias"], cfg.eps)
    total = h
    for i in range(cfg.n_layer):
        h = layer(ctx, w, cfg, i, h)
        total = lib.ggml_add(ctx, total, h)
    return lib.ggml_scale(ctx, total, 1.0 / (cfg.n_layer + 1))


def output_length(n: int, kernels: list[int], strides: tuple[int, ...]) -> int:
    """Frames the feature extractor makes of n samples (valid convs)."""
    for k, s in zip(kernels, strides):
        n = (n - k) // s + 1
    return n
