"""An independent float64 numpy forward of OmniVoice's LM, written from the reference's math (not our graph).

One row at a time, fully bidirectional over that row, positions 0..L-1: exactly what the reference computes
for its conditional row, and for its padded unconditional row at the real (unpadded) positions.
"""

from __future__ import annotations

import numpy as np


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, theta):
    """x (H, L, D), HF rotate_half convention."""
    D = x.shape[-1]
    L = x.shape[1]
    inv = theta ** (-np.arange(0, D, 2, dtype=np.float64) / D)
    ang = np.arange(L, dtype=np.float64)[:, None] * inv[None]
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))
    rot = np.concatenate([-x[..., D // 2:], x[..., : D // 2]], -1)
    return x * cos + rot * sin


def forward(w: dict, cfg: dict, input_ids: np.ndarray, audio_mask: np.ndarray, product=None) -> np.ndarray:
    """input_ids (C, L) int, audio_mask (L,) bool -> logits (C, L, V) float64.

    `w` maps Hugging Face tensor names to float64 arrays in torch layout; `cfg` has n_layer, n_head, n_head_kv,
    head_dim, eps, theta, n_codebook, audio_vocab. `product(x, name)`, default x @ w[name].T, computes every
    matrix product (e.g. rounding its operands as a packed kernel would).
    """
    if product is None:
        def product(x, name):
            return x @ w[name].T
    C, L = input_ids.shape
    V = cfg["audio_vocab"]
    text = w["llm.embed_tokens.weight"][input_ids[0]]
    shifted = input_ids * audio_mask[None] + (np.arange(C) * V)[:, None]
    audio = w["audio_embeddings.weight"][shifted].sum(0)
    x = np.where(audio_mask[:, None], audio, text)
    H, Hkv, D, eps = cfg["n_head"], cfg["n_head_kv"], cfg["head_dim"], cfg["eps"]
    for i in range(cfg["n_layer"]):
        p = f"llm.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = product(h, p + "self_attn.q_proj.weight").reshape(L, H, D).transpose(1, 0, 2)
        k = product(h, p + "self_attn.k_proj.weight").reshape(L, Hkv, D).transpose(1, 0, 2)
        v = product(h, p + "self_attn.v_proj.weight").reshape(L, Hkv, D).transpose(1, 0, 2)
        q = rope(rms_norm(q, w[p + "self_attn.q_norm.weight"], eps), cfg["theta"])
        k = rope(rms_norm(k, w[p + "self_attn.k_norm.weight"], eps), cfg["theta"])
        k, v = np.repeat(k, H // Hkv, 0), np.repeat(v, H // Hkv, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(D)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v                      # (H, L, D)
        x = x + product(a.transpose(1, 0, 2).reshape(L, H * D), p + "self_attn.o_proj.weight")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = product(h, p + "mlp.gate_proj.weight"), product(h, p + "mlp.up_proj.weight")
        x = x + product(g / (1 + np.exp(-g)) * u, p + "mlp.down_proj.weight")
    x = rms_norm(x, w["llm.norm.weight"], eps)
    logits = product(x, "audio_heads.weight")                       # (L, C * V)
    return logits.reshape(L, C, V).transpose(1, 0, 2)


def log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def guided(cond, uncond, g):
    """The reference's CFG: log_softmax(c + g (c - u)) of the rows' log-softmaxes; g a scalar or one per row."""
    c = log_softmax(cond)
    if np.ndim(g) == 0 and g == 0:
        return c
    return log_softmax(c + g * (c - log_softmax(uncond)))
