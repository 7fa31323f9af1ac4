"""The codec's GGUF (``omnivoice-tokenizer-F32.gguf``) -> CodecConfig and CodecWeights on a runtime.

`read_config` reads and cross-checks the hyper-parameters the graphs use; `load_weights` reads the sizes the
tensors must have (widths, kernels, codebook sizes), checks every tensor of the parts asked for against them
(each F32, as the converter stores the codec), and fills the records. Load-time tensors: each Snake's
1 / (alpha + eps) and, for encoding, each codebook's squared norms and tie ranks.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import nn
from ..ggml import Runtime, WeightStore, types
from ..gguf import GGUFFile, keys as K, names as N
from ..gguf.layouts import CONV_TRANSPOSE_LAYOUT
from ..models import dac, hubert, rvq, semantic
from ..models.codec import PARTS, CodecConfig, CodecWeights
from ..models.common import Conv, Linear, Norm
from ..models.hubert import HubertConfig
from ..models.semantic import SemanticConfig
from .tensors import Metadata, TensorLoader, check

ARCH = K.ARCH_CODEC
F32 = (types.F32,)  # the codec is stored in F32 throughout (its file name says so)


def read_config(f: GGUFFile) -> CodecConfig:
    """The hyper-parameters of a codec file, each of the right kind and consistent with each other."""
    m, src = Metadata(f.metadata, f.path), f.path
    layout = m.str(K.CONV_TRANSPOSE_LAYOUT)
    check(layout == CONV_TRANSPOSE_LAYOUT, src, f"{K.CONV_TRANSPOSE_LAYOUT} is {layout!r}; this build reads "
          f"{CONV_TRANSPOSE_LAYOUT!r}")
    up, down = m.ints(K.AC_UPSAMPLING_RATIOS), m.ints(K.AC_DOWNSAMPLING_RATIOS)
    hop = m.int(K.HOP_LENGTH)
    check(hop == math.prod(down), src, f"{K.HOP_LENGTH} = {hop} is not the product of {K.AC_DOWNSAMPLING_RATIOS} "
          f"{list(down)}")
    check(math.prod(up) == hop, src, f"{K.AC_UPSAMPLING_RATIOS} {list(up)} do not multiply to the hop {hop}")
    rate, rate16 = m.int(K.SAMPLE_RATE), m.int(K.SEMANTIC_SAMPLE_RATE)
    check(rate % hop == 0, src, f"{K.SAMPLE_RATE} = {rate} is not a whole number of {hop}-sample frames")
    hubert_hop, every = m.int(K.DOWNSAMPLE_FACTOR), m.int(K.SEMANTIC_DOWNSAMPLE_FACTOR)
    # every `every`-th HuBERT frame (hubert_hop samples at rate16) must be one code frame (hop samples at rate)
    check(hop * rate16 == every * hubert_hop * rate, src, f"{K.SEMANTIC_DOWNSAMPLE_FACTOR} = {every} HuBERT "
          f"frames of {K.DOWNSAMPLE_FACTOR} = {hubert_hop} samples at {rate16} Hz are not one frame of {hop} "
          f"samples at {rate} Hz")
    pads = m.int(K.AC_INPUT_PAD, 0), m.int(K.SEM_INPUT_PAD, 0)
    check(max(pads) < hop, src, f"{K.AC_INPUT_PAD} = {pads[0]} and {K.SEM_INPUT_PAD} = {pads[1]} must each be "
          f"below one frame ({hop})")
    hub = None
    if N.tensor(N.HUBERT_POS_CONV, N.WEIGHT) in {t.name for t in f.tensors}:
        for key, want in ((K.SEM_DO_STABLE_LAYER_NORM, False), (K.SEM_HIDDEN_ACT, "gelu"),
                          (K.SEM_FEAT_EXTRACT_ACT, "gelu")):
            got = m.bool(key) if isinstance(want, bool) else m.str(key)
            check(got == want, src, f"{key} = {got!r} is not supported (expected {want!r})")
        n_feat = m.int(K.SEM_NUM_FEAT_LAYERS)
        hub = HubertConfig(
            n_layer=m.int(K.SEM_NUM_LAYERS), n_head=m.int(K.SEM_NUM_HEADS),
            conv_stride=m.ints(K.SEM_CONV_STRIDE, n=n_feat),
            feat_extract_norm=m.str(K.SEM_FEAT_EXTRACT_NORM, ("group", "layer")),
            feat_proj_layer_norm=m.bool(K.SEM_FEAT_PROJ_LAYER_NORM), pos_conv_groups=m.int(K.SEM_NUM_CONV_POS_GROUPS),
            pos_conv_trim=m.int(K.SEM_POS_CONV_TRIM, 0), eps=m.eps(K.SEM_LAYER_NORM_EPS),
            norm_eps=m.eps(K.SEM_GROUP_NORM_EPS))
        check(math.prod(hub.conv_stride) == hubert_hop, src, f"{K.SEM_CONV_STRIDE} {list(hub.conv_stride)} do "
              f"not multiply to {K.DOWNSAMPLE_FACTOR} = {hubert_hop}")
        width = m.int(K.SEM_HIDDEN_SIZE)
        check(width % hub.n_head == 0, src, f"{K.SEM_HIDDEN_SIZE} = {width} does not split into "
              f"{K.SEM_NUM_HEADS} = {hub.n_head} heads")
        check(width % hub.pos_conv_groups == 0, src, f"{K.SEM_HIDDEN_SIZE} = {width} does not split into "
              f"{K.SEM_NUM_CONV_POS_GROUPS} = {hub.pos_conv_groups} groups")
    strides = m.ints(K.SENC_STRIDES)
    return CodecConfig(
        sample_rate=rate, semantic_sample_rate=rate16, hop_length=hop, semantic_downsample_factor=every,
        upsampling_ratios=up, downsampling_ratios=down, n_quantizers=m.int(K.N_CODEBOOKS),
        codebook_size=m.int(K.CODEBOOK_SIZE), acoustic_input_pad=pads[0], semantic_input_pad=pads[1],
        snake_eps=m.eps(K.AC_SNAKE_EPS), decoder_tanh=m.bool(K.AC_DECODER_TANH, default=False), hubert=hub,
        semantic=SemanticConfig(strides=strides, block_dilations=m.ints(K.SENC_BLOCK_DILATIONS)))


class _Builder:
    """Records of the codec's modules from a TensorLoader; every tensor F32 and of the shape given."""

    def __init__(self, t: TensorLoader, snake_eps: float, cpu: bool = False, fma_convs: bool = False) -> None:
        self.t, self.eps, self.cpu, self.fma_convs = t, np.float32(snake_eps), cpu, fma_convs

    def conv(self, module: str, ne: tuple, bias: bool = True, n_out: int | None = None, **ix) -> Conv:
        """A conv (or transposed conv, whose bias has n_out entries) with weight ne and, when `bias`, [OC]."""
        b = self.t.get(N.tensor(module, N.BIAS, **ix), (n_out or ne[-1],), F32) if bias else None
        return Conv(self.t.get(N.tensor(module, N.WEIGHT, **ix), ne, F32), b)

    def linear(self, module: str, n_in: int, n_out: int, **ix) -> Linear:
        return Linear(self.t.get(N.tensor(module, N.WEIGHT, **ix), (n_in, n_out), F32),
                      self.t.get(N.tensor(module, N.BIAS, **ix), (n_out,), F32))

    def norm(self, module: str, c: int, **ix) -> Norm:
        return Norm(self.t.get(N.tensor(module, N.WEIGHT, **ix), (c,), F32),
                    self.t.get(N.tensor(module, N.BIAS, **ix), (c,), F32))

    def cl_conv(self, module: str, ne: tuple, n_out: int | None = None, bias: bool = True, **ix) -> Conv:
        """A conv for channels-last activations (the DAC's; HuBERT's feature convs on the CPU), its weight
        rearranged (nn.conv_weight_cl; a transposed conv's [IC, K * OC], whose bias has n_out entries, by
        nn.conv_transpose_weight_cl) and added as NAME.cl; on the CPU with `fma_convs`, packed for the FMA kernel
        instead (nn.fma.PackedConv: the conv's one node reads its columns from the activation, where ggml's
        product read a column buffer that a node had written)."""
        name = N.tensor(module, N.WEIGHT, **ix)
        self.t.info(name, ne, F32)
        values = self.t.values(name, ne)
        cl = nn.conv_transpose_weight_cl(values, n_out) if n_out else nn.conv_weight_cl(values)
        weight = nn.fma.PackedConv.of(cl) if self.fma_convs else self.t.store.add_array(name + ".cl", cl)
        return Conv(weight, self.t.get(N.tensor(module, N.BIAS, **ix), (n_out or ne[-1],), F32) if bias else None)

    def snake(self, module: str, c: int, *path: str, **ix) -> dac.Snake:
        """alpha and inv_beta as [C], the shape the channels-last graph multiplies by: a reshape in the graph would
        be a node between Snake's five ops, which CUDA fuses only where they are consecutive (ggml patch 0008)."""
        alpha = N.tensor(module, *path, N.ALPHA, **ix)
        stored = self.t.info(alpha, (1, c, 1), F32)
        # in float32 as the reference computes it
        inv_beta = np.float32(1.0) / (self.t.values(alpha, (1, c, 1)).reshape(c) + self.eps)
        return dac.Snake(self.t.store.add(alpha, types.F32, (c,), stored.data),
                         self.t.store.add_array(N.tensor(module, *path, N.INV_BETA, **ix), inv_beta), self.cpu)

    def res_unit(self, module: str, c: int, k: int, **ix) -> dac.ResidualUnit:
        return dac.ResidualUnit(
            snake1=self.snake(module, c, N.RES_SNAKE1, **ix),
            conv1=self.cl_conv(f"{module}.{N.RES_CONV1}", (k, c, c), **ix),
            snake2=self.snake(module, c, N.RES_SNAKE2, **ix),
            conv2=self.cl_conv(f"{module}.{N.RES_CONV2}", (1, c, c), **ix))


def _hubert(b: _Builder, m: Metadata, cfg: HubertConfig) -> hubert.HubertWeights:
    n = len(cfg.conv_stride)
    dims, kernels = m.ints(K.SEM_CONV_DIM, n=n), m.ints(K.SEM_CONV_KERNEL, n=n)
    bias, C, I = m.bool(K.SEM_CONV_BIAS), m.int(K.SEM_HIDDEN_SIZE), m.int(K.SEM_INTERMEDIATE_SIZE)
    convs, c_in = [], 1
    for i, (c, k) in enumerate(zip(dims, kernels)):
        normed = cfg.feat_extract_norm == "layer" or i == 0
        # on the CPU's FMA kernel the "group" variant's convs after the first (whose GroupNorm, over time, is the
        # [T, C] layout's) run channels-last (hubert.feature_extractor)
        cl = b.fma_convs and cfg.feat_extract_norm == "group" and i > 0
        conv = (b.cl_conv if cl else b.conv)(N.HUBERT_FEAT_CONV, (k, c_in, c), bias=bias, i=i)
        convs.append(hubert.FeatureConv(conv=conv, norm=b.norm(N.HUBERT_FEAT_NORM, c, i=i) if normed else None))
        c_in = c
    layers = tuple(hubert.HubertLayer(
        q=b.linear(N.HUBERT_ATTN_Q, C, C, i=i), k=b.linear(N.HUBERT_ATTN_K, C, C, i=i),
        v=b.linear(N.HUBERT_ATTN_V, C, C, i=i), out=b.linear(N.HUBERT_ATTN_OUT, C, C, i=i),
        attn_norm=b.norm(N.HUBERT_ATTN_NORM, C, i=i), ffn_up=b.linear(N.HUBERT_FFN_UP, C, I, i=i),
        ffn_down=b.linear(N.HUBERT_FFN_DOWN, I, C, i=i), ffn_norm=b.norm(N.HUBERT_FFN_NORM, C, i=i))
        for i in range(cfg.n_layer))
    k_pos = m.int(K.SEM_NUM_CONV_POS)
    check(cfg.pos_conv_trim == 1 - k_pos % 2, m.source, f"{K.SEM_POS_CONV_TRIM} = {cfg.pos_conv_trim}; a kernel "
          f"of {k_pos} needs {1 - k_pos % 2} (the samples its 'same' padding adds at the end)")
    return hubert.HubertWeights(
        feature_convs=tuple(convs),
        projection_norm=b.norm(N.HUBERT_PROJ_NORM, c_in) if cfg.feat_proj_layer_norm else None,
        projection=b.linear(N.HUBERT_PROJ, c_in, C),
        pos_conv=b.conv(N.HUBERT_POS_CONV, (k_pos, C // cfg.pos_conv_groups, C)),
        encoder_norm=b.norm(N.HUBERT_ENC_NORM, C), layers=layers)


def _semantic(b: _Builder, m: Metadata, cfg: SemanticConfig) -> tuple[semantic.SemanticWeights, int]:
    """The semantic encoder's record and its output width."""
    C, k, k_unit = m.int(K.SEM_HIDDEN_SIZE), m.int(K.SENC_KERNEL_SIZE), m.int(K.SENC_UNIT_KERNEL_SIZE)
    # a residual unit pads by (k_unit - 1) // 2 * dilation, which ggml's convolutions take as a 32-bit int and
    # double: a dilation of 2^31 - 1 aborted inside ggml (tools/fuzz.py, seed 29); a dilation that large only
    # ever reads the padding's zeros
    for j, d in enumerate(cfg.block_dilations):
        check((k_unit - 1) // 2 * d < 2**30, m.source, f"{K.SENC_BLOCK_DILATIONS}[{j}] = {d}: with "
              f"{K.SENC_UNIT_KERNEL_SIZE} = {k_unit} the padding is {(k_unit - 1) // 2 * d} samples, beyond what "
              "ggml's convolutions take (below 2^30)")
    blocks, c_in = [], C
    for i, (stride, c_out) in enumerate(zip(cfg.strides, m.ints(K.SENC_CHANNELS, n=len(cfg.strides)))):
        units = tuple(semantic.ResidualUnit(
            conv1=b.conv(N.SEMANTIC_RES_CONV1, (k_unit, c_in, c_in), bias=False, i=i, j=j),
            conv2=b.conv(N.SEMANTIC_RES_CONV2, (1, c_in, c_in), bias=False, i=i, j=j))
            for j in range(len(cfg.block_dilations)))
        k_block = 3 if stride == 1 else 2 * stride
        blocks.append(semantic.Block(units, b.conv(N.SEMANTIC_BLOCK_CONV, (k_block, c_in, c_out), i=i)))
        c_in = c_out
    return semantic.SemanticWeights(b.conv(N.SEMANTIC_CONV, (k, C, C), bias=False), tuple(blocks)), c_in


def _check_channels(m: Metadata, key: str, want: list[int]) -> None:
    """A block-width list (omnivoice.cpp reads it; the graphs take the widths from the hidden size and the
    tensors) must name the widths the tensors have: 2^32 - 1 in it loaded and ran, a file that lies."""
    if key in m.metadata:
        got = m.ints(key, 1, len(want))
        check(list(got) == want, m.source, f"{key} is {list(got)}, but the blocks' tensors are {want} wide")


def _dac_encoder(b: _Builder, m: Metadata, cfg: CodecConfig, A: int) -> dac.DacEncoder:
    E, k_in, k_res, k_out = (m.int(K.AC_ENCODER_HIDDEN_SIZE), m.int(K.AC_KERNEL_SIZE), m.int(K.AC_RES_KERNEL),
                             m.int(K.AC_ENCODER_OUT_KERNEL))
    _check_channels(m, K.AC_ENCODER_CHANNELS, [E * 2 ** (i + 1) for i in range(len(cfg.downsampling_ratios))])
    blocks, c = [], E
    for i, s in enumerate(cfg.downsampling_ratios):
        blocks.append(dac.EncoderBlock(
            res_units=tuple(b.res_unit(N.DAC_ENC_RES_UNIT, c, k_res, i=i, j=j + 1) for j in range(len(dac.DILATIONS))),
            snake1=b.snake(N.DAC_ENC_SNAKE, c, i=i), conv1=b.cl_conv(N.DAC_ENC_CONV, (2 * s, c, 2 * c), i=i)))
        c *= 2
    return dac.DacEncoder(conv1=b.cl_conv(N.DAC_ENC_CONV_IN, (k_in, 1, E)), blocks=tuple(blocks),
                          snake1=b.snake(N.DAC_ENC_SNAKE_OUT, c), conv2=b.cl_conv(N.DAC_ENC_CONV_OUT, (k_out, c, A)))


def _dac_decoder(b: _Builder, m: Metadata, cfg: CodecConfig, A: int) -> dac.DacDecoder:
    D, k_in, k_res = m.int(K.AC_DECODER_HIDDEN_SIZE), m.int(K.AC_KERNEL_SIZE), m.int(K.AC_RES_KERNEL)
    n = len(cfg.upsampling_ratios)
    check(D % 2 ** n == 0, m.source, f"{K.AC_DECODER_HIDDEN_SIZE} = {D} does not halve {n} times")
    _check_channels(m, K.AC_DECODER_CHANNELS, [D // 2 ** (i + 1) for i in range(n)])
    blocks, c = [], D
    for i, s in enumerate(cfg.upsampling_ratios):
        # the transposed conv's weight in the stored layout [IC, K * OC], K = 2 s
        blocks.append(dac.DecoderBlock(
            snake1=b.snake(N.DAC_DEC_SNAKE, c, i=i),
            conv_t1=b.cl_conv(N.DAC_DEC_CONV_T, (c, 2 * s * (c // 2)), n_out=c // 2, i=i),
            res_units=tuple(b.res_unit(N.DAC_DEC_RES_UNIT, c // 2, k_res, i=i, j=j + 1)
                            for j in range(len(dac.DILATIONS)))))
        c //= 2
    return dac.DacDecoder(conv1=b.cl_conv(N.DAC_DEC_CONV_IN, (k_in, A, D)), blocks=tuple(blocks),
                          snake1=b.snake(N.DAC_DEC_SNAKE_OUT, c), conv2=b.cl_conv(N.DAC_DEC_CONV_OUT, (k_in, c, 1)))


def _codebook(b: _Builder, k: int, H: int, dim: int, size: int, encode: bool) -> rvq.Codebook:
    embed = N.tensor(N.RVQ_CODEBOOK, N.EMBED, i=k)
    extra = {}
    if encode:
        values = b.t.values(embed, (dim, size))
        extra = dict(project_in=b.linear(N.RVQ_PROJ_IN, H, dim, i=k),
                     embed_sqnorm=b.t.store.add_array(N.tensor(N.RVQ_CODEBOOK, N.EMBED_SQNORM, i=k),
                                                      rvq.embed_sqnorm(values)),
                     rank=b.t.store.add_array(N.tensor(N.RVQ_CODEBOOK, N.RANK, i=k), rvq.tie_rank(size)))
    return rvq.Codebook(embed=b.t.get(embed, (dim, size), F32), project_out=b.linear(N.RVQ_PROJ_OUT, dim, H, i=k),
                        **extra)


def load_weights(runtime: Runtime, f: GGUFFile, cfg: CodecConfig, parts: Sequence[str] = PARTS,
                 fma_convs: bool = False) -> tuple[CodecWeights, WeightStore]:
    """The tensors of `parts` ("encode", "decode") of `f`, checked, on `runtime`: (the record, its store).
    `fma_convs` (a CPU runtime whose CPU runs nn.fma): the DAC's conv weights, and HuBERT's feature convs but
    the first, packed for that kernel."""
    parts = tuple(parts)
    if not parts or set(parts) - set(PARTS):
        raise ValueError(f"codec parts must be a non-empty subset of {PARTS}, got {list(parts)}")
    encode = "encode" in parts
    check(not encode or cfg.hubert is not None, f.path, "holds no HuBERT weights (semantic_model.*); it can only "
          "decode")
    m = Metadata(f.metadata, f.path)
    dims = dac.DILATIONS
    check(m.ints(K.AC_RES_DILATIONS, n=len(dims)) == dims, f.path, f"{K.AC_RES_DILATIONS} is "
          f"{list(f.metadata[K.AC_RES_DILATIONS])}; this build's DAC has {list(dims)}")
    A, H = m.int(K.AC_HIDDEN_SIZE), m.int(K.HIDDEN_SIZE)
    dim, size = m.int(K.CODEBOOK_DIM), cfg.codebook_size
    store = WeightStore(runtime, f.path, f.metadata, region=f.data)
    try:
        b = _Builder(TensorLoader(f, store), cfg.snake_eps, cpu=not runtime.is_gpu, fma_convs=fma_convs)
        fields = dict(quantizers=tuple(_codebook(b, k, H, dim, size, encode) for k in range(cfg.n_quantizers)))
        if "decode" in parts:
            fields.update(fc2=b.linear(N.FC2, H, A), decoder=_dac_decoder(b, m, cfg, A))
        if encode:
            sem, c_sem = _semantic(b, m, cfg.semantic)
            check(H == A + c_sem, f.path, f"{K.HIDDEN_SIZE} = {H} is not the acoustic {K.AC_HIDDEN_SIZE} = {A} "
                  f"plus the semantic encoder's output width {c_sem}")
            fields.update(hubert=_hubert(b, m, cfg.hubert), semantic=sem, encoder=_dac_encoder(b, m, cfg, A),
                          fc=b.linear(N.FC, H, H))
        weights = CodecWeights(**fields)
        store.upload(in_place=not runtime.is_gpu, release=f.release)
    except BaseException:
        store.close()
        raise
    return weights, store
