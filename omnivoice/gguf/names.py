"""Names in a converted model: its files, and every tensor, written here once for the converter and the loaders.

Tensors keep their Hugging Face names (the converter copies them, so a GGUF name is also the checkpoint name
it came from). A per-layer name is a template with ``{i}``; `layer(template, i)` fills it in. Names marked
*load time* are never stored: the loaders make those tensors (stacked matrices, derived constants) and name
them so that a graph dump says what they are.
"""

from __future__ import annotations

# ------------------------------------------------------------------------------------------------ files

CODEC_FILENAME = "omnivoice-tokenizer-F32.gguf"  # the audio codec (arch omnivoice-tokenizer), always F32


def lm_filename(quant: str) -> str:
    """File name of the LM GGUF for ``quant`` (f32 -> omnivoice-base-F32.gguf, q8_0 -> ...-Q8_0.gguf)."""
    return f"omnivoice-base-{quant.upper()}.gguf"


def layer(template: str, i: int) -> str:
    """The name of layer (block, codebook) ``i``'s tensor from its template."""
    return template.format(i=i)


def is_layer(template: str, name: str) -> bool:
    """Whether `name` is some layer's tensor of `template`."""
    head, tail = template.split("{i}")
    middle = name[len(head):len(name) - len(tail)]
    return name.startswith(head) and name.endswith(tail) and middle.isdigit()


# ------------------------------------------------------------------------------------------------ LM
# omnivoice-base-*.gguf: Qwen3 with audio embeddings in and audio heads out

LM_TOKEN_EMBD = "llm.embed_tokens.weight"
LM_AUDIO_EMBD = "audio_embeddings.weight"
LM_OUTPUT_NORM = "llm.norm.weight"
LM_AUDIO_HEADS = "audio_heads.weight"
LM_CODEBOOK_OFFSETS = "codebook_layer_offsets"  # checkpoint only: the converter moves it into metadata

LM_ATTN_NORM = "llm.layers.{i}.input_layernorm.weight"
LM_ATTN_Q = "llm.layers.{i}.self_attn.q_proj.weight"
LM_ATTN_K = "llm.layers.{i}.self_attn.k_proj.weight"
LM_ATTN_V = "llm.layers.{i}.self_attn.v_proj.weight"
LM_ATTN_Q_NORM = "llm.layers.{i}.self_attn.q_norm.weight"
LM_ATTN_K_NORM = "llm.layers.{i}.self_attn.k_norm.weight"
LM_ATTN_OUT = "llm.layers.{i}.self_attn.o_proj.weight"
LM_FFN_NORM = "llm.layers.{i}.post_attention_layernorm.weight"
LM_FFN_GATE = "llm.layers.{i}.mlp.gate_proj.weight"
LM_FFN_UP = "llm.layers.{i}.mlp.up_proj.weight"
LM_FFN_DOWN = "llm.layers.{i}.mlp.down_proj.weight"
LM_LAYER = (LM_ATTN_NORM, LM_ATTN_Q, LM_ATTN_K, LM_ATTN_V, LM_ATTN_Q_NORM, LM_ATTN_K_NORM, LM_ATTN_OUT,
            LM_FFN_NORM, LM_FFN_GATE, LM_FFN_UP, LM_FFN_DOWN)  # every stored tensor of a layer

LM_ATTN_QKV = "llm.layers.{i}.self_attn.qkv_proj.weight"  # load time: q, k, v rows stacked
LM_FFN_GATE_UP = "llm.layers.{i}.mlp.gate_up_proj.weight"  # load time: gate, up rows stacked
LM_CLASS_BIAS = "omnivoice.class_bias"                     # load time: 0, -inf at the audio mask id
