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

from ..gguf import keys as K
from .. import nn
from ..ggml import lib

ARCH = K.ARCH_LM


@dataclass(frozen=True)
class LMConfig:
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    n_codebook: int
    audio_vocab: int
    audio_mask_id: int

    @classmethod
    def from_metadata(cls, meta: dict) -> "LMConfig":
        """Hyper-parameters from the GGUF metadata the converter writes; a missing key is named."""
        def get(key: str):
            try:
                return meta[key]
            except KeyError:
                raise ValueError(f"LM GGUF lacks metadata key {key!r}") from None

        return cls(n_layer=int(get(K.LM_BLOCK_COUNT)), n_embd=int(get(K.LM_EMBEDDING_LENGTH)),
                   n_ff=int(get(K.LM_FEED_FORWARD_LENGTH)), n_head=int(get(K.LM_HEAD_COUNT)),
                   n_head_kv=int(get(K.LM_HEAD_COUNT_KV)), head_dim=int(get(K.LM_KEY_LENGTH)),
                   rms_eps=float(get(K.LM_RMS_EPS)), rope_theta=float(get(K.LM_ROPE_FREQ_BASE)),
                   n_codebook=int(get(K.NUM_AUDIO_CODEBOOK)), audio_vocab=int(get(K.AUDIO_VOCAB_SIZE)),
                   audio_mask_id=int(get(K.AUDIO_MASK_ID)))


def embed(ctx, w, cfg: LMConfig, text_ids, audio_ids, audio_mask, text_mask):
    """Hybrid input embedding -> [n_embd, L]."""
    L = text_ids.ne[0]
    text = nn.embedding(ctx, w["llm.embed_tokens.weight"], text_ids)             # [C, L]
    codes = nn.embedding(ctx, w["audio_embeddings.weight"], audio_ids)           # [C, 8 * L]
    row = codes.nb[1] * L
    audio = lib.ggml_view_2d(ctx, codes, cfg.n_embd, L, codes.nb[1], 0)
    for k in range(1, cfg.n_codebook):
        audio = lib.ggml_add(ctx, audio, lib.ggml_view_2d(ctx, codes, cfg.n_embd, L, codes.nb[1], k * row))
    # where(mask, audio, text) as text*(1-m) + audio*m: exact for m in {0, 1}, unlike text + m*(audio - text).
    m = lib.ggml_reshape_2d(ctx, audio_mask, 1, L)                               # [1, L]
    keep_text = lib.ggml_reshape_2d(ctx, text_mask, 1, L)
    return lib.ggml_add(ctx, lib.ggml_mul(ctx, text, keep_text), lib.ggml_mul(ctx, audio, m))


# Projections that share their input, stacked into one matrix at load time where the runtime copies the weights
# (LanguageModel's `stack_projections`): on a GPU one larger product beats several small ones.
STACKED_QKV = "self_attn.qkv_proj.weight"        # q_proj, k_proj, v_proj rows
STACKED_GATE_UP = "mlp.gate_up_proj.weight"      # gate_proj, up_proj rows (ggml_swiglu: silu(first half) * second)


def stacked_weights(cfg: LMConfig) -> dict[str, list[str]]:
    """The stacked matrices of every layer and the GGUF matrices each is made of, in row order."""
    out = {}
    for i in range(cfg.n_layer):
        p = f"llm.layers.{i}."
        out[p + STACKED_QKV] = [p + f"self_attn.{n}_proj.weight" for n in "qkv"]
        out[p + STACKED_GATE_UP] = [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
    return out


def heads(ctx, x, cfg: LMConfig, n: int, first: int = 0):
    """Heads [first, first + n) of a projection x [(heads) * D, L] as [D, n, L] (a view)."""
    D, es = cfg.head_dim, x.nb[0]
    return lib.ggml_view_3d(ctx, x, D, n, x.ne[1], D * es, x.nb[1], first * D * es)


def qkv_projections(ctx, w, cfg: LMConfig, p: str, cur):
    """q [D, H, L], k and v [D, Hkv, L] of the normed input cur [n_embd, L]."""
    H, Hkv = cfg.n_head, cfg.n_head_kv
    if p + STACKED_QKV in w:
        qkv = lib.ggml_mul_mat(ctx, w[p + STACKED_QKV], cur)                               # [(H + 2 Hkv) D, L]
        return heads(ctx, qkv, cfg, H), heads(ctx, qkv, cfg, Hkv, H), heads(ctx, qkv, cfg, Hkv, H + Hkv)
    return tuple(heads(ctx, lib.ggml_mul_mat(ctx, w[p + f"self_attn.{name}_proj.weight"], cur), cfg, n)
                 for name, n in (("q", H), ("k", Hkv), ("v", Hkv)))


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


def layer(ctx, w, cfg: LMConfig, i: int, x, pos, segments, flash_kv: int | None):
    """One Qwen3 decoder layer: x [n_embd, L] -> [n_embd, L]. `segments`: (start, length) of each packed
    prompt; `flash_kv`: K/V type of flash attention, or None for the plain path."""
    p = f"llm.layers.{i}."
    residual = x
    cur = nn.rms_norm(ctx, x, w[p + "input_layernorm.weight"], cfg.rms_eps)

    q, k, v = qkv_projections(ctx, w, cfg, p, cur)                                    # [D, H or Hkv, L]
    q = nn.rms_norm(ctx, q, w[p + "self_attn.q_norm.weight"], cfg.rms_eps)
    k = nn.rms_norm(ctx, k, w[p + "self_attn.k_norm.weight"], cfg.rms_eps)
    q = nn.rope_neox(ctx, q, pos, cfg.rope_theta)
    k = nn.rope_neox(ctx, k, pos, cfg.rope_theta)
    cur = segmented_attention(ctx, cfg, q, k, v, segments, flash_kv)                       # [D * H, L]
    cur = lib.ggml_mul_mat(ctx, w[p + "self_attn.o_proj.weight"], cur)                    # [n_embd, L]
    x = lib.ggml_add(ctx, residual, cur)

    residual = x
    cur = nn.rms_norm(ctx, x, w[p + "post_attention_layernorm.weight"], cfg.rms_eps)
    if p + STACKED_GATE_UP in w:
        gate_up = lib.ggml_mul_mat(ctx, w[p + STACKED_GATE_UP], cur)                      # [2 n_ff, L]
        cur = lib.ggml_mul_mat(ctx, w[p + "mlp.down_proj.weight"], lib.ggml_swiglu(ctx, gate_up))
    else:
        cur = nn.swiglu(ctx, cur, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                        w[p + "mlp.down_proj.weight"])
    return lib.ggml_add(ctx, residual, cur)


FP16_MAX = 65504.0


def hidden_states(ctx, w, cfg: LMConfig, text_ids, audio_ids, audio_mask, text_mask, pos, segments,
                  flash_kv: int | None, clamp_fp16: bool = False):
    """The backbone: embeddings, every layer, final norm -> [n_embd, L].

    `clamp_fp16` bounds the residual stream to the F16 range after every layer (a debug aid for backends that
    keep activations in F16; a no-op on healthy F32 activations).
    """
    x = embed(ctx, w, cfg, text_ids, audio_ids, audio_mask, text_mask)
    for i in range(cfg.n_layer):
        x = layer(ctx, w, cfg, i, x, pos, segments, flash_kv)
        if clamp_fp16:
            x = lib.ggml_clamp(ctx, x, -FP16_MAX, FP16_MAX)
    return nn.rms_norm(ctx, x, w["llm.norm.weight"], cfg.rms_eps)


def audio_logits(ctx, w, cfg: LMConfig, h):
    """audio_heads over the given positions: h [n_embd, N] -> logits [audio_vocab, n_codebook, N]."""
    logits = lib.ggml_mul_mat(ctx, w["audio_heads.weight"], h)                           # [8 * V, N]
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
