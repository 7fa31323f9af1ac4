"""GGUF metadata keys and architecture names shared by the converter and the model loaders.

Two files, two architectures:

* ``omnivoice-base-{QUANT}.gguf`` (``general.architecture = "omnivoice-lm"``): the Qwen3 backbone with
  OmniVoice's audio embeddings and heads, plus the text tokenizer. Standard hyper-parameters use the gguf
  convention ``{arch}.key``; OmniVoice's own under ``omnivoice.*``; the tokenizer under ``tokenizer.ggml.*``.
* ``omnivoice-tokenizer-F32.gguf`` (``general.architecture = "omnivoice-tokenizer"``): the audio codec
  (HuBERT + semantic encoder + DAC + RVQ), every hyper-parameter under ``omnivoice.*``.

``LM_KEY_TYPES`` and ``CODEC_KEY_TYPES`` list every key a converted file carries, with its GGUF value type
(``"u32"``, ``"i32"``, ``"f32"``, ``"bool"``, ``"str"``, or ``"[u32]"``-style arrays), so a loader can check a
file before trusting it and the converter's tests can check completeness.
"""

from __future__ import annotations

ARCH_LM = "omnivoice-lm"
ARCH_CODEC = "omnivoice-tokenizer"

GENERAL_ARCHITECTURE = "general.architecture"
GENERAL_NAME = "general.name"
GENERAL_FILE_TYPE = "general.file_type"  # llama.cpp's LlamaFileType: 0 F32, 1 F16, 7 Q8_0, 32 BF16
GENERAL_ALIGNMENT = "general.alignment"  # tensor data alignment in bytes (GGUF's default, when absent: 32)
GENERAL_QUANTIZATION_VERSION = "general.quantization_version"  # ggml's block formats (2), in quantized files

# --- LM: standard keys ({arch}.key) ----------------------------------------------------------------
LM_BLOCK_COUNT = f"{ARCH_LM}.block_count"
LM_CONTEXT_LENGTH = f"{ARCH_LM}.context_length"
LM_EMBEDDING_LENGTH = f"{ARCH_LM}.embedding_length"
LM_FEED_FORWARD_LENGTH = f"{ARCH_LM}.feed_forward_length"
LM_HEAD_COUNT = f"{ARCH_LM}.attention.head_count"
LM_HEAD_COUNT_KV = f"{ARCH_LM}.attention.head_count_kv"
LM_KEY_LENGTH = f"{ARCH_LM}.attention.key_length"
LM_VALUE_LENGTH = f"{ARCH_LM}.attention.value_length"
LM_RMS_EPS = f"{ARCH_LM}.attention.layer_norm_rms_epsilon"
LM_ROPE_FREQ_BASE = f"{ARCH_LM}.rope.freq_base"
LM_VOCAB_SIZE = f"{ARCH_LM}.vocab_size"

# --- LM: OmniVoice keys -----------------------------------------------------------------------------
TIE_WORD_EMBEDDINGS = "omnivoice.tie_word_embeddings"
NUM_AUDIO_CODEBOOK = "omnivoice.num_audio_codebook"
AUDIO_VOCAB_SIZE = "omnivoice.audio_vocab_size"
AUDIO_MASK_ID = "omnivoice.audio_mask_id"
AUDIO_CODEBOOK_WEIGHTS = "omnivoice.audio_codebook_weights"
# replaces the checkpoint's codebook_layer_offsets buffer (values read from it, normally k * 1025)
CODEBOOK_LAYER_OFFSETS = "omnivoice.codebook_layer_offsets"
SPECIAL_DENOISE = "omnivoice.special.denoise"
SPECIAL_LANG_START = "omnivoice.special.lang_start"
SPECIAL_LANG_END = "omnivoice.special.lang_end"
SPECIAL_INSTRUCT_START = "omnivoice.special.instruct_start"
SPECIAL_INSTRUCT_END = "omnivoice.special.instruct_end"
SPECIAL_TEXT_START = "omnivoice.special.text_start"
SPECIAL_TEXT_END = "omnivoice.special.text_end"
# special key -> token text it names
SPECIAL_TOKENS = {
    SPECIAL_DENOISE: "<|denoise|>",
    SPECIAL_LANG_START: "<|lang_start|>",
    SPECIAL_LANG_END: "<|lang_end|>",
    SPECIAL_INSTRUCT_START: "<|instruct_start|>",
    SPECIAL_INSTRUCT_END: "<|instruct_end|>",
    SPECIAL_TEXT_START: "<|text_start|>",
    SPECIAL_TEXT_END: "<|text_end|>",
}

# --- LM: tokenizer (standard gguf keys + what a byte-level BPE port needs besides) --------------------
TOKENIZER_MODEL = "tokenizer.ggml.model"            # "gpt2" (byte-level BPE)
TOKENIZER_PRE = "tokenizer.ggml.pre"                # "qwen2"
TOKENIZER_TOKENS = "tokenizer.ggml.tokens"          # byte-level strings, id order
TOKENIZER_TOKEN_TYPE = "tokenizer.ggml.token_type"  # 1 normal, 3 control (special added), 4 user-defined
TOKENIZER_MERGES = "tokenizer.ggml.merges"          # "a b", rank order
TOKENIZER_BOS_ID = "tokenizer.ggml.bos_token_id"
TOKENIZER_EOS_ID = "tokenizer.ggml.eos_token_id"
TOKENIZER_PAD_ID = "tokenizer.ggml.padding_token_id"
TOKENIZER_ADD_BOS = "tokenizer.ggml.add_bos_token"
TOKENIZER_PRETOKENIZE_REGEX = "omnivoice.tokenizer.pretokenize_regex"  # from tokenizer.json's Split
TOKENIZER_NORMALIZER = "omnivoice.tokenizer.normalizer"                # "NFC" or "none"
# the pretokenize regex of Qwen2/Qwen3 (tokenizer.json's Split pattern, Oniguruma syntax)
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4

LM_KEY_TYPES: dict[str, str] = {
    GENERAL_ARCHITECTURE: "str", GENERAL_NAME: "str", GENERAL_FILE_TYPE: "u32", GENERAL_ALIGNMENT: "u32",
    LM_BLOCK_COUNT: "u32", LM_CONTEXT_LENGTH: "u32", LM_EMBEDDING_LENGTH: "u32", LM_FEED_FORWARD_LENGTH: "u32",
    LM_HEAD_COUNT: "u32", LM_HEAD_COUNT_KV: "u32", LM_KEY_LENGTH: "u32", LM_VALUE_LENGTH: "u32",
    LM_RMS_EPS: "f32", LM_ROPE_FREQ_BASE: "f32", LM_VOCAB_SIZE: "u32",
    TIE_WORD_EMBEDDINGS: "bool", NUM_AUDIO_CODEBOOK: "u32", AUDIO_VOCAB_SIZE: "u32", AUDIO_MASK_ID: "u32",
    AUDIO_CODEBOOK_WEIGHTS: "[f32]", CODEBOOK_LAYER_OFFSETS: "[u32]",
    **{k: "u32" for k in SPECIAL_TOKENS},
    TOKENIZER_MODEL: "str", TOKENIZER_PRE: "str", TOKENIZER_TOKENS: "[str]", TOKENIZER_TOKEN_TYPE: "[i32]",
    TOKENIZER_MERGES: "[str]", TOKENIZER_EOS_ID: "u32", TOKENIZER_PAD_ID: "u32", TOKENIZER_ADD_BOS: "bool",
    TOKENIZER_PRETOKENIZE_REGEX: "str", TOKENIZER_NORMALIZER: "str",
}
# present only when the checkpoint's tokenizer defines one (Qwen's has no BOS)
LM_OPTIONAL_KEY_TYPES: dict[str, str] = {TOKENIZER_BOS_ID: "u32", GENERAL_QUANTIZATION_VERSION: "u32"}

# --- codec ------------------------------------------------------------------------------------------
SAMPLE_RATE = "omnivoice.sample_rate"
SEMANTIC_SAMPLE_RATE = "omnivoice.semantic_sample_rate"
DOWNSAMPLE_FACTOR = "omnivoice.downsample_factor"                    # HuBERT's total stride (320)
SEMANTIC_DOWNSAMPLE_FACTOR = "omnivoice.semantic_downsample_factor"  # keep every 2nd HuBERT frame
HOP_LENGTH = "omnivoice.hop_length"                                  # samples per code frame (960)
FRAME_RATE = "omnivoice.frame_rate"                                  # code frames per second (25)
HIDDEN_SIZE = "omnivoice.hidden_size"                                # acoustic + semantic width (fc)
CODEBOOK_SIZE = "omnivoice.codebook_size"
CODEBOOK_DIM = "omnivoice.codebook_dim"
N_CODEBOOKS = "omnivoice.n_codebooks"                                # quantizers used (8)
CONV_TRANSPOSE_LAYOUT = "omnivoice.conv_transpose_layout"            # "oc_k_ic", see the converter
SOURCE_SHA256 = "omnivoice.source_sha256"  # what the file was converted from: convert/source.py's source_digest

AC_ENCODER_HIDDEN_SIZE = "omnivoice.acoustic.encoder_hidden_size"
AC_DECODER_HIDDEN_SIZE = "omnivoice.acoustic.decoder_hidden_size"
AC_HIDDEN_SIZE = "omnivoice.acoustic.hidden_size"
AC_N_CODEBOOKS = "omnivoice.acoustic.n_codebooks"                    # DAC's own (9), unused
AC_HOP_LENGTH = "omnivoice.acoustic.hop_length"
AC_UPSAMPLING_RATIOS = "omnivoice.acoustic.upsampling_ratios"
AC_DOWNSAMPLING_RATIOS = "omnivoice.acoustic.downsampling_ratios"
AC_INPUT_PAD = "omnivoice.acoustic.input_pad"           # both sides, when len % hop != 0 (hop // 2)
AC_KERNEL_SIZE = "omnivoice.acoustic.kernel_size"       # encoder conv1, decoder conv1 and conv2 (7)
AC_ENCODER_OUT_KERNEL = "omnivoice.acoustic.encoder_out_kernel"  # encoder conv2 (3)
AC_RES_KERNEL = "omnivoice.acoustic.res_kernel"         # residual unit conv1 (7)
AC_RES_DILATIONS = "omnivoice.acoustic.res_dilations"   # [1, 3, 9]
AC_ENCODER_CHANNELS = "omnivoice.acoustic.encoder_channels"    # output width of each encoder block
AC_ENCODER_KERNELS = "omnivoice.acoustic.encoder_kernels"      # strided conv kernel of each block (2 s)
AC_ENCODER_PADDINGS = "omnivoice.acoustic.encoder_paddings"    # ceil(s / 2)
AC_DECODER_CHANNELS = "omnivoice.acoustic.decoder_channels"    # output width of each decoder block
AC_DECODER_KERNELS = "omnivoice.acoustic.decoder_kernels"      # transposed conv kernel of each block (2 s)
AC_DECODER_PADDINGS = "omnivoice.acoustic.decoder_paddings"    # ceil(s / 2)
AC_DECODER_OUTPUT_PADDINGS = "omnivoice.acoustic.decoder_output_paddings"  # s % 2
AC_SNAKE_EPS = "omnivoice.acoustic.snake_eps"           # y = x + sin^2(a x) / (a + eps)
AC_DECODER_TANH = "omnivoice.acoustic.decoder_tanh"     # false: OmniVoice's DAC has no output tanh

SEM_HIDDEN_SIZE = "omnivoice.semantic.hidden_size"
SEM_INTERMEDIATE_SIZE = "omnivoice.semantic.intermediate_size"
SEM_NUM_HEADS = "omnivoice.semantic.num_attention_heads"
SEM_NUM_LAYERS = "omnivoice.semantic.num_hidden_layers"
SEM_NUM_FEAT_LAYERS = "omnivoice.semantic.num_feat_extract_layers"
SEM_CONV_DIM = "omnivoice.semantic.conv_dim"
SEM_CONV_KERNEL = "omnivoice.semantic.conv_kernel"
SEM_CONV_STRIDE = "omnivoice.semantic.conv_stride"
SEM_CONV_BIAS = "omnivoice.semantic.conv_bias"
SEM_FEAT_EXTRACT_NORM = "omnivoice.semantic.feat_extract_norm"          # "group": GroupNorm on layer 0
SEM_DO_STABLE_LAYER_NORM = "omnivoice.semantic.do_stable_layer_norm"    # false: post-LN layers
SEM_FEAT_PROJ_LAYER_NORM = "omnivoice.semantic.feat_proj_layer_norm"
SEM_NUM_CONV_POS = "omnivoice.semantic.num_conv_pos_embeddings"
SEM_NUM_CONV_POS_GROUPS = "omnivoice.semantic.num_conv_pos_embedding_groups"
SEM_POS_CONV_TRIM = "omnivoice.semantic.pos_conv_trim"   # samples dropped at the end (1 for an even kernel)
SEM_LAYER_NORM_EPS = "omnivoice.semantic.layer_norm_eps"
SEM_GROUP_NORM_EPS = "omnivoice.semantic.group_norm_eps"
SEM_HIDDEN_ACT = "omnivoice.semantic.hidden_act"
SEM_FEAT_EXTRACT_ACT = "omnivoice.semantic.feat_extract_activation"
SEM_INPUT_PAD = "omnivoice.semantic.input_pad"           # zeros each side of the 16 kHz input (160)

SENC_KERNEL_SIZE = "omnivoice.semantic_encoder.kernel_size"
SENC_UNIT_KERNEL_SIZE = "omnivoice.semantic_encoder.unit_kernel_size"
SENC_STRIDES = "omnivoice.semantic_encoder.strides"
SENC_CHANNEL_RATIOS = "omnivoice.semantic_encoder.channel_ratios"
SENC_BLOCK_DILATIONS = "omnivoice.semantic_encoder.block_dilations"
SENC_CHANNELS = "omnivoice.semantic_encoder.channels"    # output width of each block

CODEC_KEY_TYPES: dict[str, str] = {
    GENERAL_ARCHITECTURE: "str", GENERAL_NAME: "str", GENERAL_FILE_TYPE: "u32", GENERAL_ALIGNMENT: "u32",
    SAMPLE_RATE: "u32", SEMANTIC_SAMPLE_RATE: "u32", DOWNSAMPLE_FACTOR: "u32", SEMANTIC_DOWNSAMPLE_FACTOR: "u32",
    HOP_LENGTH: "u32", FRAME_RATE: "u32", HIDDEN_SIZE: "u32", CODEBOOK_SIZE: "u32", CODEBOOK_DIM: "u32",
    N_CODEBOOKS: "u32", CONV_TRANSPOSE_LAYOUT: "str", SOURCE_SHA256: "str",
    AC_ENCODER_HIDDEN_SIZE: "u32", AC_DECODER_HIDDEN_SIZE: "u32", AC_HIDDEN_SIZE: "u32", AC_N_CODEBOOKS: "u32",
    AC_HOP_LENGTH: "u32", AC_UPSAMPLING_RATIOS: "[u32]", AC_DOWNSAMPLING_RATIOS: "[u32]", AC_INPUT_PAD: "u32",
    AC_KERNEL_SIZE: "u32", AC_ENCODER_OUT_KERNEL: "u32", AC_RES_KERNEL: "u32", AC_RES_DILATIONS: "[u32]",
    AC_ENCODER_CHANNELS: "[u32]", AC_ENCODER_KERNELS: "[u32]", AC_ENCODER_PADDINGS: "[u32]",
    AC_DECODER_CHANNELS: "[u32]", AC_DECODER_KERNELS: "[u32]", AC_DECODER_PADDINGS: "[u32]",
    AC_DECODER_OUTPUT_PADDINGS: "[u32]", AC_SNAKE_EPS: "f32", AC_DECODER_TANH: "bool",
    SEM_HIDDEN_SIZE: "u32", SEM_INTERMEDIATE_SIZE: "u32", SEM_NUM_HEADS: "u32", SEM_NUM_LAYERS: "u32",
    SEM_NUM_FEAT_LAYERS: "u32", SEM_CONV_DIM: "[u32]", SEM_CONV_KERNEL: "[u32]", SEM_CONV_STRIDE: "[u32]",
    SEM_CONV_BIAS: "bool", SEM_FEAT_EXTRACT_NORM: "str", SEM_DO_STABLE_LAYER_NORM: "bool",
    SEM_FEAT_PROJ_LAYER_NORM: "bool", SEM_NUM_CONV_POS: "u32", SEM_NUM_CONV_POS_GROUPS: "u32",
    SEM_POS_CONV_TRIM: "u32", SEM_LAYER_NORM_EPS: "f32", SEM_GROUP_NORM_EPS: "f32", SEM_HIDDEN_ACT: "str",
    SEM_FEAT_EXTRACT_ACT: "str", SEM_INPUT_PAD: "u32",
    SENC_KERNEL_SIZE: "u32", SENC_UNIT_KERNEL_SIZE: "u32", SENC_STRIDES: "[u32]", SENC_CHANNEL_RATIOS: "[f32]",
    SENC_BLOCK_DILATIONS: "[u32]", SENC_CHANNELS: "[u32]",
}
