"""omnivoice.cpp's GGUF files read as ours: the metadata their converter does not write, from one table.

omnivoice.cpp (GitHub ServeurpersoCom/omnivoice.cpp, MIT) writes the same two architectures with the same tensor
names (see ../shared/spec/INTEROP.md), but fewer keys: its C++ has the rest built in. A file of theirs is told
apart from ours by the keys our converter always writes (``omnivoice.codebook_layer_offsets`` and
``tokenizer.ggml.token_type`` in the LM file, ``omnivoice.conv_transpose_layout`` in the codec file).
`complete` returns such a file's metadata as our converter would have written it; each absent key takes the
value below, where possible read off the tensor shapes (ggml ne: a Conv1d weight is (K, IC, OC), a
ConvTranspose1d weight as they store it (K, OC, IC)), otherwise the value OmniVoice's architecture fixes
(the single public checkpoint's config, which their C++ hard-codes too). Keys they do write are converted to
our types (INT32 arrays, the file type as a string). A key of theirs that is missing stays missing, and the
loader's "metadata key ... is missing" error names it.

LM file (``omnivoice-lm``)::

    general.file_type                    their string ("Q4_K_M") as llama.cpp's number (15); absent: 0 (F32)
    general.alignment                    32, GGUF's default (they never set it)
    omnivoice.audio_codebook_weights     theirs, INT32 -> float
    omnivoice.codebook_layer_offsets     k * audio_vocab_size (their C++ recomputes them so)
    tokenizer.ggml.pre                   "qwen2" (Qwen3's tokenizer)
    tokenizer.ggml.token_type            as their C++ tokenizes: <|endoftext|> and the seven omnivoice.special.*
                                         tokens are control tokens (cut out verbatim), "" (ids with no token)
                                         unused, every other token normal, so Qwen's other added tokens
                                         (<|im_start|>, ...) are BPE-encoded like text, as theirs does
    tokenizer.ggml.eos_token_id          <|endoftext|> (their C++'s end of text), also the padding token
    tokenizer.ggml.padding_token_id
    tokenizer.ggml.add_bos_token         false
    omnivoice.tokenizer.pretokenize_regex  Qwen2's split regex
    omnivoice.tokenizer.normalizer       "NFC"

Codec file (``omnivoice-tokenizer``)::

    general.file_type, general.alignment as above
    omnivoice.hop_length                 omnivoice.acoustic.hop_length
    omnivoice.frame_rate                 ceil(sample_rate / hop)
    omnivoice.semantic_downsample_factor hop / (sample_rate / semantic_sample_rate) / downsample_factor
    omnivoice.hidden_size                acoustic.hidden_size + semantic.hidden_size
    omnivoice.n_codebooks                8 (OmniVoice's codebooks; the file must store at least 8 quantizers)
    omnivoice.conv_transpose_layout      "ic_oc_k": ConvTranspose1d weights as torch stores them, permuted at load
    acoustic.input_pad                   hop / 2
    acoustic.kernel_size                 ne0 of acoustic_encoder.conv1.weight (7)
    acoustic.encoder_out_kernel          ne0 of acoustic_encoder.conv2.weight (3)
    acoustic.res_kernel                  ne0 of acoustic_encoder.block.0.res_unit1.conv1.weight (7)
    acoustic.res_dilations               [1, 3, 9] (DAC's residual units)
    acoustic.encoder_channels / kernels  OC / ne0 of each acoustic_encoder.block.N.conv1.weight
    acoustic.decoder_channels / kernels  OC / ne0 of each acoustic_decoder.block.N.conv_t1.weight
    acoustic.{en,de}coder_paddings       ceil(stride / 2) of the ratios; decoder_output_paddings stride % 2
    acoustic.snake_eps                   1e-9; acoustic.decoder_tanh false (OmniVoice's DAC has no output tanh)
    semantic.conv_bias                   whether ...conv_layers.0.conv.bias is stored
    semantic.feat_extract_norm           "layer" if every feature conv has a layer_norm, "group" if only the first
    semantic.feat_proj_layer_norm        whether feature_projection.layer_norm.weight is stored
    semantic.do_stable_layer_norm        false; semantic.hidden_act, feat_extract_activation "gelu" (HuBERT base)
    semantic.pos_conv_trim               1 when num_conv_pos_embeddings is even
    semantic.group_norm_eps              1e-5 (torch's GroupNorm default); semantic.input_pad 160
    semantic_encoder.kernel_size         ne0 of encoder_semantic.conv.weight
    semantic_encoder.unit_kernel_size    ne0 of encoder_semantic.conv_blocks.0.res_units.0.conv1.weight
    semantic_encoder.strides             per block: 1 for a 3-tap block conv, else its kernel / 2
    semantic_encoder.channels, channel_ratios   per block: the block conv's OC, and OC / semantic.hidden_size
    semantic_encoder.block_dilations     1 per stored residual unit (the checkpoint's [1, 1])
    (omnivoice.source_sha256, the hash of what our converter read, stays absent: nothing reads it at load)
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import replace
from typing import Any, Callable, Mapping

import gguf
import numpy as np

from . import keys as K
from .layouts import CONV_TRANSPOSE_LAYOUT as CONV_TRANSPOSE_OURS, conv_transpose_weight
from .reader import GGUFFile, TensorInfo

LAYOUT_OURS = "omnivoice"
LAYOUT_CPP = "omnivoice.cpp"
CONV_TRANSPOSE_RAW = "ic_oc_k"   # conv_transpose_layout of torch's own [IC, OC, K] (ggml ne (K, OC, IC))

GGUF_DEFAULT_ALIGNMENT = 32
N_CODEBOOKS = 8
RES_DILATIONS = [1, 3, 9]
SNAKE_EPS = 1e-9
GROUP_NORM_EPS = 1e-5
SEMANTIC_INPUT_PAD = 160
ENDOFTEXT = "<|endoftext|>"
# llama.cpp's LlamaFileType numbers of the type names their quantizer writes in general.file_type
FILE_TYPES = {"F32": 0, "F16": 1, "Q8_0": 7, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14,
              "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "BF16": 32}

Shapes = Mapping[str, tuple]


class CompatError(ValueError):
    """A file in omnivoice.cpp's layout whose tensors do not give what our loaders need (names file and tensor)."""


def layout(meta: Mapping[str, Any]) -> str:
    """Which converter's layout a model file has: LAYOUT_OURS or LAYOUT_CPP (by the keys only ours writes)."""
    arch = meta.get(K.GENERAL_ARCHITECTURE)
    if arch == K.ARCH_LM and K.CODEBOOK_LAYER_OFFSETS not in meta and K.TOKENIZER_TOKEN_TYPE not in meta:
        return LAYOUT_CPP
    if arch == K.ARCH_CODEC and K.CONV_TRANSPOSE_LAYOUT not in meta:
        return LAYOUT_CPP
    return LAYOUT_OURS


def complete(meta: Mapping[str, Any], shapes: Shapes, source: str = "GGUF",
             only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The metadata of a model file as our converter writes it: a file of ours unchanged, one of omnivoice.cpp's
    with the keys of the module's table added and its own keys in our types. `shapes` maps tensor names to ggml
    ne; `source` names the file in errors; `only` limits the work to those keys (for a reader of a few keys,
    such as the text tokenizer)."""
    out = dict(meta)
    if layout(meta) == LAYOUT_OURS:
        return out
    lm = meta.get(K.GENERAL_ARCHITECTURE) == K.ARCH_LM
    table, schema = (_LM, K.LM_KEY_TYPES) if lm else (_CODEC, K.CODEC_KEY_TYPES)
    theirs, tensors = _Keys(meta, source), _Tensors(shapes, source)
    out[K.GENERAL_FILE_TYPE] = _file_type(meta.get(K.GENERAL_FILE_TYPE), source)
    out.setdefault(K.GENERAL_ALIGNMENT, GGUF_DEFAULT_ALIGNMENT)
    for key, rule in table.items():
        if only is not None and key not in only:
            continue
        if key not in meta or key in _RETYPED:
            value = rule(theirs, tensors)
            if value is not None:
                out[key] = _typed(value, schema[key])
    return out


def _typed(value: Any, vtype: str) -> Any:
    """A value as reading it back from a file of ours gives it: f32 values rounded to float32."""
    if vtype == "f32":
        return struct.unpack("<f", struct.pack("<f", value))[0]
    if vtype == "[f32]":
        return [_typed(v, "f32") for v in value]
    return value


def adapt(f: GGUFFile) -> GGUFFile:
    """A model file as our loaders read it; a file of ours comes back as it is, but for the codec's types.

    * omnivoice.cpp's layout: the metadata `complete`d; shapes given back the trailing dimensions of 1 that
      their quantizer (through ggml's gguf writer) drops, for the codec's convolution weights and Snake alphas
      ((1, C) is (1, C, 1)); their raw ConvTranspose1d weights, ne (K, OC, IC), recognised by their rank and
      permuted into ours, ne (IC, K * OC) (k fastest; see omnivoice.nn.conv.conv_transpose1d).
    * Any codec file (theirs or one requantized by python -m omnivoice.quantize): tensors in other types than
      F32 expanded to F32 (gguf-py's dequantization, bit-equal to ggml's), since the codec's graphs compute in
      F32 (their quantizer stores the convolution kernels F16 and HuBERT's matrices quantized).

    Rewritten tensors live in memory (their data is not a view of the file), so a loader copies them.
    """
    arch = f.metadata.get(K.GENERAL_ARCHITECTURE)
    theirs = layout(f.metadata) == LAYOUT_CPP
    tensors = list(f.tensors)
    if arch == K.ARCH_CODEC and theirs:
        tensors = [_restore_rank(t) for t in tensors]
    meta = complete(f.metadata, {t.name: t.shape for t in tensors}, f.path)
    if arch == K.ARCH_CODEC:
        shapes = {t.name: t.shape for t in tensors}
        tensors = [_codec_tensor(t, shapes, f.path) for t in tensors]
        if meta.get(K.CONV_TRANSPOSE_LAYOUT) == CONV_TRANSPOSE_RAW:
            meta[K.CONV_TRANSPOSE_LAYOUT] = CONV_TRANSPOSE_OURS
    if meta == f.metadata and all(a is b for a, b in zip(tensors, f.tensors)):
        return f
    schema = K.LM_KEY_TYPES if arch == K.ARCH_LM else K.CODEC_KEY_TYPES
    types = {k: schema.get(k) or f.types.get(k, "?") for k in meta}  # completed values are in our types
    return GGUFFile(f.path, meta, tensors, f.mmap, f.data, types)


# the weight types a codec file may hold: F32, and those expanded to it at load
_EXPANDED = {gguf.GGMLQuantizationType[n] for n in ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                                                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")}
_RANK3 = re.compile(r"(\.alpha|conv\w*\.weight)$")  # Conv1d / ConvTranspose1d weights and Snake alphas


def _restore_rank(t: TensorInfo) -> TensorInfo:
    if len(t.shape) >= 3 or not _RANK3.search(t.name):
        return t
    return replace(t, shape=tuple(t.shape) + (1,) * (3 - len(t.shape)))


def _codec_tensor(t: TensorInfo, shapes: Shapes, source: str) -> TensorInfo:
    raw_conv_t = t.name.endswith(".conv_t1.weight") and len(t.shape) == 3
    if t.tensor_type not in _EXPANDED or (t.tensor_type == gguf.GGMLQuantizationType.F32 and not raw_conv_t):
        return t  # F32 as it is; a type that holds no weights (I32, ...) is the loader's to refuse
    values = _as_f32(t, source)                                                     # torch order
    if raw_conv_t:
        k, oc, ic = (int(x) for x in t.shape)
        bias = shapes.get(t.name[:-len("weight")] + "bias")
        if bias is None or tuple(int(x) for x in bias) != (oc,):
            raise CompatError(f"{source}: tensor {t.name!r} has shape {list(t.shape)}, which does not fit its bias "
                              f"{list(bias) if bias is not None else None} as torch's ConvTranspose1d [IC, OC, K] "
                              f"(ggml ne (K, OC, IC))")
        values = conv_transpose_weight(values)                                       # ne (IC, K * OC)
    return replace(t, shape=tuple(reversed(values.shape)), tensor_type=int(gguf.GGMLQuantizationType.F32),
                   data=np.ascontiguousarray(values, np.float32).reshape(-1).view(np.uint8))


def _as_f32(t: TensorInfo, source: str) -> np.ndarray:
    shape = tuple(reversed([int(x) for x in t.shape]))
    try:
        qtype = gguf.GGMLQuantizationType(int(t.tensor_type))
        values = gguf.quants.dequantize(np.asarray(t.data), qtype)
    except (ValueError, NotImplementedError) as e:
        raise CompatError(f"{source}: tensor {t.name!r} of ggml type {t.tensor_type} cannot be read as F32 ({e})") \
            from None
    return np.asarray(values, np.float32).reshape(shape)


class _Keys:
    """Their metadata, read-only; a missing key is a CompatError naming it."""

    def __init__(self, meta: Mapping[str, Any], source: str) -> None:
        self.meta, self.source = meta, source

    def __getitem__(self, key: str) -> Any:
        if key not in self.meta:
            raise CompatError(f"{self.source}: metadata key {key!r} is missing (omnivoice.cpp's converter writes it; "
                              "a damaged file?)")
        return self.meta[key]

    def __contains__(self, key: str) -> bool:
        return key in self.meta


def _file_type(value: Any, source: str) -> int:
    if value is None:
        return 0  # convert.py writes no file type, and only F32 files
    if isinstance(value, int):
        return value
    try:
        return FILE_TYPES[str(value).upper()]
    except KeyError:
        raise CompatError(f"{source}: general.file_type {value!r} is not a type omnivoice.cpp's quantizer "
                          f"writes ({', '.join(FILE_TYPES)})") from None


class _Tensors:
    """ggml shapes of a file's tensors, with errors that name the file and the tensor."""

    def __init__(self, shapes: Shapes, source: str) -> None:
        self.shapes, self.source = shapes, source

    def __contains__(self, name: str) -> bool:
        return name in self.shapes

    def ne(self, name: str, rank: int | None = None) -> tuple[int, ...]:
        if name not in self.shapes:
            raise CompatError(f"{self.source}: tensor {name!r} is missing (an omnivoice.cpp file needs it to "
                              "derive the codec's configuration)")
        ne = tuple(int(x) for x in self.shapes[name])
        if rank is not None and len(ne) != rank:
            raise CompatError(f"{self.source}: tensor {name!r} has shape {list(ne)}, expected {rank} dimensions")
        return ne

    def count(self, pattern: str) -> int:
        """How many consecutive indices N (from 0) have a tensor named pattern.format(N)."""
        n = 0
        while pattern.format(n) in self.shapes:
            n += 1
        return n


# ------------------------------------------------------------------------------------------------ LM

def _token_types(meta: _Keys, t: _Tensors) -> list[int]:
    tokens = meta[K.TOKENIZER_TOKENS]
    control = {int(meta[k]) for k in K.SPECIAL_TOKENS if k in meta}
    if ENDOFTEXT in tokens:
        control.add(tokens.index(ENDOFTEXT))
    return [K.TOKEN_TYPE_CONTROL if i in control else 5 if tok == "" else K.TOKEN_TYPE_NORMAL
            for i, tok in enumerate(tokens)]


def _endoftext(meta: _Keys, t: _Tensors) -> int | None:
    tokens = meta[K.TOKENIZER_TOKENS]
    return tokens.index(ENDOFTEXT) if ENDOFTEXT in tokens else None


Rule = Callable[[_Keys, _Tensors], Any]  # the value of one key (None: leave it absent)

_LM: dict[str, Rule] = {
    K.AUDIO_CODEBOOK_WEIGHTS: lambda m, t: [float(w) for w in m[K.AUDIO_CODEBOOK_WEIGHTS]],
    K.CODEBOOK_LAYER_OFFSETS: lambda m, t: [k * int(m[K.AUDIO_VOCAB_SIZE])
                                           for k in range(int(m[K.NUM_AUDIO_CODEBOOK]))],
    K.TOKENIZER_PRE: lambda m, t: "qwen2",
    K.TOKENIZER_TOKEN_TYPE: _token_types,
    K.TOKENIZER_EOS_ID: _endoftext,
    K.TOKENIZER_PAD_ID: _endoftext,
    K.TOKENIZER_ADD_BOS: lambda m, t: False,
    K.TOKENIZER_PRETOKENIZE_REGEX: lambda m, t: K.QWEN2_PRETOKENIZE_REGEX,
    K.TOKENIZER_NORMALIZER: lambda m, t: "NFC",
}

# ------------------------------------------------------------------------------------------------ codec

_AE, _AD = "acoustic_encoder", "acoustic_decoder"
_SENC = "encoder_semantic"
_FEAT = "semantic_model.feature_extractor.conv_layers.{}"


def _ints(key: str) -> Rule:
    return lambda m, t: [int(v) for v in m[key]]


def _n_codebooks(m: _Keys, t: _Tensors) -> int:
    stored = t.count("quantizer.quantizers.{}.codebook.embed")
    if stored < N_CODEBOOKS:
        raise CompatError(f"{t.source}: {stored} RVQ quantizers are stored; OmniVoice's codec uses {N_CODEBOOKS}")
    return N_CODEBOOKS


def _feat_norm(m: _Keys, t: _Tensors) -> str:
    n = int(m[K.SEM_NUM_FEAT_LAYERS])
    normed = [f"{_FEAT.format(i)}.layer_norm.weight" in t for i in range(n)]
    if all(normed):
        return "layer"
    if normed[:1] == [True] and not any(normed[1:]):
        return "group"
    raise CompatError(f"{t.source}: the HuBERT feature convs have layer norms at {normed}; expected on the first "
                      "only (group norm) or on all (layer norm)")


def _senc_blocks(t: _Tensors) -> list[tuple[int, ...]]:
    n = t.count(_SENC + ".conv_blocks.{}.conv.weight")
    return [t.ne(f"{_SENC}.conv_blocks.{i}.conv.weight", 3) for i in range(n)]


def _senc_stride(ne: tuple[int, ...]) -> int:
    return 1 if ne[0] == 3 else ne[0] // 2   # the block conv's kernel is 3 for stride 1, else 2 * stride


_CODEC: dict[str, Rule] = {
    K.HOP_LENGTH: lambda m, t: int(m[K.AC_HOP_LENGTH]),
    K.FRAME_RATE: lambda m, t: math.ceil(int(m[K.SAMPLE_RATE]) / int(m[K.AC_HOP_LENGTH])),
    K.SEMANTIC_DOWNSAMPLE_FACTOR: lambda m, t: int(int(m[K.AC_HOP_LENGTH]) / (int(m[K.SAMPLE_RATE])
                                                   / int(m[K.SEMANTIC_SAMPLE_RATE])) / int(m[K.DOWNSAMPLE_FACTOR])),
    K.HIDDEN_SIZE: lambda m, t: int(m[K.AC_HIDDEN_SIZE]) + int(m[K.SEM_HIDDEN_SIZE]),
    K.N_CODEBOOKS: _n_codebooks,
    K.CONV_TRANSPOSE_LAYOUT: lambda m, t: CONV_TRANSPOSE_RAW,
    K.AC_UPSAMPLING_RATIOS: _ints(K.AC_UPSAMPLING_RATIOS),
    K.AC_DOWNSAMPLING_RATIOS: _ints(K.AC_DOWNSAMPLING_RATIOS),
    K.AC_INPUT_PAD: lambda m, t: int(m[K.AC_HOP_LENGTH]) // 2,
    K.AC_KERNEL_SIZE: lambda m, t: t.ne(f"{_AE}.conv1.weight", 3)[0],
    K.AC_ENCODER_OUT_KERNEL: lambda m, t: t.ne(f"{_AE}.conv2.weight", 3)[0],
    K.AC_RES_KERNEL: lambda m, t: t.ne(f"{_AE}.block.0.res_unit1.conv1.weight", 3)[0],
    K.AC_RES_DILATIONS: lambda m, t: list(RES_DILATIONS),
    K.AC_ENCODER_CHANNELS: lambda m, t: [t.ne(f"{_AE}.block.{i}.conv1.weight", 3)[2]
                                         for i in range(len(m[K.AC_DOWNSAMPLING_RATIOS]))],
    K.AC_ENCODER_KERNELS: lambda m, t: [t.ne(f"{_AE}.block.{i}.conv1.weight", 3)[0]
                                        for i in range(len(m[K.AC_DOWNSAMPLING_RATIOS]))],
    K.AC_ENCODER_PADDINGS: lambda m, t: [math.ceil(int(s) / 2) for s in m[K.AC_DOWNSAMPLING_RATIOS]],
    K.AC_DECODER_CHANNELS: lambda m, t: [t.ne(f"{_AD}.block.{i}.conv_t1.weight", 3)[1]
                                         for i in range(len(m[K.AC_UPSAMPLING_RATIOS]))],
    K.AC_DECODER_KERNELS: lambda m, t: [t.ne(f"{_AD}.block.{i}.conv_t1.weight", 3)[0]
                                        for i in range(len(m[K.AC_UPSAMPLING_RATIOS]))],
    K.AC_DECODER_PADDINGS: lambda m, t: [math.ceil(int(s) / 2) for s in m[K.AC_UPSAMPLING_RATIOS]],
    K.AC_DECODER_OUTPUT_PADDINGS: lambda m, t: [int(s) % 2 for s in m[K.AC_UPSAMPLING_RATIOS]],
    K.AC_SNAKE_EPS: lambda m, t: SNAKE_EPS,
    K.AC_DECODER_TANH: lambda m, t: False,
    K.SEM_CONV_DIM: _ints(K.SEM_CONV_DIM),
    K.SEM_CONV_KERNEL: _ints(K.SEM_CONV_KERNEL),
    K.SEM_CONV_STRIDE: _ints(K.SEM_CONV_STRIDE),
    K.SEM_CONV_BIAS: lambda m, t: f"{_FEAT.format(0)}.conv.bias" in t,
    K.SEM_FEAT_EXTRACT_NORM: _feat_norm,
    K.SEM_DO_STABLE_LAYER_NORM: lambda m, t: False,
    K.SEM_FEAT_PROJ_LAYER_NORM: lambda m, t: "semantic_model.feature_projection.layer_norm.weight" in t,
    K.SEM_POS_CONV_TRIM: lambda m, t: 1 if int(m[K.SEM_NUM_CONV_POS]) % 2 == 0 else 0,
    K.SEM_GROUP_NORM_EPS: lambda m, t: GROUP_NORM_EPS,
    K.SEM_HIDDEN_ACT: lambda m, t: "gelu",
    K.SEM_FEAT_EXTRACT_ACT: lambda m, t: "gelu",
    K.SEM_INPUT_PAD: lambda m, t: SEMANTIC_INPUT_PAD,
    K.SENC_KERNEL_SIZE: lambda m, t: t.ne(f"{_SENC}.conv.weight", 3)[0],
    K.SENC_UNIT_KERNEL_SIZE: lambda m, t: t.ne(f"{_SENC}.conv_blocks.0.res_units.0.conv1.weight", 3)[0],
    K.SENC_STRIDES: lambda m, t: [_senc_stride(ne) for ne in _senc_blocks(t)],
    K.SENC_CHANNEL_RATIOS: lambda m, t: [ne[2] / int(m[K.SEM_HIDDEN_SIZE]) for ne in _senc_blocks(t)],
    K.SENC_BLOCK_DILATIONS: lambda m, t: [1] * t.count(_SENC + ".conv_blocks.0.res_units.{}.conv1.weight"),
    K.SENC_CHANNELS: lambda m, t: [ne[2] for ne in _senc_blocks(t)],
}

# their keys whose values we re-type (INT32 arrays -> our UINT32 lists, INT32 weights -> floats)
_RETYPED = {K.AUDIO_CODEBOOK_WEIGHTS, K.AC_UPSAMPLING_RATIOS, K.AC_DOWNSAMPLING_RATIOS, K.SEM_CONV_DIM,
            K.SEM_CONV_KERNEL, K.SEM_CONV_STRIDE}
