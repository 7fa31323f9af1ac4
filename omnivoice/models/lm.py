"""OmniVoice's language model: Qwen3 with audio embeddings in and audio heads out, as one ggml graph.

Input (one packed sequence of L positions, several prompts side by side, e.g. cond then uncond):
    text_ids  int32 [L]        row 0 of the input ids (text tokens; ignored where the audio mask is set)
    audio_ids int32 [8 * L]    codebook k's ids shifted by k * audio_vocab, codebook-major (k * L + l)
    audio_mask f32  [L]        1 where the position holds audio codes
    text_mask f32   [L]        1 - audio_mask
    pos       int32 [L]        position ids, restarting at 0 for every packed prompt
    segments  (start, length) of each packed prompt: attention runs within each, unmasked

The math follows the reference's forward: embeddings = where(audio_mask, sum_k audio_emb[k], text_emb);
28 pre-norm layers with per-head q/k RMSNorm before NEOX RoPE, GQA, SwiGLU; final RMSNorm; audio_heads.
Attention is bidirectional within each packed prompt. Each segment gets its own attention call rather than one
call over all L positions with a block-diagonal mask: GPU kernels compute masked blocks all the same, so
packing cond and uncond that way would double the attention work of a 20 s chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import nn
from ..ggml import Tensor, lib, named


@dataclass(frozen=True)
class LMConfig:
    """Hyper-parameters of the LM (read and cross-checked by omnivoice.loaders.lm)."""

    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    n_codebook: int
    audio_vocab: int      # ids per codebook, the mask id included (1025)
    audio_mask_id: int
    n_vocab: int          # text tokens (rows of the text embedding)


# The weights as the graph reads them, ggml shapes (ne0 first): E = n_embd, D = head_dim, H and Hkv the query
# and key/value heads, F = n_ff, N = n_codebook * audio_vocab. The loader fills them once from the GGUF, every
# shape and type checked; names in omnivoice.gguf.names.

@dataclass(frozen=True)
class LMLayer:
    """One decoder layer. q/k/v and gate/up are either separate matrices or stacked into one (`qkv`,
    `gate_up`) at load time; the unused form is None."""

    attn_norm: Tensor               # [E]
    q_norm: Tensor                  # [D]
    k_norm: Tensor                  # [D]
    o: Tensor                       # [H D, E]
    ffn_norm: Tensor                # [E]
    down: Tensor                    # [F, E]
    q: Tensor | None = None         # [E, H D]
    k: Tensor | None = None         # [E, Hkv D]
    v: Tensor | None = None         # [E, Hkv D]
    qkv: Tensor | None = None       # [E, (H + 2 Hkv) D]: the rows of q, k, v
    gate: Tensor | None = None      # [E, F]
    up: Tensor | None = None        # [E, F]
    gate_up: Tensor | None = None   # [E, 2 F]: the rows of gate, up (ggml_swiglu: silu(first half) * second)


@dataclass(frozen=True)
class LMWeights:
    tok_embd: Tensor                # [E, n_vocab]
    audio_embd: Tensor              # [E, N]: codebook k's ids start at row k * audio_vocab
    layers: tuple[LMLayer, ...]
    output_norm: Tensor             # [E]
    audio_heads: Tensor             # [E, N]
    class_bias: Tensor              # [audio_vocab] F32, made at load: 0, -inf at the mask id


def embed(ctx, w: LMWeights, cfg: LMConfig, text_ids, audio_ids, audio_mask, text_mask):
    """Hybrid input embedding -> [n_embd, L]."""
    L = text_ids.ne[0]
    text = nn.embedding(ctx, w.tok_embd, text_ids)                               # [C, L]
    codes = nn.embedding(ctx, w.audio_embd, audio_ids)                           # [C, 8 * L]
    row = codes.nb[1] * L
    audio = lib.ggml_view_2d(ctx, codes, cfg.n_embd, L, codes.nb[1], 0)
    for k in range(1, cfg.n_codebook):
        audio = lib.ggml_add(ctx, audio, lib.ggml_view_2d(ctx, codes, cfg.n_embd, L, codes.nb[1], k * row))
    # where(mask, audio, text) as text*(1-m) + audio*m: exact for m in {0, 1}, unlike text + m*(audio - text).
    m = lib.ggml_reshape_2d(ctx, audio_mask, 1, L)                               # [1, L]
    keep_text = lib.ggml_reshape_2d(ctx, text_mask, 1, L)
    return named(lib.ggml_add(ctx, lib.ggml_mul(ctx, text, keep_text), lib.ggml_mul(ctx, audio, m)), "inp_embd")


def heads(ctx, x, cfg: LMConfig, n: int, first: int = 0):
    """Heads [first, first + n) of a projection x [(heads) * D, L] as [D, n, L] (a view)."""
    D, es = cfg.head_dim, x.nb[0]
    return lib.ggml_view_3d(ctx, x, D, n, x.ne[1], D * es, x.nb[1], first * D * es)


def qkv_projections(ctx, layer: LMLayer, cfg: LMConfig, cur):
    """q [D, H, L], k and v [D, Hkv, L] of the normed input cur [n_embd, L]."""
    H, Hkv = cfg.n_head, cfg.n_head_kv
    if layer.qkv is not None:
        qkv = lib.ggml_mul_mat(ctx, layer.qkv, cur)                                          # [(H + 2 Hkv) D, L]
        return heads(ctx, qkv, cfg, H), heads(ctx, qkv, cfg, Hkv, H), heads(ctx, qkv, cfg, Hkv, H + Hkv)
    return tuple(heads(ctx, lib.ggml_mul_mat(ctx, w, cur), cfg, n)
                 for w, n in ((layer.q, H), (layer.k, Hkv), (layer.v, Hkv)))


def positions(ctx, x, start: int, n: int):
    """Positions [start, start + n) of x [D, H, L] (a view)."""
    return lib.ggml_view_3d(ctx, x, x.ne[0], x.ne[1], n, x.nb[1], x.nb[2], start * x.nb[2])


def concat(ctx, parts: list, dim: int):
    """The parts joined along `dim`, pairwise in a balanced tree (each value is copied log2(len) times)."""
    while len(parts) > 1:
        parts = [lib.ggml_concat(ctx, parts[i], parts[i + 1], dim) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def segmented_attention(ctx, cfg: LMConfig, q, k, v, segments, flash_kv: int | None):
    """Bidirectional attention within each (start, length) segment: q [D, H, L], k/v [D, Hkv, L] -> [D*H, L]."""
    if flash_kv is not None and k.type != flash_kv:
        # Once for all segments, while K and V are contiguous.
        k, v = lib.ggml_cast(ctx, k, flash_kv), lib.ggml_cast(ctx, v, flash_kv)
    scale = 1.0 / math.sqrt(cfg.head_dim)
    parts = [nn.attention(ctx, positions(ctx, q, s, n), positions(ctx, k, s, n), positions(ctx, v, s, n), None,
                          scale, flash=flash_kv is not None, kv_type=flash_kv)
             for s, n in segments]                                                          # [D * H, n] each
    return concat(ctx, parts, 1)


def decoder_layer(ctx, layer: LMLayer, cfg: LMConfig, il: int, x, pos, segments, flash_kv: int | None):
    """Qwen3 decoder layer `il`: x [n_embd, L] -> [n_embd, L]. `segments`: (start, length) of each packed
    prompt; `flash_kv`: K/V type of flash attention, or None for the plain path."""
    residual = x
    cur = named(nn.rms_norm(ctx, x, layer.attn_norm, cfg.rms_eps), "attn_norm", il)

    q, k, v = qkv_projections(ctx, layer, cfg, cur)                                    # [D, H or Hkv, L]
    named(v, "Vcur", il)
    q = named(nn.rms_norm(ctx, q, layer.q_norm, cfg.rms_eps), "Qcur_normed", il)
    k = named(nn.rms_norm(ctx, k, layer.k_norm, cfg.rms_eps), "Kcur_normed", il)
    q = named(nn.rope_neox(ctx, q, pos, cfg.rope_theta), "Qcur", il)
    k = named(nn.rope_neox(ctx, k, pos, cfg.rope_theta), "Kcur", il)
    cur = named(segmented_attention(ctx, cfg, q, k, v, segments, flash_kv), "kqv_out", il)  # [D * H, L]
    cur = named(lib.ggml_mul_mat(ctx, layer.o, cur), "attn_out", il)                        # [n_embd, L]
    x = named(lib.ggml_add(ctx, residual, cur), "ffn_inp", il)

    residual = x
    cur = named(nn.rms_norm(ctx, x, layer.ffn_norm, cfg.rms_eps), "ffn_norm", il)
    if layer.gate_up is not None:
        gate_up = lib.ggml_mul_mat(ctx, layer.gate_up, cur)                                  # [2 n_ff, L]
        cur = lib.ggml_mul_mat(ctx, layer.down, lib.ggml_swiglu(ctx, gate_up))
    else:
        cur = nn.swiglu(ctx, cur, layer.gate, layer.up, layer.down)
    named(cur, "ffn_out", il)
    return named(lib.ggml_add(ctx, residual, cur), "l_out", il)


FP16_MAX = 65504.0


def hidden_states(ctx, w: LMWeights, cfg: LMConfig, text_ids, audio_ids, audio_mask, text_mask, pos, segments,
                  flash_kv: int | None, clamp_fp16: bool = False):
    """The backbone: embeddings, every layer, final norm -> [n_embd, L].

    `clamp_fp16` bounds the residual stream to the F16 range after every layer (a debug aid for backends that
    keep activations in F16; a no-op on healthy F32 activations).
    """
    x = embed(ctx, w, cfg, text_ids, audio_ids, audio_mask, text_mask)
    for il, layer in enumerate(w.layers):
        x = decoder_layer(ctx, layer, cfg, il, x, pos, segments, flash_kv)
        if clamp_fp16:
            x = lib.ggml_clamp(ctx, x, -FP16_MAX, FP16_MAX)
    return named(nn.rms_norm(ctx, x, w.output_norm, cfg.rms_eps), "result_norm")


def audio_logits(ctx, w: LMWeights, cfg: LMConfig, h):
    """audio_heads over the given positions: h [n_embd, N] -> logits [audio_vocab, n_codebook, N]."""
    logits = named(lib.ggml_mul_mat(ctx, w.audio_heads, h), "result_output")             # [8 * V, N]
    return lib.ggml_reshape_3d(ctx, logits, cfg.audio_vocab, cfg.n_codebook, h.ne[1])


def columns(ctx, x, start: int, n: int):
    """Columns [start, start + n) of a 2-D tensor [C, L] (a view)."""
    return lib.ggml_view_2d(ctx, x, x.ne[0], n, x.nb[1], start * x.nb[1])


# --------------------------------------------------------------------------------- MaskGIT sampling in-graph

def log_softmax(ctx, x):
    """log_softmax over ne0 of x [V, N]: (x - max) - log(sum(exp(x - max))), as torch computes it.

    sum(exp(x - max)) is 1 / max(softmax(x)), since the largest term is exp(0): one fused, vectorised softmax
    pass and a [1, N] log replace an elementwise exp and a row sum (half the time on the CPU, same error).
    """
    shifted = lib.ggml_sub(ctx, x, nn.row_max(ctx, x))
    log_max_p = lib.ggml_log(ctx, nn.row_max(ctx, lib.ggml_soft_max(ctx, x)))             # [1, N] = -lse
    return lib.ggml_add(ctx, shifted, log_max_p)


def guided_log_probs(ctx, cond, uncond, guidance_scale: float):
    """The reference's CFG, log_softmax(c + g (c - u)) with c, u the log_softmax of each row's logits, computed
    as log_softmax((1 + g) cond - g uncond).

    The two are equal: c and u differ from the logits by one constant per row, and log_softmax drops constants.
    The short form saves two log-softmax passes over [V, C*T] per step; it rounds differently, by ~1e-6 of
    the log-probs, which the token parity tests bound.
    """
    if guidance_scale == 0:
        return log_softmax(ctx, cond)
    z = lib.ggml_sub(ctx, lib.ggml_scale(ctx, cond, 1.0 + guidance_scale), lib.ggml_scale(ctx, uncond, guidance_scale))
    return log_softmax(ctx, z)


def greedy_pick(ctx, log_probs, class_bias):
    """argmax and max over classes after adding `class_bias` [V] (-inf on the mask id): ([N] i32, [1, N])."""
    masked = lib.ggml_add(ctx, log_probs, class_bias)
    return lib.ggml_argmax(ctx, masked), nn.row_max(ctx, masked)
