"""The codec GGUF (``omnivoice-tokenizer-F32.gguf``, arch ``omnivoice-tokenizer``): HuBERT, semantic encoder,
DAC encoder/decoder and RVQ of the Higgs Audio v2 tokenizer, all F32.

Tensor names are the Hugging Face names, shapes reversed into ggml order, except for two transforms:

* HuBERT's positional conv is stored with its weight norm folded:
  ``semantic_model.encoder.pos_conv_embed.conv.weight = g * v / ||v||`` with the norm over dims (0, 1)
  (``torch._weight_norm(v, g, dim=2)``), from ``...conv.parametrizations.weight.original0`` (g, [1, 1, K])
  and ``...original1`` (v, [C, C / groups, K]) (or the older ``weight_g`` / ``weight_v``).
* Every ConvTranspose1d weight (torch [IC, OC, K]) is permuted for the mul_mat + col2im_1d decomposition:
  ``W.transpose(1, 2, 0).reshape(OC * K, IC)`` -> ggml ne = (IC, K * OC) with k fastest inside the K * OC axis
  (``omnivoice.conv_transpose_layout = "oc_k_ic"``; ``omnivoice.acoustic.decoder_kernels`` gives K to undo it),
  by ``omnivoice.gguf.layouts.conv_transpose_weight`` (numpy only: converting needs no ggml build).

Dropped (never read at inference): ``decoder_semantic.*`` and ``fc1.*`` (semantic reconstruction, training
only), ``quantizer.quantizers.*.codebook.{embed_avg, cluster_size, inited}`` (k-means EMA state), and
``semantic_model.masked_spec_embed`` if present. Every hyper-parameter the graphs need is written as
``omnivoice.*`` metadata (see ``omnivoice.gguf.keys``), so a small test checkpoint needs no special casing.
"""

from __future__ import annotations

import math
import re
import sys

import numpy as np

from ..gguf import keys as K, names as N
from ..gguf.layouts import CONV_TRANSPOSE_LAYOUT, conv_transpose_weight
from .checkpoint import Checkpoint, require
from .errors import CheckpointError, raise_problems
from ..gguf.writer import OutTensor

POS_CONV = N.HUBERT_POS_CONV
_DROP = re.compile(r"^(decoder_semantic\.|fc1\.|quantizer\.quantizers\.\d+\.codebook\.(embed_avg|cluster_size|inited)$"
                   r"|semantic_model\.masked_spec_embed$)")
_HUBERT_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers", "conv_dim",
                  "conv_kernel", "conv_stride", "num_conv_pos_embeddings", "num_conv_pos_embedding_groups",
                  "layer_norm_eps", "feat_extract_norm")


def codec_hparams(cfg: dict, pre: dict | None = None) -> dict:
    """Resolve the audio tokenizer config the way HiggsAudioV2TokenizerConfig does (same defaults)."""
    where = "audio_tokenizer/config.json"
    ac = cfg.get("acoustic_model_config")
    sem = cfg.get("semantic_model_config")
    if not isinstance(ac, dict) or not isinstance(sem, dict):
        raise CheckpointError(f"{where}: acoustic_model_config and semantic_model_config are required")
    aw, sw = f"{where} acoustic_model_config", f"{where} semantic_model_config"
    down = [int(r) for r in require(ac, "downsampling_ratios", aw, list)]
    up = [int(r) for r in (ac.get("upsampling_ratios") or down[::-1])]
    for f in _HUBERT_FIELDS:
        require(sem, f, sw, (int, float, list, str))
    if sem.get("conv_pos_batch_norm"):
        raise CheckpointError(f"{sw}: conv_pos_batch_norm is true; only the weight-normed positional conv is supported")
    sr, ssr = int(cfg.get("sample_rate", 24000)), int(cfg.get("semantic_sample_rate", 16000))
    dsf = int(cfg.get("downsample_factor", 320))
    hop = int(np.prod(down))
    frame_rate = math.ceil(sr / hop)
    cb_size, cb_dim = int(cfg.get("codebook_size", 1024)), int(cfg.get("codebook_dim", 64))
    bandwidths = cfg.get("target_bandwidths", [0.5, 1, 1.5, 2, 4])
    n_q = int(1000 * bandwidths[-1] // (frame_rate * math.ceil(math.log2(cb_size))))
    if pre is not None:
        if pre.get("sampling_rate", sr) != sr or pre.get("hop_length", hop) != hop:
            raise CheckpointError(f"audio_tokenizer/preprocessor_config.json: sampling_rate/hop_length "
                                  f"{pre.get('sampling_rate')}/{pre.get('hop_length')} disagree with config.json "
                                  f"({sr}/{hop})")
    n_feat = len(sem["conv_dim"])
    return {
        "sample_rate": sr, "semantic_sample_rate": ssr, "downsample_factor": dsf,
        "semantic_downsample_factor": int(hop / (sr / ssr) / dsf), "hop": hop, "frame_rate": frame_rate,
        "codebook_size": cb_size, "codebook_dim": cb_dim, "n_quantizers": n_q,
        "enc_hidden": require(ac, "encoder_hidden_size", aw), "dec_hidden": require(ac, "decoder_hidden_size", aw),
        "ac_hidden": require(ac, "hidden_size", aw), "ac_n_codebooks": int(ac.get("n_codebooks", 9)),
        "down": down, "up": up,
        "sem": sem, "sem_hidden": int(sem["hidden_size"]), "n_feat": n_feat,
        "kernel_size": int(cfg.get("kernel_size", 3)), "unit_kernel_size": int(cfg.get("unit_kernel_size", 3)),
        "strides": [int(s) for s in cfg.get("strides", [1, 1])],
        "channel_ratios": [float(r) for r in cfg.get("channel_ratios", [1, 1])],
        "block_dilations": [int(d) for d in cfg.get("block_dilations", [1, 1])],
    }


def _conv(module: str, oc: int, ic: int, k: int, bias: bool = True, **ix) -> list[tuple[str, tuple]]:
    return ([(N.tensor(module, N.WEIGHT, **ix), (oc, ic, k))]
            + ([(N.tensor(module, N.BIAS, **ix), (oc,))] if bias else []))


def _linear(module: str, n_out: int, n_in: int, **ix) -> list[tuple[str, tuple]]:
    return [(N.tensor(module, N.WEIGHT, **ix), (n_out, n_in)), (N.tensor(module, N.BIAS, **ix), (n_out,))]


def _norm(module: str, c: int, **ix) -> list[tuple[str, tuple]]:
    return [(N.tensor(module, N.WEIGHT, **ix), (c,)), (N.tensor(module, N.BIAS, **ix), (c,))]


def _snake(module: str, c: int, *path: str, **ix) -> list[tuple[str, tuple]]:
    return [(N.tensor(module, *path, N.ALPHA, **ix), (1, c, 1))]


def _res_unit(module: str, d: int, **ix) -> list[tuple[str, tuple]]:
    return (_snake(module, d, N.RES_SNAKE1, **ix) + _conv(f"{module}.{N.RES_CONV1}", d, d, 7, **ix)
            + _snake(module, d, N.RES_SNAKE2, **ix) + _conv(f"{module}.{N.RES_CONV2}", d, d, 1, **ix))


def semantic_encoder_channels(hp: dict) -> list[int]:
    """Output width of each SemanticEncoder block."""
    return [int(hp["sem_hidden"] * r) for r in hp["channel_ratios"]]


def codec_inventory(hp: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor of the codec GGUF (after transforms: the folded pos conv, torch shapes), in file order."""
    inv: list[tuple[str, tuple]] = []
    sem, S = hp["sem"], hp["sem_hidden"]
    # HuBERT
    cin = 1
    for i in range(hp["n_feat"]):
        c = int(sem["conv_dim"][i])
        inv += _conv(N.HUBERT_FEAT_CONV, c, cin, int(sem["conv_kernel"][i]), bias=bool(sem.get("conv_bias", False)),
                     i=i)
        if (sem["feat_extract_norm"] == "group" and i == 0) or sem["feat_extract_norm"] == "layer":
            inv += _norm(N.HUBERT_FEAT_NORM, c, i=i)
        cin = c
    if sem.get("feat_proj_layer_norm", True):
        inv += _norm(N.HUBERT_PROJ_NORM, cin)
    inv += _linear(N.HUBERT_PROJ, S, cin)
    groups, kpos = int(sem["num_conv_pos_embedding_groups"]), int(sem["num_conv_pos_embeddings"])
    inv += _conv(N.HUBERT_POS_CONV, S, S // groups, kpos) + _norm(N.HUBERT_ENC_NORM, S)
    inter = int(sem["intermediate_size"])
    for i in range(int(sem["num_hidden_layers"])):
        for proj in (N.HUBERT_ATTN_Q, N.HUBERT_ATTN_K, N.HUBERT_ATTN_V, N.HUBERT_ATTN_OUT):
            inv += _linear(proj, S, S, i=i)
        inv += (_norm(N.HUBERT_ATTN_NORM, S, i=i) + _linear(N.HUBERT_FFN_UP, inter, S, i=i)
                + _linear(N.HUBERT_FFN_DOWN, S, inter, i=i) + _norm(N.HUBERT_FFN_NORM, S, i=i))
    # semantic encoder
    inv += _conv(N.SEMANTIC_CONV, S, S, hp["kernel_size"], bias=False)
    cin = S
    for i, (stride, cout) in enumerate(zip(hp["strides"], semantic_encoder_channels(hp))):
        for j in range(len(hp["block_dilations"])):
            inv += _conv(N.SEMANTIC_RES_CONV1, cin, cin, hp["unit_kernel_size"], bias=False, i=i, j=j)
            inv += _conv(N.SEMANTIC_RES_CONV2, cin, cin, 1, bias=False, i=i, j=j)
        inv += _conv(N.SEMANTIC_BLOCK_CONV, cout, cin, 3 if stride == 1 else 2 * stride, i=i)
        cin = cout
    # DAC encoder
    E, H = hp["enc_hidden"], hp["ac_hidden"]
    inv += _conv(N.DAC_ENC_CONV_IN, E, 1, 7)
    for i, s in enumerate(hp["down"]):
        dim = E * 2 ** (i + 1)
        for r in (1, 2, 3):
            inv += _res_unit(N.DAC_ENC_RES_UNIT, dim // 2, i=i, j=r)
        inv += _snake(N.DAC_ENC_SNAKE, dim // 2, i=i) + _conv(N.DAC_ENC_CONV, dim, dim // 2, 2 * s, i=i)
    D = E * 2 ** len(hp["down"])
    inv += _snake(N.DAC_ENC_SNAKE_OUT, D) + _conv(N.DAC_ENC_CONV_OUT, H, D, 3)
    # fc, RVQ, fc2
    hc = H + S
    inv += _linear(N.FC, hc, hc)
    for q in range(hp["n_quantizers"]):
        inv += [(N.tensor(N.RVQ_CODEBOOK, N.EMBED, i=q), (hp["codebook_size"], hp["codebook_dim"]))]
        dim = hp["codebook_dim"]
        inv += _linear(N.RVQ_PROJ_IN, dim, hc, i=q) + _linear(N.RVQ_PROJ_OUT, hc, dim, i=q)
    inv += _linear(N.FC2, H, hc)
    # DAC decoder
    Dd = hp["dec_hidden"]
    inv += _conv(N.DAC_DEC_CONV_IN, Dd, H, 7)
    for i, s in enumerate(hp["up"]):
        ic, oc = Dd // 2 ** i, Dd // 2 ** (i + 1)
        inv += _snake(N.DAC_DEC_SNAKE, ic, i=i)
        inv += [(N.tensor(N.DAC_DEC_CONV_T, N.WEIGHT, i=i), (ic, oc, 2 * s)), (N.tensor(N.DAC_DEC_CONV_T, N.BIAS, i=i),
                                                                             (oc,))]
        for r in (1, 2, 3):
            inv += _res_unit(N.DAC_DEC_RES_UNIT, oc, i=i, j=r)
    out = Dd // 2 ** len(hp["up"])
    inv += _snake(N.DAC_DEC_SNAKE_OUT, out) + _conv(N.DAC_DEC_CONV_OUT, 1, out, 7)
    return inv


def fold_weight_norm(g: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``torch._weight_norm(v, g, dim=2)``: each kernel tap's [C, C/groups] slice rescaled to norm g[k]."""
    v64 = v.astype(np.float64)
    norm = np.sqrt(np.sum(v64 * v64, axis=(0, 1), keepdims=True))
    return (v64 * (g.astype(np.float64).reshape(1, 1, -1) / norm)).astype(np.float32)


def _pos_conv_sources(ck: Checkpoint) -> tuple[str, str] | str:
    p = POS_CONV
    for g, v in ((p + ".parametrizations.weight.original0", p + ".parametrizations.weight.original1"),
                 (p + ".weight_g", p + ".weight_v")):
        if g in ck.codec and v in ck.codec:
            return g, v
    if p + ".weight" in ck.codec:
        return p + ".weight"
    raise CheckpointError(f"{ck.root / 'audio_tokenizer' / 'model.safetensors'}: HuBERT positional conv weight "
                          f"missing ({p}.parametrizations.weight.original0/original1)")


def _acoustic_meta(hp: dict) -> list[tuple]:
    E, Dd = hp["enc_hidden"], hp["dec_hidden"]
    return [
        (K.AC_ENCODER_HIDDEN_SIZE, E, "u32"), (K.AC_DECODER_HIDDEN_SIZE, Dd, "u32"),
        (K.AC_HIDDEN_SIZE, hp["ac_hidden"], "u32"), (K.AC_N_CODEBOOKS, hp["ac_n_codebooks"], "u32"),
        (K.AC_HOP_LENGTH, hp["hop"], "u32"), (K.AC_UPSAMPLING_RATIOS, hp["up"], "[u32]"),
        (K.AC_DOWNSAMPLING_RATIOS, hp["down"], "[u32]"), (K.AC_INPUT_PAD, hp["hop"] // 2, "u32"),
        (K.AC_KERNEL_SIZE, 7, "u32"), (K.AC_ENCODER_OUT_KERNEL, 3, "u32"), (K.AC_RES_KERNEL, 7, "u32"),
        (K.AC_RES_DILATIONS, [1, 3, 9], "[u32]"),
        (K.AC_ENCODER_CHANNELS, [E * 2 ** (i + 1) for i in range(len(hp["down"]))], "[u32]"),
        (K.AC_ENCODER_KERNELS, [2 * s for s in hp["down"]], "[u32]"),
        (K.AC_ENCODER_PADDINGS, [math.ceil(s / 2) for s in hp["down"]], "[u32]"),
        (K.AC_DECODER_CHANNELS, [Dd // 2 ** (i + 1) for i in range(len(hp["up"]))], "[u32]"),
        (K.AC_DECODER_KERNELS, [2 * s for s in hp["up"]], "[u32]"),
        (K.AC_DECODER_PADDINGS, [math.ceil(s / 2) for s in hp["up"]], "[u32]"),
        (K.AC_DECODER_OUTPUT_PADDINGS, [s % 2 for s in hp["up"]], "[u32]"),
        (K.AC_SNAKE_EPS, 1e-9, "f32"), (K.AC_DECODER_TANH, False, "bool"),
    ]


def _semantic_meta(hp: dict) -> list[tuple]:
    sem = hp["sem"]
    return [
        (K.SEM_HIDDEN_SIZE, hp["sem_hidden"], "u32"), (K.SEM_INTERMEDIATE_SIZE, int(sem["intermediate_size"]), "u32"),
        (K.SEM_NUM_HEADS, int(sem["num_attention_heads"]), "u32"),
        (K.SEM_NUM_LAYERS, int(sem["num_hidden_layers"]), "u32"), (K.SEM_NUM_FEAT_LAYERS, hp["n_feat"], "u32"),
        (K.SEM_CONV_DIM, [int(c) for c in sem["conv_dim"]], "[u32]"),
        (K.SEM_CONV_KERNEL, [int(c) for c in sem["conv_kernel"]], "[u32]"),
        (K.SEM_CONV_STRIDE, [int(c) for c in sem["conv_stride"]], "[u32]"),
        (K.SEM_CONV_BIAS, bool(sem.get("conv_bias", False)), "bool"),
        (K.SEM_FEAT_EXTRACT_NORM, str(sem["feat_extract_norm"]), "str"),
        (K.SEM_DO_STABLE_LAYER_NORM, bool(sem.get("do_stable_layer_norm", False)), "bool"),
        (K.SEM_FEAT_PROJ_LAYER_NORM, bool(sem.get("feat_proj_layer_norm", True)), "bool"),
        (K.SEM_NUM_CONV_POS, int(sem["num_conv_pos_embeddings"]), "u32"),
        (K.SEM_NUM_CONV_POS_GROUPS, int(sem["num_conv_pos_embedding_groups"]), "u32"),
        (K.SEM_POS_CONV_TRIM, 1 if int(sem["num_conv_pos_embeddings"]) % 2 == 0 else 0, "u32"),
        (K.SEM_LAYER_NORM_EPS, float(sem["layer_norm_eps"]), "f32"),
        (K.SEM_GROUP_NORM_EPS, 1e-5, "f32"),  # torch.nn.GroupNorm's default, which HuBERT keeps
        (K.SEM_HIDDEN_ACT, str(sem.get("hidden_act", "gelu")), "str"),
        (K.SEM_FEAT_EXTRACT_ACT, str(sem.get("feat_extract_activation", "gelu")), "str"),
        (K.SEM_INPUT_PAD, 160, "u32"),  # transformers' HiggsAudioV2TokenizerModel pads 160 samples each side
        (K.SENC_KERNEL_SIZE, hp["kernel_size"], "u32"), (K.SENC_UNIT_KERNEL_SIZE, hp["unit_kernel_size"], "u32"),
        (K.SENC_STRIDES, hp["strides"], "[u32]"), (K.SENC_CHANNEL_RATIOS, hp["channel_ratios"], "[f32]"),
        (K.SENC_BLOCK_DILATIONS, hp["block_dilations"], "[u32]"),
        (K.SENC_CHANNELS, semantic_encoder_channels(hp), "[u32]"),
    ]


def plan_codec(ck: Checkpoint) -> tuple[list[tuple], list[OutTensor]]:
    """Metadata and tensors of the codec GGUF; raises CheckpointError before anything is written."""
    hp = codec_hparams(ck.codec_config, ck.preprocessor_config)
    inv = codec_inventory(hp)
    pos = _pos_conv_sources(ck)
    path = ck.root / "audio_tokenizer" / "model.safetensors"
    problems = []
    for name, shape in inv:
        if name == POS_CONV + ".weight" and isinstance(pos, tuple):
            g, v = pos
            if ck.codec.shape(v) != shape or ck.codec.shape(g) != (1, 1, shape[2]):
                problems.append(f"{v} / {g} have shapes {list(ck.codec.shape(v))} / {list(ck.codec.shape(g))}, "
                                f"expected {list(shape)} / [1, 1, {shape[2]}]")
        elif name not in ck.codec:
            problems.append(f"{name} is missing")
        elif ck.codec.shape(name) != shape:
            problems.append(f"{name} has shape {list(ck.codec.shape(name))}, expected {list(shape)}")
    raise_problems(problems, f"{path}: weights do not match audio_tokenizer/config.json")
    known = {n for n, _ in inv} | (set(pos) if isinstance(pos, tuple) else set())
    extra = [n for n in ck.codec.names() if n not in known and not _DROP.match(n)]
    if extra:
        print(f"warning: dropping {len(extra)} unexpected codec tensor(s): {', '.join(extra[:5])}", file=sys.stderr)

    def producer(name: str):
        if name == POS_CONV + ".weight" and isinstance(pos, tuple):
            return lambda: fold_weight_norm(ck.codec.get(pos[0]), ck.codec.get(pos[1]))
        if name.endswith(".conv_t1.weight"):
            return lambda: conv_transpose_weight(ck.codec.get(name))
        return lambda: ck.codec.get(name).astype(np.float32)

    def out_shape(name: str, shape: tuple) -> tuple:
        if name.endswith(".conv_t1.weight"):
            ic, oc, k = shape
            return (oc * k, ic)
        return shape

    def source(name: str) -> str:
        if name == POS_CONV + ".weight" and isinstance(pos, tuple):
            return f"fold({pos[0]}, {pos[1]})"
        return f"permute({name})" if name.endswith(".conv_t1.weight") else name

    tensors = [OutTensor(n, out_shape(n, s), "F32", producer(n), source(n)) for n, s in inv]
    kv = [
        (K.GENERAL_NAME, "OmniVoice audio tokenizer", "str"),
        (K.GENERAL_FILE_TYPE, 0, "u32"),
        (K.SAMPLE_RATE, hp["sample_rate"], "u32"), (K.SEMANTIC_SAMPLE_RATE, hp["semantic_sample_rate"], "u32"),
        (K.DOWNSAMPLE_FACTOR, hp["downsample_factor"], "u32"),
        (K.SEMANTIC_DOWNSAMPLE_FACTOR, hp["semantic_downsample_factor"], "u32"),
        (K.HOP_LENGTH, hp["hop"], "u32"), (K.FRAME_RATE, hp["frame_rate"], "u32"),
        (K.HIDDEN_SIZE, hp["ac_hidden"] + hp["sem_hidden"], "u32"),
        (K.CODEBOOK_SIZE, hp["codebook_size"], "u32"), (K.CODEBOOK_DIM, hp["codebook_dim"], "u32"),
        (K.N_CODEBOOKS, hp["n_quantizers"], "u32"), (K.CONV_TRANSPOSE_LAYOUT, CONV_TRANSPOSE_LAYOUT, "str"),
        *_acoustic_meta(hp), *_semantic_meta(hp),
    ]
    return kv, tensors
