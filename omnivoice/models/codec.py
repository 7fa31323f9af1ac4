"""The Higgs Audio v2 codec assembled: its config, the weights it uses and the encode / decode graphs.

Decode (the TTS output path), per sequence:
    codes int32 [8, T] -> RVQ decode [1024, T] -> fc2 [256, T] -> DAC decoder -> audio [960 T]
Encode (the voice-cloning reference path), audio at 24 kHz, [N] samples:
    semantic  resample to 16 kHz (numpy, torchaudio's filter) -> pad 160 each side -> HuBERT mean hidden state
              [768, T_h] -> every 2nd frame [768, T] -> SemanticEncoder [T, 768]
    acoustic  (pad 480 each side only when the encoder's output length would not equal T) -> DAC encoder [T, 256]
    concat [T, 1024] -> fc [1024, T] -> RVQ encode -> codes int32 [8, T]
as transformers' HiggsAudioV2TokenizerModel.encode / decode do (float32 throughout).

This module holds the config, the weight record and the graph builders; omnivoice.loaders.codec fills them from
the GGUF and omnivoice.runners.codec.AudioCodec runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import nn
from ..ggml import lib, named
from . import dac, hubert, rvq, semantic
from .common import Linear
from .hubert import HubertConfig
from .semantic import SemanticConfig

PARTS = ("encode", "decode")


# ------------------------------------------------------------------------------------------------ config

@dataclass(frozen=True)
class CodecConfig:
    """Hyper-parameters of the codec (read and checked against the tensors by omnivoice.loaders.codec)."""

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
    hubert: HubertConfig | None = None    # None: the file holds no HuBERT, it can only decode
    semantic: SemanticConfig = field(default_factory=SemanticConfig)

    @property
    def frame_rate(self) -> float:
        """Code frames per second (25.0)."""
        return self.sample_rate / self.hop_length


# ------------------------------------------------------------------------------------------------ weights

@dataclass(frozen=True)
class CodecWeights:
    """The codec's weights for the parts loaded (the others None), ggml shapes: H the latent width (1024),
    A the acoustic width (256)."""

    quantizers: tuple[rvq.Codebook, ...]     # the n_quantizers used
    fc2: Linear | None = None                # [H, A] + [A]                  decode
    decoder: dac.DacDecoder | None = None    #                                decode
    hubert: hubert.HubertWeights | None = None                              # encode
    semantic: semantic.SemanticWeights | None = None                        # encode
    encoder: dac.DacEncoder | None = None    #                                encode
    fc: Linear | None = None                 # [H, H] + [H]                  encode

    @property
    def can_decode(self) -> bool:
        return self.decoder is not None

    @property
    def can_encode(self) -> bool:
        return self.encoder is not None


# ------------------------------------------------------------------------------------------------ graphs

def build_decode(ctx, w: CodecWeights, cfg: CodecConfig, codes, mask=None):
    """codes int32 [T, n_q] (numpy [n_q, T]) -> audio [T * hop, 1]. `mask` F32 [1, 1, T]: several sequences
    packed with gaps between them (dac.masked)."""
    latent = rvq.decode(ctx, w.quantizers, codes)                                 # [1024, T]
    x = named(nn.linear(ctx, latent, w.fc2.weight, w.fc2.bias), "fc2_out")       # [256, T]
    audio = dac.decode(ctx, w.decoder, x, cfg.upsampling_ratios, mask)           # [1, T * hop]
    audio = lib.ggml_reshape_2d(ctx, audio, audio.ne[1], 1)                       # [T * hop, 1]
    return lib.ggml_tanh(ctx, audio) if cfg.decoder_tanh else audio


def build_encode(ctx, w: CodecWeights, cfg: CodecConfig, audio, audio16, pad_acoustic: bool,
                 contiguous_qk: bool = False, cpu: bool = False) -> dict:
    """audio [N] at 24 kHz and its 16 kHz resampling [M] -> {"codes": [n_q x int32 [T]], intermediates
    (semantic_features [768, T], e_semantic and e_acoustic [T, C], latent [1024, T])}. `contiguous_qk`: HuBERT's
    attention products on contiguous operands (Runtime.products_need_contiguous, nn.attention); `cpu`: the graph
    runs on the CPU backend (HuBERT's GELUs as nn.gelu's one-node kernel)."""
    p16 = cfg.semantic_input_pad
    x16 = lib.ggml_pad_ext(ctx, audio16, p16, p16, 0, 0, 0, 0, 0, 0)              # [M + 320]
    feats = hubert.mean_hidden_state(ctx, w.hubert, cfg.hubert, x16, contiguous_qk, cpu)  # [768, T_h]
    f = cfg.semantic_downsample_factor
    n_sem = -(-feats.ne[1] // f)
    feats = lib.ggml_view_2d(ctx, feats, feats.ne[0], n_sem, f * feats.nb[1], 0)  # [768, T] every f-th frame
    e_semantic = semantic.encode(ctx, w.semantic, cfg.semantic, nn.transpose(ctx, feats))  # [T, 768]
    if pad_acoustic:
        pad = cfg.acoustic_input_pad
        audio = lib.ggml_pad_ext(ctx, audio, pad, pad, 0, 0, 0, 0, 0, 0)          # [N + 960]
    audio = lib.ggml_reshape_2d(ctx, audio, 1, audio.ne[0])                       # [1, N]
    e_acoustic = dac.encode(ctx, w.encoder, audio, cfg.downsampling_ratios)       # [256, T]
    x = lib.ggml_concat(ctx, e_acoustic, nn.transpose(ctx, e_semantic), 0)        # [1024, T]
    latent = named(nn.linear(ctx, x, w.fc.weight, w.fc.bias), "fc_out")           # [1024, T]
    return {"codes": rvq.encode(ctx, w.quantizers, latent), "semantic_features": feats,
            "e_semantic": e_semantic, "e_acoustic": nn.transpose(ctx, e_acoustic), "latent": latent}


def encode_plan(w: CodecWeights, cfg: CodecConfig, n_samples: int, n_samples16: int) -> tuple[int, bool]:
    """(frames, pad_acoustic) for encoding n_samples at 24 kHz whose 16 kHz resampling has n_samples16.

    HuBERT sees the 16 kHz audio padded by 160 each side and every semantic_downsample_factor-th frame is kept;
    the acoustic input is padded by 480 (hop / 2) each side only when the DAC encoder would otherwise give a different
    frame count (transformers' rule). Raises ValueError for a clip too short to encode, or a length whose two
    streams disagree (the reference's torch.cat would fail on it too).
    """
    kernels = [fc.kernel for fc in w.hubert.feature_convs]
    t_hubert = hubert.output_length(n_samples16 + 2 * cfg.semantic_input_pad, kernels, cfg.hubert.conv_stride)
    n_frames = -(-t_hubert // cfg.semantic_downsample_factor) if t_hubert > 0 else 0
    if n_frames < 1:
        raise ValueError(f"audio of {n_samples} samples is too short to encode (HuBERT makes no frame of it)")
    enc = w.encoder
    layers = dac.encoder_conv_layers([enc.conv1.weight.ne[1], enc.blocks[0].res_units[0].conv1.weight.ne[1],
                                      enc.conv2.weight.ne[1]], cfg.downsampling_ratios)   # [IC, K, OC]
    if dac.conv_output_length(n_samples, layers) == n_frames:
        return n_frames, False
    padded = dac.conv_output_length(n_samples + 2 * cfg.acoustic_input_pad, layers)
    if padded != n_frames:
        raise ValueError(f"audio of {n_samples} samples gives {n_frames} semantic frames but {padded} acoustic "
                         "frames (the reference cannot encode this length either)")
    return n_frames, True
