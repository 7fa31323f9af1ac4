"""Names in a converted model: its files, and every tensor, written here once for the converter and the loaders.

Tensors keep their Hugging Face names (the converter copies them, so a GGUF name is also the checkpoint name
it came from). A per-layer name is a template with ``{i}`` (and ``{j}`` for a unit inside a block); the LM's
are whole tensor names (`layer` fills them in), the codec's name modules whose tensors are their leaves
(`tensor(module, "weight", i=...)`). Names marked *load time* are never stored: the loaders make those tensors
(stacked matrices, derived constants) and name them so that a graph dump says what they are.
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


def tensor(module: str, *path: str, **index: int) -> str:
    """A codec tensor's name: its module's template filled with `index` (i, j), then the path to the leaf
    (weight, bias, alpha, ...), as llama.cpp's tn(kind, "weight", il)."""
    return ".".join((module.format(**index),) + path)


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


# ------------------------------------------------------------------------------------------------ codec
# omnivoice-tokenizer-F32.gguf: the Higgs Audio v2 codec. Modules below; a module's tensors are its leaves:
WEIGHT, BIAS = "weight", "bias"            # convolutions, linear layers, norms
ALPHA, INV_BETA = "alpha", "inv_beta"      # Snake; inv_beta = 1 / (alpha + eps) is made at load time
EMBED = "embed"                            # an RVQ codebook's entries
EMBED_SQNORM, RANK = "embed_sqnorm", "rank"  # load time: the entries' squared norms, N - n (tie order)

# HuBERT (the semantic feature extractor)
HUBERT_FEAT_CONV = "semantic_model.feature_extractor.conv_layers.{i}.conv"
HUBERT_FEAT_NORM = "semantic_model.feature_extractor.conv_layers.{i}.layer_norm"
HUBERT_PROJ_NORM = "semantic_model.feature_projection.layer_norm"
HUBERT_PROJ = "semantic_model.feature_projection.projection"
HUBERT_POS_CONV = "semantic_model.encoder.pos_conv_embed.conv"
HUBERT_ENC_NORM = "semantic_model.encoder.layer_norm"
HUBERT_ATTN_Q = "semantic_model.encoder.layers.{i}.attention.q_proj"
HUBERT_ATTN_K = "semantic_model.encoder.layers.{i}.attention.k_proj"
HUBERT_ATTN_V = "semantic_model.encoder.layers.{i}.attention.v_proj"
HUBERT_ATTN_OUT = "semantic_model.encoder.layers.{i}.attention.out_proj"
HUBERT_ATTN_NORM = "semantic_model.encoder.layers.{i}.layer_norm"
HUBERT_FFN_UP = "semantic_model.encoder.layers.{i}.feed_forward.intermediate_dense"
HUBERT_FFN_DOWN = "semantic_model.encoder.layers.{i}.feed_forward.output_dense"
HUBERT_FFN_NORM = "semantic_model.encoder.layers.{i}.final_layer_norm"

# the semantic encoder (convolutions over HuBERT features)
SEMANTIC_CONV = "encoder_semantic.conv"
SEMANTIC_RES_CONV1 = "encoder_semantic.conv_blocks.{i}.res_units.{j}.conv1"
SEMANTIC_RES_CONV2 = "encoder_semantic.conv_blocks.{i}.res_units.{j}.conv2"
SEMANTIC_BLOCK_CONV = "encoder_semantic.conv_blocks.{i}.conv"

# the DAC acoustic encoder and decoder; residual units are numbered from 1 (res_unit1..3)
DAC_ENC_CONV_IN = "acoustic_encoder.conv1"
DAC_ENC_RES_UNIT = "acoustic_encoder.block.{i}.res_unit{j}"
DAC_ENC_SNAKE = "acoustic_encoder.block.{i}.snake1"
DAC_ENC_CONV = "acoustic_encoder.block.{i}.conv1"
DAC_ENC_SNAKE_OUT = "acoustic_encoder.snake1"
DAC_ENC_CONV_OUT = "acoustic_encoder.conv2"
DAC_DEC_CONV_IN = "acoustic_decoder.conv1"
DAC_DEC_SNAKE = "acoustic_decoder.block.{i}.snake1"
DAC_DEC_CONV_T = "acoustic_decoder.block.{i}.conv_t1"
DAC_DEC_RES_UNIT = "acoustic_decoder.block.{i}.res_unit{j}"
DAC_DEC_SNAKE_OUT = "acoustic_decoder.snake1"
DAC_DEC_CONV_OUT = "acoustic_decoder.conv2"
# inside a residual unit (DAC_*_RES_UNIT + "." + these)
RES_SNAKE1, RES_CONV1, RES_SNAKE2, RES_CONV2 = "snake1", "conv1", "snake2", "conv2"

# the latent projections and the residual vector quantiser
FC = "fc"                                        # [acoustic | semantic] -> latent (encode)
FC2 = "fc2"                                      # latent -> DAC decoder input (decode)
RVQ_CODEBOOK = "quantizer.quantizers.{i}.codebook"
RVQ_PROJ_IN = "quantizer.quantizers.{i}.project_in"
RVQ_PROJ_OUT = "quantizer.quantizers.{i}.project_out"
