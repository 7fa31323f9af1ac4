"""The Higgs Audio v2 codec assembled: its config, the weights it uses and the encode / decode graphs.

Decode (the TTS output path), per sequence:
    codes int32 [8, T] -> RVQ decode [1024, T] -> fc2 [256, T] -> DAC decoder -> audio [960 T]
Encode (the voice-cloning reference path), audio at 24 kHz, [N] samples:
    semantic  resample to 16 kHz (numpy, torchaudio's filter) -> pad 160 each side -> HuBERT mean hidden state
              [768, T_h] -> every 2nd frame [768, T] -> SemanticEncoder [T, 768]
    acoustic  (pad 480 each side only when the encoder's output length would not equal T) -> DAC encoder [T, 256]
    concat [T, 1024] -> fc [1024, T] -> RVQ encode -> codes int32 [8, T]
as transformers' HiggsAudioV2TokenizerModel.encode / decode do (float32 throughout).

This module holds the config, the weight selection and the graph builders; omnivoice.codec.AudioCodec runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from ..gguf import keys as K
from .. import nn
from ..ggml import lib
from . import dac, hubert, rvq, semantic
from .hubert import HubertConfig
from .semantic import SemanticConfig

ARCH = K.ARCH_CODEC
PARTS = ("encode", "decode")


# ------------------------------------------------------------------------------------------------ config

@dataclass(frozen=True)
class CodecConfig:
    """Hyper-parameters of the codec, from the GGUF metadata (omnivoice.gguf.keys), checked against the shapes."""

    sample_rate: int                      # 24000
    semantic_sample_rate: int             # 16000 (HuBERT's input)
    hop_length: int                       # 960 samples per frame
    semantic_downsample_factor: int       # 2: every 2nd HuBERT frame
    upsampling_ratios: tuple[int, ...]    # decoder strides (8, 5, 4, 2, 3)
    downsampling_ratios: tuple[int, ...]  # encoder strides
    n_quantizers: int                     # 8
    codebook_size: int                    # 1024
    acoustic_input_pad: int = 480         # each side, when the DAC encoder's length would not match
    semantic_input_pad: int = 160         # each side of the 16 kHz HuBERT input
    snake_eps: float = 1e-9
    decoder_tanh: bool = False
    hubert: HubertConfig | None = None
    semantic: SemanticConfig = field(default_factory=SemanticConfig)

    @property
    def frame_rate(self) -> float:
        """Code frames per second (25.0)."""
        return self.sample_rate / self.hop_length

    @classmethod
    def from_gguf(cls, meta: dict, shapes: dict[str, tuple[int, ...]], source: str = "codec GGUF"
                  ) -> "CodecConfig":
        """Build from GGUF metadata and the tensors' ggml shapes (name -> ne); errors name the key or tensor."""
        def need(key: str):
            if key not in meta:
                raise ValueError(f"{source}: metadata key {key!r} is missing (re-convert the checkpoint with "
                                 "python -m omnivoice.convert)")
            return meta[key]

        def ints(key: str) -> tuple[int, ...]:
            return tuple(int(v) for v in need(key))

        def check(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(f"{source}: {what}")

        layout = need(K.CONV_TRANSPOSE_LAYOUT)
        check(layout == "oc_k_ic", f"{K.CONV_TRANSPOSE_LAYOUT} is {layout!r}; this build reads 'oc_k_ic'")
        n_q = int(need(K.N_CODEBOOKS))
        check(rvq.count_quantizers(shapes) >= n_q,
              f"{K.N_CODEBOOKS} is {n_q} but only {rvq.count_quantizers(shapes)} quantizer codebooks are stored")
        codebook_size = int(need(K.CODEBOOK_SIZE))
        embed = shapes[rvq.prefix(0) + "codebook.embed"]
        check(embed[1] == codebook_size, f"quantizer codebooks hold {embed[1]} entries, "
                                         f"{K.CODEBOOK_SIZE} says {codebook_size}")
        up, down = ints(K.AC_UPSAMPLING_RATIOS), ints(K.AC_DOWNSAMPLING_RATIOS)
        hop = int(need(K.HOP_LENGTH))
        check(hop == int(np.prod(down)), f"{K.HOP_LENGTH} = {hop} is not the product of {K.AC_DOWNSAMPLING_RATIOS} "
                                         f"{list(down)}")
        check(int(np.prod(up)) == hop, f"{K.AC_UPSAMPLING_RATIOS} {list(up)} do not multiply to the hop {hop}")
        for i, s in enumerate(up):  # the transposed-conv kernels must be 2 * stride (permuted [IC, K*OC])
            p = f"acoustic_decoder.block.{i}.conv_t1."
            if p + "weight" in shapes:
                k = shapes[p + "weight"][1] // shapes[p + "bias"][0]
                check(k == 2 * s, f"{p}weight has kernel {k}, expected 2 * {s} from {K.AC_UPSAMPLING_RATIOS}")
        tanh = bool(meta.get(K.AC_DECODER_TANH, False))

        hub = None
        if "semantic_model.encoder.pos_conv_embed.conv.weight" in shapes:
            for key, want in ((K.SEM_DO_STABLE_LAYER_NORM, False), (K.SEM_HIDDEN_ACT, "gelu"),
                              (K.SEM_FEAT_EXTRACT_ACT, "gelu")):
                got = need(key)
                check(got == want, f"{key} = {got!r} is not supported (expected {want!r})")
            hub = HubertConfig(
                n_layer=int(need(K.SEM_NUM_LAYERS)), n_head=int(need(K.SEM_NUM_HEADS)),
                conv_stride=ints(K.SEM_CONV_STRIDE), feat_extract_norm=str(need(K.SEM_FEAT_EXTRACT_NORM)),
                feat_proj_layer_norm=bool(need(K.SEM_FEAT_PROJ_LAYER_NORM)),
                pos_conv_groups=int(need(K.SEM_NUM_CONV_POS_GROUPS)), pos_conv_trim=int(need(K.SEM_POS_CONV_TRIM)),
                eps=float(need(K.SEM_LAYER_NORM_EPS)), norm_eps=float(need(K.SEM_GROUP_NORM_EPS)))
            check(hub.feat_extract_norm in ("group", "layer"),
                  f"{K.SEM_FEAT_EXTRACT_NORM} = {hub.feat_extract_norm!r}; expected 'group' or 'layer'")
            pos = shapes["semantic_model.encoder.pos_conv_embed.conv.weight"]          # [K, C/g, C]
            check(pos[2] == pos[1] * hub.pos_conv_groups,
                  f"positional conv weight {list(pos)} does not fit {K.SEM_NUM_CONV_POS_GROUPS} = {hub.pos_conv_groups}")
            check(pos[2] % hub.n_head == 0, f"HuBERT width {pos[2]} does not split into {hub.n_head} heads")
            check(f"semantic_model.encoder.layers.{hub.n_layer - 1}.layer_norm.weight" in shapes,
                  f"{K.SEM_NUM_LAYERS} = {hub.n_layer} but the HuBERT layers are not all stored")
            check(len(hub.conv_stride) == int(need(K.SEM_NUM_FEAT_LAYERS)),
                  f"{K.SEM_CONV_STRIDE} has {len(hub.conv_stride)} entries, {K.SEM_NUM_FEAT_LAYERS} says "
                  f"{need(K.SEM_NUM_FEAT_LAYERS)}")
        sem = SemanticConfig(strides=ints(K.SENC_STRIDES), block_dilations=ints(K.SENC_BLOCK_DILATIONS))
        return cls(sample_rate=int(need(K.SAMPLE_RATE)), semantic_sample_rate=int(need(K.SEMANTIC_SAMPLE_RATE)),
                   hop_length=hop, semantic_downsample_factor=int(need(K.SEMANTIC_DOWNSAMPLE_FACTOR)),
                   upsampling_ratios=up, downsampling_ratios=down, n_quantizers=n_q, codebook_size=codebook_size,
                   acoustic_input_pad=int(need(K.AC_INPUT_PAD)), semantic_input_pad=int(need(K.SEM_INPUT_PAD)),
                   snake_eps=float(need(K.AC_SNAKE_EPS)), decoder_tanh=tanh, hubert=hub, semantic=sem)


# ------------------------------------------------------------------------------------------------ weights

_DECODE_PREFIXES = ("acoustic_decoder.", "fc2.")
_ENCODE_PREFIXES = ("acoustic_encoder.", "encoder_semantic.", "semantic_model.", "fc.")


def weight_selection(names: Iterable[str], cfg: CodecConfig, parts: Sequence[str] = PARTS
                     ) -> tuple[Callable[[str], bool], dict[str, Callable]]:
    """What to upload for `parts` ("encode", "decode"): a name filter for the GGUF tensors and the derived ones
    (Snake's 1 / (alpha + eps) and the RVQ codebook norms and tie ranks)."""
    names = list(names)
    bad = set(parts) - set(PARTS)
    if bad or not parts:
        raise ValueError(f"codec parts must be a non-empty subset of {PARTS}, got {list(parts)}")
    prefixes = tuple(p for part in parts for p in (_DECODE_PREFIXES if part == "decode" else _ENCODE_PREFIXES))
    rvq_kinds = (".codebook.embed", ".project_out.weight", ".project_out.bias")
    if "encode" in parts:
        rvq_kinds += (".project_in.weight", ".project_in.bias")

    used_rvq = tuple(rvq.prefix(k) for k in range(cfg.n_quantizers))

    def keep(name: str) -> bool:
        if name.startswith("quantizer.quantizers."):
            return name.startswith(used_rvq) and name.endswith(rvq_kinds)
        return name.startswith(prefixes) and name != "semantic_model.masked_spec_embed"

    snake_prefixes = tuple(p for part, p in (("encode", "acoustic_encoder."), ("decode", "acoustic_decoder."))
                           if part in parts)
    derived = dac.derived_tensors(names, snake_prefixes, cfg.snake_eps)
    if "encode" in parts:
        derived.update(rvq.derived_tensors(cfg.n_quantizers))
    return keep, derived


# ------------------------------------------------------------------------------------------------ graphs

def _transpose(ctx, x):
    return lib.ggml_cont(ctx, lib.ggml_transpose(ctx, x))


def build_decode(ctx, w, cfg: CodecConfig, codes):
    """codes int32 [T, n_q] (numpy [n_q, T]) -> audio [T * hop, 1]."""
    latent = rvq.decode(ctx, w, codes, cfg.n_quantizers)                           # [1024, T]
    x = nn.linear(ctx, latent, w["fc2.weight"], w["fc2.bias"])                    # [256, T]
    audio = dac.decode(ctx, w, _transpose(ctx, x), cfg.upsampling_ratios)         # [T * hop, 1]
    return lib.ggml_tanh(ctx, audio) if cfg.decoder_tanh else audio


def build_encode(ctx, w, cfg: CodecConfig, audio, audio16, pad_acoustic: bool) -> dict:
    """audio [N] at 24 kHz and its 16 kHz resampling [M] -> {"codes": [n_q x int32 [T]], intermediates}."""
    p16 = cfg.semantic_input_pad
    x16 = lib.ggml_pad_ext(ctx, audio16, p16, p16, 0, 0, 0, 0, 0, 0)              # [M + 320]
    feats = hubert.mean_hidden_state(ctx, w, cfg.hubert, x16)                     # [768, T_h]
    f = cfg.semantic_downsample_factor
    n_sem = -(-feats.ne[1] // f)
    feats = lib.ggml_view_2d(ctx, feats, feats.ne[0], n_sem, f * feats.nb[1], 0)  # [768, T] every f-th frame
    e_semantic = semantic.encode(ctx, w, cfg.semantic, _transpose(ctx, feats))    # [T, 768]
    if pad_acoustic:
        pad = cfg.acoustic_input_pad
        audio = lib.ggml_pad_ext(ctx, audio, pad, pad, 0, 0, 0, 0, 0, 0)          # [N + 960]
    e_acoustic = dac.encode(ctx, w, audio, cfg.downsampling_ratios)               # [T, 256]
    x = lib.ggml_concat(ctx, e_acoustic, e_semantic, 1)                           # [T, 1024]
    latent = nn.linear(ctx, _transpose(ctx, x), w["fc.weight"], w["fc.bias"])     # [1024, T]
    return {"codes": rvq.encode(ctx, w, latent, cfg.n_quantizers), "semantic_features": feats,
            "e_semantic": e_semantic, "e_acoustic": e_acoustic, "latent": latent}


def encode_plan(w, cfg: CodecConfig, n_samples: int, n_samples16: int) -> tuple[int, bool]:
    """(frames, pad_acoustic) for encoding n_samples at 24 kHz whose 16 kHz resampling has n_samples16.

    HuBERT sees the 16 kHz audio padded by 160 each side and every semantic_downsample_factor-th frame is kept;
    the acoustic input is padded by 480 (hop / 2) each side only when the DAC encoder would otherwise give a different
    frame count (transformers' rule). Raises ValueError for a clip too short to encode, or a length whose two
    streams disagree (the reference's torch.cat would fail on it too).
    """
    kernels = [w[f"semantic_model.feature_extractor.conv_layers.{i}.conv.weight"].ne[0]
               for i in range(len(cfg.hubert.conv_stride))]
    t_hubert = hubert.output_length(n_samples16 + 2 * cfg.semantic_input_pad, kernels, cfg.hubert.conv_stride)
    n_frames = -(-t_hubert // cfg.semantic_downsample_factor) if t_hubert > 0 else 0
    if n_frames < 1:
        raise ValueError(f"audio of {n_samples} samples is too short to encode (HuBERT makes no frame of it)")
    layers = dac.encoder_conv_layers([w["acoustic_encoder.conv1.weight"].ne[0],
                                      w["acoustic_encoder.block.0.res_unit1.conv1.weight"].ne[0],
                                      w["acoustic_encoder.conv2.weight"].ne[0]], cfg.downsampling_ratios)
    if dac.conv_output_length(n_samples, layers) == n_frames:
        return n_frames, False
    padded = dac.conv_output_length(n_samples + 2 * cfg.acoustic_input_pad, layers)
    if padded != n_frames:
        raise ValueError(f"audio of {n_samples} samples gives {n_frames} semantic frames but {padded} acoustic "
                         "frames (the reference cannot encode this length either)")
    return n_frames, True
