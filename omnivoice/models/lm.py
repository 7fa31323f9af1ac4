"""OmniVoice's language model: Qwen3 with audio embeddings in and audio heads out, as one ggml graph.

Input (one packed sequence of L positions, several prompts side by side, e.g. cond then uncond):
    text_ids  int32 [L]        row 0 of the input ids (text tokens; ignored where the audio mask is set)
    audio_ids int32 [8 * L]    codebook k's ids shifted by k * audio_vocab, codebook-major (k * L + l)
    audio_mask f32  [L]        1 where the position holds audio codes
    pos       int32 [L]        position ids, restarting at 0 for every packed prompt
    kq_mask   f32/f16 [L, L]   0 where query l may attend to key l', -inf elsewhere (block diagonal)

The math follows the reference's forward: embeddings = where(audio_mask, sum_k audio_emb[k], text_emb);
28 pre-norm layers with per-head q/k RMSNorm before NEOX RoPE, GQA, SwiGLU; final RMSNorm; audio_heads.
Attention is bidirectional within each packed prompt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import gguf_keys as K
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


def embed(ctx, w, cfg: LMConfig, text_ids, audio_ids, audio_mask):
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
    keep_text = lib.ggml_scale_bias(ctx, m, -1.0, 1.0)
    return lib.ggml_add(ctx, lib.ggml_mul(ctx, text, keep_text), lib.ggml_mul(ctx, audio, m))


def layer(ctx, w, cfg: LMConfig, i: int, x, pos, kq_mask, flash_kv: int | None):
    """One Qwen3 decoder layer: x [n_embd, L] -> [n_embd, L]. `flash_kv`: K/V type of flash attention, or None
    for the plain path."""
    p = f"llm.layers.{i}."
    L = x.ne[1]
    residual = x
    cur = nn.rms_norm(ctx, x, w[p + "input_layernorm.weight"], cfg.rms_eps)

    q = lib.ggml_reshape_3d(ctx, lib.ggml_mul_mat(ctx, w[p + "self_attn.q_proj.weight"], cur),
                            cfg.head_dim, cfg.n_head, L)                                   # [D, H, L]
    k = lib.ggml_reshape_3d(ctx, lib.ggml_mul_mat(ctx, w[p + "self_attn.k_proj.weight"], cur),
                            cfg.head_dim, cfg.n_head_kv, L)                                # [D, Hkv, L]
    v = lib.ggml_reshape_3d(ctx, lib.ggml_mul_mat(ctx, w[p + "self_attn.v_proj.weight"], cur),
                            cfg.head_dim, cfg.n_head_kv, L)                                # [D, Hkv, L]
    q = nn.rms_norm(ctx, q, w[p + "self_attn.q_norm.weight"], cfg.rms_eps)
    k = nn.rms_norm(ctx, k, w[p + "self_attn.k_norm.weight"], cfg.rms_eps)
    q = nn.rope_neox(ctx, q, pos, cfg.rope_theta)
    k = nn.rope_neox(ctx, k, pos, cfg.rope_theta)
    cur = nn.attention(ctx, q, k, v, kq_mask, 1.0 / math.sqrt(cfg.head_dim),
                       flash=flash_kv is not None, kv_type=flash_kv)                        # [D * H, L]
    cur = lib.ggml_mul_mat(ctx, w[p + "self_attn.o_proj.weight"], cur)                    # [n_embd, L]
    x = lib.ggml_add(ctx, residual, cur)

    residual = x
    cur = nn.rms_norm(ctx, x, w[p + "post_attention_layernorm.weight"], cfg.rms_eps)
    cur = nn.swiglu(ctx, cur, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"],
                    w[p + "mlp.down_proj.weight"])
    return lib.ggml_add(ctx, residual, cur)


FP16_MAX = 65504.0


def hidden_states(ctx, w, cfg: LMConfig, text_ids, audio_ids, audio_mask, pos, kq_mask, flash_kv: int | None,
                  clamp_fp16: bool = False):
    """The backbone: embeddings, every layer, final norm -> [n_embd, L].

    `clamp_fp16` bounds the residual stream to the F16 range after every layer (a debug aid for backends that
    keep activations in F16; a no-op on healthy F32 activations).
    """
    x = embed(ctx, w, cfg, text_ids, audio_ids, audio_mask)
    for i in range(cfg.n_layer):
        x = layer(ctx, w, cfg, i, x, pos, kq_mask, flash_kv)
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

def row_max(ctx, x):
    """Max over ne0 of x [V, N] -> [1, N] (a max pool over the whole row: every backend has POOL_2D)."""
    V, N = x.ne[0], x.ne[1]
    return lib.ggml_reshape_2d(ctx, lib.ggml_pool_2d(ctx, x, lib.GGML_OP_POOL_MAX, V, 1, V, 1, 0, 0), 1, N)


def log_softmax(ctx, x):
    """log_softmax over ne0 of x [V, N]: (x - max) - log(sum(exp(x - max))), as torch computes it.

    sum(exp(x - max)) is 1 / max(softmax(x)), since the largest term is exp(0): one fused, vectorised softmax
    pass and a [1, N] log replace an elementwise exp and a row sum (half the time on the CPU, same error).
    """
    shifted = lib.ggml_sub(ctx, x, row_max(ctx, x))
    log_max_p = lib.ggml_log(ctx, row_max(ctx, lib.ggml_soft_max(ctx, x)))                # [1, N] = -lse
    return lib.ggml_add(ctx, shifted, log_max_p)


def guided_log_probs(ctx, cond, uncond, guidance_scale: float):
    """The reference's CFG: log_softmax(c + g (c - u)) with c, u the log_softmax of each row's logits."""
    c = log_softmax(ctx, cond)
    if guidance_scale == 0:
        return c
    u = log_softmax(ctx, uncond)
    return log_softmax(ctx, lib.ggml_add(ctx, c, lib.ggml_scale(ctx, lib.ggml_sub(ctx, c, u), guidance_scale)))


def greedy_pick(ctx, log_probs, class_bias):
    """argmax and max over classes after adding `class_bias` [V] (-inf on the mask id): ([N] i32, [1, N])."""
    masked = lib.ggml_add(ctx, log_probs, class_bias)
    return lib.ggml_argmax(ctx, masked), row_max(ctx, masked)
