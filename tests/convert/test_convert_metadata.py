"""GGUF metadata: every key present with its declared type, and values equal to what the configs say."""

from __future__ import annotations

import json
import math

import pytest

from omnivoice.gguf import keys as K
from tests.convert.conftest import BASIC_QUANTS


def _json(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("quant", BASIC_QUANTS)
def test_lm_keys_complete_and_typed(quant, converted, parse):
    g = parse(converted[quant][0])
    for key, typ in K.LM_KEY_TYPES.items():
        assert key in g.kv, key
        assert g.kv[key][0] == typ, (key, g.kv[key][0], typ)
    unknown = set(g.kv) - set(K.LM_KEY_TYPES) - set(K.LM_OPTIONAL_KEY_TYPES)
    assert not unknown
    assert g.value(K.GENERAL_FILE_TYPE) == {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7}[quant]


def test_lm_values_follow_config(converted, parse, tiny_ckpt):
    g = parse(converted["f32"][0])
    cfg = _json(tiny_ckpt / "config.json")
    llm = cfg["llm_config"]
    assert g.value(K.GENERAL_ARCHITECTURE) == K.ARCH_LM == "omnivoice-lm"
    expect = {
        K.LM_BLOCK_COUNT: llm["num_hidden_layers"], K.LM_CONTEXT_LENGTH: llm["max_position_embeddings"],
        K.LM_EMBEDDING_LENGTH: llm["hidden_size"], K.LM_FEED_FORWARD_LENGTH: llm["intermediate_size"],
        K.LM_HEAD_COUNT: llm["num_attention_heads"], K.LM_HEAD_COUNT_KV: llm["num_key_value_heads"],
        K.LM_KEY_LENGTH: llm["head_dim"], K.LM_VALUE_LENGTH: llm["head_dim"], K.LM_VOCAB_SIZE: llm["vocab_size"],
        K.TIE_WORD_EMBEDDINGS: llm["tie_word_embeddings"], K.NUM_AUDIO_CODEBOOK: cfg["num_audio_codebook"],
        K.AUDIO_VOCAB_SIZE: cfg["audio_vocab_size"], K.AUDIO_MASK_ID: cfg["audio_mask_id"],
        K.AUDIO_CODEBOOK_WEIGHTS: [float(w) for w in cfg["audio_codebook_weights"]],
        K.CODEBOOK_LAYER_OFFSETS: [k * cfg["audio_vocab_size"] for k in range(cfg["num_audio_codebook"])],
    }
    for key, want in expect.items():
        assert g.value(key) == want, key
    assert g.value(K.LM_RMS_EPS) == pytest.approx(llm["rms_norm_eps"], rel=1e-6)
    assert g.value(K.LM_ROPE_FREQ_BASE) == llm["rope_parameters"]["rope_theta"]


def test_lm_tokenizer_metadata(converted, parse, tiny_ckpt):
    g = parse(converted["f16"][0])
    tj = _json(tiny_ckpt / "tokenizer.json")
    tc = _json(tiny_ckpt / "tokenizer_config.json")
    tokens, types = g.value(K.TOKENIZER_TOKENS), g.value(K.TOKENIZER_TOKEN_TYPE)
    vocab = tj["model"]["vocab"]
    assert len(tokens) == len(types) == len(vocab) + len(tj["added_tokens"]) == 151676
    assert all(tokens[i] == t and types[i] == 1 for t, i in vocab.items())
    for a in tj["added_tokens"]:
        assert tokens[a["id"]] == a["content"]
        assert types[a["id"]] == (3 if a["special"] else 4), a["content"]
    assert g.value(K.TOKENIZER_MERGES) == tj["model"]["merges"]
    assert len(g.value(K.TOKENIZER_MERGES)) == 151387
    by_text = {a["content"]: a["id"] for a in tj["added_tokens"]}
    assert g.value(K.TOKENIZER_EOS_ID) == by_text[tc["eos_token"]]
    assert g.value(K.TOKENIZER_PAD_ID) == by_text[tc["pad_token"]]
    assert K.TOKENIZER_BOS_ID not in g.kv  # Qwen has no BOS token
    for key, text in K.SPECIAL_TOKENS.items():
        assert g.value(key) == by_text[text]
    assert g.value(K.SPECIAL_DENOISE) == 151669 and g.value(K.SPECIAL_TEXT_END) == 151675
    assert g.value(K.TOKENIZER_MODEL) == "gpt2" and g.value(K.TOKENIZER_PRE) == "qwen2"
    assert g.value(K.TOKENIZER_PRETOKENIZE_REGEX) == tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]
    assert g.value(K.TOKENIZER_NORMALIZER) == "NFC"


def test_codec_keys_complete_and_typed(converted, parse):
    g = parse(converted["f32"][1])
    for key, typ in K.CODEC_KEY_TYPES.items():
        assert key in g.kv, key
        assert g.kv[key][0] == typ, (key, g.kv[key][0], typ)
    assert not set(g.kv) - set(K.CODEC_KEY_TYPES)
    assert g.value(K.GENERAL_ARCHITECTURE) == K.ARCH_CODEC == "omnivoice-tokenizer"


def test_codec_values_follow_config(converted, parse, tiny_ckpt):
    g = parse(converted["f32"][1])
    cfg = _json(tiny_ckpt / "audio_tokenizer" / "config.json")
    ac, sem = cfg["acoustic_model_config"], cfg["semantic_model_config"]
    ratios = ac["downsampling_ratios"]
    hop = math.prod(ratios)
    frame_rate = math.ceil(cfg["sample_rate"] / hop)
    expect = {
        K.SAMPLE_RATE: cfg["sample_rate"], K.SEMANTIC_SAMPLE_RATE: cfg["semantic_sample_rate"],
        K.DOWNSAMPLE_FACTOR: cfg["downsample_factor"], K.HOP_LENGTH: hop, K.FRAME_RATE: frame_rate,
        K.SEMANTIC_DOWNSAMPLE_FACTOR: int(hop / (cfg["sample_rate"] / cfg["semantic_sample_rate"])
                                          / cfg["downsample_factor"]),
        K.HIDDEN_SIZE: ac["hidden_size"] + sem["hidden_size"], K.CODEBOOK_SIZE: cfg["codebook_size"],
        K.CODEBOOK_DIM: cfg["codebook_dim"],
        K.N_CODEBOOKS: int(1000 * cfg["target_bandwidths"][-1] // (frame_rate * 10)),
        K.CONV_TRANSPOSE_LAYOUT: "oc_k_ic",
        K.AC_ENCODER_HIDDEN_SIZE: ac["encoder_hidden_size"], K.AC_DECODER_HIDDEN_SIZE: ac["decoder_hidden_size"],
        K.AC_HIDDEN_SIZE: ac["hidden_size"], K.AC_N_CODEBOOKS: ac["n_codebooks"], K.AC_HOP_LENGTH: hop,
        K.AC_UPSAMPLING_RATIOS: ac["upsampling_ratios"], K.AC_DOWNSAMPLING_RATIOS: ratios, K.AC_INPUT_PAD: hop // 2,
        K.AC_DECODER_CHANNELS: [ac["decoder_hidden_size"] >> (i + 1) for i in range(5)],
        K.AC_ENCODER_CHANNELS: [ac["encoder_hidden_size"] << (i + 1) for i in range(5)],
        K.AC_DECODER_KERNELS: [2 * s for s in ac["upsampling_ratios"]],
        K.AC_DECODER_PADDINGS: [(s + 1) // 2 for s in ac["upsampling_ratios"]],
        K.AC_DECODER_OUTPUT_PADDINGS: [s % 2 for s in ac["upsampling_ratios"]],
        K.AC_ENCODER_KERNELS: [2 * s for s in ratios], K.AC_ENCODER_PADDINGS: [(s + 1) // 2 for s in ratios],
        K.AC_RES_DILATIONS: [1, 3, 9], K.AC_DECODER_TANH: False,
        K.SEM_HIDDEN_SIZE: sem["hidden_size"], K.SEM_INTERMEDIATE_SIZE: sem["intermediate_size"],
        K.SEM_NUM_HEADS: sem["num_attention_heads"], K.SEM_NUM_LAYERS: sem["num_hidden_layers"],
        K.SEM_NUM_FEAT_LAYERS: sem["num_feat_extract_layers"], K.SEM_CONV_DIM: sem["conv_dim"],
        K.SEM_CONV_KERNEL: sem["conv_kernel"], K.SEM_CONV_STRIDE: sem["conv_stride"],
        K.SEM_CONV_BIAS: sem["conv_bias"], K.SEM_FEAT_EXTRACT_NORM: sem["feat_extract_norm"],
        K.SEM_DO_STABLE_LAYER_NORM: sem["do_stable_layer_norm"], K.SEM_NUM_CONV_POS: sem["num_conv_pos_embeddings"],
        K.SEM_NUM_CONV_POS_GROUPS: sem["num_conv_pos_embedding_groups"], K.SEM_POS_CONV_TRIM: 1,
        K.SEM_INPUT_PAD: 160, K.SEM_HIDDEN_ACT: sem["hidden_act"],
        K.SENC_KERNEL_SIZE: cfg["kernel_size"], K.SENC_UNIT_KERNEL_SIZE: cfg["unit_kernel_size"],
        K.SENC_STRIDES: cfg["strides"], K.SENC_CHANNEL_RATIOS: [float(r) for r in cfg["channel_ratios"]],
        K.SENC_BLOCK_DILATIONS: cfg["block_dilations"],
        K.SENC_CHANNELS: [int(sem["hidden_size"] * r) for r in cfg["channel_ratios"]],
    }
    for key, want in expect.items():
        assert g.value(key) == want, key
    assert g.value(K.SEM_LAYER_NORM_EPS) == pytest.approx(sem["layer_norm_eps"], rel=1e-6)
    assert g.value(K.HOP_LENGTH) == 960 and g.value(K.FRAME_RATE) == 25 and g.value(K.N_CODEBOOKS) == 8
