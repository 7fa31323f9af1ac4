"""OmniVoice's language model: Qwen3 with audio embeddings in and audio heads out, as one ggml graph.

Input (one packed sequence of L positions, several prompts side by side, e.g. cond then uncond):
    text_ids  int32 [L]        row 0 of the input ids (text tokens; ignored where the audio mask is set)
    audio_ids int32 [8 * L]    codebook k's ids shifted by k * audio_vocab, codebook-major (k * L + l)
    audio_mask f32  [L]        1 where the position holds audio codes
    text_mask f32   [L]        1 - audio_mask
    pos       int32 [L]        position ids, restarting at 0 for every packed prompt
    segments  (start, length) of each packed prompt: attention runs within each, unmasked

The math follows the reference's forward: embeddings = where(audio_mask, sum_k audio_emb[k], text_emb);
28 pre-norm layers with per-head q/k RMSNorm before NEOX RoPE, GQA, SwiGLU; final RMSNorm; audio_heads.
Attention is bidirectional within each packed prompt. Each segment gets its own attention call rather than one
call over all L positions with a block-diagonal mask: GPU kernels compute masked blocks all the same, so
packing cond and uncond that way would double the attention work of a 20 s chunk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import nn
from ..nn import fma
from ..ggml import Tensor, lib, named, types

if TYPE_CHECKING:
    from ..nn.packed import PackedProducts


@dataclass(frozen=True)
class LMConfig:
    """Hyper-parameters of the LM (read and cross-checked by omnivoice.loaders.lm)."""

    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    n_codebook: int
    audio_vocab: int      # ids per codebook, the mask id included (1025)
    audio_mask_id: int
    n_vocab: int          # text tokens (rows of the text embedding)


@dataclass(frozen=True)
class Variant:
    """Other compositions of the same math, for speed (issue 18 on GPUs; fma_attention on the CPU); all off is
    the default graph.

    qk_rope: q and k of the stacked q/k/v product normed and rotated as one tensor (one RMSNorm, one mul by the
        joint weight `LMLayer.qk_norm`, one RoPE for both; needs stacked projections).
    kv_rows: K and V written into flash attention's K/V type with set_rows over constant row ids, so that CUDA
        fuses K's RMSNorm, mul, RoPE and the conversion into one kernel.
    one_attention: one attention call over all packed positions with a constant block-diagonal F16 mask
        [L, L] instead of one call per segment and a concat.
    typed_inputs: the inputs of F16/BF16 products cast to the weights' type in the graph (the backend
        converts them itself otherwise).
    fused_casts: typed_inputs for the products whose cast CUDA fuses into the kernel before it (ggml patch
        0005: RMSNorm times its weight, and SwiGLU, written straight as BF16/F16): q/k/v, gate/up and down; the
        attention output and the audio heads' columns are left to their product, which converts them faster
        than a CPY would.
    fma_attention: where the CPU would run flash attention with F32 K/V, each segment's attention as one node of
        the package's FMA kernel (nn.fma.attention: blocks of queries on its tiles, float32) instead (the CPU's
        default where the kernel runs).
    attn_cast: the attention output cast to the output product's weight type in the graph: for one request's
        segments ggml patch 0013's short-sequence kernel writes it directly, and the padded buckets of a batch
        are scattered back into packed order by set_rows in that type (no conversion kernel before the product).
    cast_scratch: (with typed_inputs or fused_casts) every cast of a product's input written into one tensor of
        the graph (CastScratch) rather than a new one. CUDA fuses a cast into the kernel before it only where the
        cast's output shares no memory with that kernel's inputs, and the allocator often gave it the memory of
        an input just freed (in a kernel profile of a 20 s step, some casts then ran as scalar kernels of their
        own, and with attn_cast most residual adds unfused); the scratch is no input's.
    """

    qk_rope: bool = False
    kv_rows: bool = False
    one_attention: bool = False
    typed_inputs: bool = False
    fused_casts: bool = False
    fma_attention: bool = False
    attn_cast: bool = False
    cast_scratch: bool = False

    @classmethod
    def parse(cls, text: str) -> "Variant":
        """`qk_rope,kv_rows` -> Variant(qk_rope=True, kv_rows=True); '' or 'none' -> the default graph."""
        names = [n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"]
        unknown = [n for n in names if n not in cls.__dataclass_fields__]
        if unknown:
            raise ValueError(f"unknown graph variant(s) {', '.join(unknown)}; "
                             f"expected {', '.join(cls.__dataclass_fields__)}")
        return cls(**{n: True for n in names})

    @property
    def product(self):
        """The matrix product of the graph: ggml_mul_mat, or typed_product with typed_inputs or fused_casts."""
        return typed_product if self.typed_inputs or self.fused_casts else lib.ggml_mul_mat

    @property
    def unfused_product(self):
        """The product of an input that no kernel before it writes in the weights' type (the attention output
        but under attn_cast, the audio heads' gathered columns): ggml_mul_mat under fused_casts alone (ggml's CPY
        F32 -> BF16 is a scalar kernel, several times slower than the product's own vectorized conversion)."""
        return lib.ggml_mul_mat if self.fused_casts and not self.typed_inputs else self.product


DEFAULT = Variant()


@dataclass(frozen=True)
class VariantInputs:
    """The per-chunk constants a variant reads (None where it is off)."""

    kv_rows: Tensor | None = None     # [L] I64: 0 .. L-1
    attn_mask: Tensor | None = None   # [L, L] F16: 0 within a packed prompt's segment, -inf across


# The weights as the graph reads them, ggml shapes (ne0 first): E = n_embd, D = head_dim, H and Hkv the query
# and key/value heads, F = n_ff, N = n_codebook * audio_vocab. The loader fills them once from the GGUF, every
# shape and type checked; names in omnivoice.gguf.names.

@dataclass(frozen=True)
class LMLayer:
    """One decoder layer. q/k/v and gate/up are either separate matrices or stacked into one (`qkv`,
    `gate_up`) at load time; the unused form is None."""

    attn_norm: Tensor               # [E]
    q_norm: Tensor                  # [D]
    k_norm: Tensor                  # [D]
    o: Tensor                       # [H D, E]
    ffn_norm: Tensor                # [E]
    down: Tensor                    # [F, E]
    q: Tensor | None = None         # [E, H D]
    k: Tensor | None = None         # [E, Hkv D]
    v: Tensor | None = None         # [E, Hkv D]
    qkv: Tensor | None = None       # [E, (H + 2 Hkv) D]: the rows of q, k, v
    gate: Tensor | None = None      # [E, F]
    up: Tensor | None = None        # [E, F]
    gate_up: Tensor | None = None   # [E, 2 F]: the rows of gate, up (ggml_swiglu: silu(first half) * second)
    qk_norm: Tensor | None = None   # [D, H + Hkv]: q_norm for each query head, then k_norm (the qk_rope variant)


@dataclass(frozen=True)
class LMWeights:
    tok_embd: Tensor                # [E, n_vocab]
    audio_embd: Tensor              # [E, N]: codebook k's ids start at row k * audio_vocab
    layers: tuple[LMLayer, ...]
    output_norm: Tensor             # [E]
    audio_heads: Tensor             # [E, N]
    class_bias: Tensor              # [audio_vocab] F32, made at load: 0, -inf at the mask id
    packed: "PackedProducts | None" = None  # the product matrices packed for a CPU kernel (nn.int16, nn.amx)


def products(variant: Variant, packed: "PackedProducts | None"):
    """The graph's two product functions (variant.product, variant.unfused_product), through the package's CPU
    kernel for the matrices the loader packed for it; new ones each call (a layer's build: they share the casts
    of their inputs, PackedProducts.over)."""
    if packed is None:
        return variant.product, variant.unfused_product
    return packed.over(variant.product), packed.over(variant.unfused_product)


def embed(ctx, w: LMWeights, cfg: LMConfig, text_ids, audio_ids, audio_mask, text_mask):
    """Hybrid input embedding -> [n_embd, L]."""
    L = text_ids.ne[0]
    text = nn.embedding(ctx, w.tok_embd, text_ids)                               # [C, L]
    codes = nn.embedding(ctx, w.audio_embd, audio_ids)                           # [C, 8 * L]
    row = codes.nb[1] * L
    audio = lib.ggml_view_2d(ctx, codes, cfg.n_embd, L, codes.nb[1], 0)
    for k in range(1, cfg.n_codebook):
        audio = lib.ggml_add(ctx, audio, lib.ggml_view_2d(ctx, codes, cfg.n_embd, L, codes.nb[1], k * row))
    # where(mask, audio, text) as text*(1-m) + audio*m: exact for m in {0, 1}, unlike text + m*(audio - text).
    m = lib.ggml_reshape_2d(ctx, audio_mask, 1, L)                               # [1, L]
    keep_text = lib.ggml_reshape_2d(ctx, text_mask, 1, L)
    return named(lib.ggml_add(ctx, lib.ggml_mul(ctx, text, keep_text), lib.ggml_mul(ctx, audio, m)), "inp_embd")


def heads(ctx, x, cfg: LMConfig, n: int, first: int = 0):
    """Heads [first, first + n) of a projection x [(heads) * D, L] as [D, n, L] (a view)."""
    D, es = cfg.head_dim, x.nb[0]
    return lib.ggml_view_3d(ctx, x, D, n, x.ne[1], D * es, x.nb[1], first * D * es)


def qkv_projections(ctx, layer: LMLayer, cfg: LMConfig, cur, product=lib.ggml_mul_mat):
    """q [D, H, L], k and v [D, Hkv, L] of the normed input cur [n_embd, L]."""
    H, Hkv = cfg.n_head, cfg.n_head_kv
    if layer.qkv is not None:
        qkv = product(ctx, layer.qkv, cur)                                                   # [(H + 2 Hkv) D, L]
        return heads(ctx, qkv, cfg, H), heads(ctx, qkv, cfg, Hkv, H), heads(ctx, qkv, cfg, Hkv, H + Hkv)
    return tuple(heads(ctx, product(ctx, w, cur), cfg, n)
                 for w, n in ((layer.q, H), (layer.k, Hkv), (layer.v, Hkv)))


def positions(ctx, x, start: int, n: int):
    """Positions [start, start + n) of x [D, H, L] (a view)."""
    return lib.ggml_view_3d(ctx, x, x.ne[0], x.ne[1], n, x.nb[1], x.nb[2], start * x.nb[2])


def concat(ctx, parts: list, dim: int, cpu: bool = False):
    """The parts joined along `dim`, pairwise in a balanced tree (each value is copied log2(len) times).

    `cpu` (parts joined along dim 1): nn.concat_columns, memcpy nodes on every thread for F32 parts."""
    return nn.concat_columns(ctx, parts) if cpu and dim == 1 else nn.concat(ctx, parts, dim)


def segmented_attention(ctx, cfg: LMConfig, q, k, v, segments, flash_kv: int | None, contiguous_qk: bool = False,
                        cpu: bool = False, fma_attention: bool = False):
    """Bidirectional attention within each (start, length) segment: q [D, H, L], k/v [D, Hkv, L] -> [D*H, L].
    `contiguous_qk`: see nn.attention (the plain path on Vulkan); `cpu`: the graph runs on the CPU backend (see
    concat); `fma_attention`: Variant.fma_attention."""
    if cpu and fma_attention and flash_kv == types.F32 and fma.attention_supported(cfg.head_dim):
        parts = [fma.attention(ctx, positions(ctx, q, s, n), positions(ctx, k, s, n), positions(ctx, v, s, n))
                 for s, n in segments]                                                      # [D * H, n] each
        return concat(ctx, parts, 1, cpu)
    if flash_kv is not None and k.type != flash_kv:
        # Once for all segments, while K and V are contiguous.
        k, v = lib.ggml_cast(ctx, k, flash_kv), lib.ggml_cast(ctx, v, flash_kv)
    scale = 1.0 / math.sqrt(cfg.head_dim)
    parts = [nn.attention(ctx, positions(ctx, q, s, n), positions(ctx, k, s, n), positions(ctx, v, s, n), None,
                          scale, flash=flash_kv is not None, kv_type=flash_kv, contiguous_qk=contiguous_qk)
             for s, n in segments]                                                          # [D * H, n] each
    return concat(ctx, parts, 1, cpu)


@dataclass(frozen=True)
class PaddedBucket:
    """Segments of similar length attended as one padded batch: `count` segments padded to `length` rows."""

    mask: object    # F16 [length, length, 1, count]: 0 where a key may be attended, -inf at a segment's padding
    length: int
    count: int


@dataclass(frozen=True)
class PaddedSegments:
    """The packed segments as padded buckets (padded_attention), and where each packed position's rows go.

    Q, K and V are written straight into the padded layout (all buckets' rows joined, R = sum of length * count),
    K and V in flash attention's K/V type, by set_rows over `rows` into `q_rows` [D * H, R] and `k_rows`, `v_rows`
    [D * Hkv, R]: zeroed constants, so that padding rows stay finite (a masked key's weight is 0, and 0 * NaN would
    not be; a kept shape class graph's are zeroed again for each session, whose lengths make other rows padding:
    runners.lm.PADDED_ROWS). One set serves every layer: the backends run a graph's nodes in order, so a layer's
    set_rows comes after the previous layer's attention has read the buffers. The outputs go back by set_rows over
    `scatter` into one tensor of `results` (by type) that every layer overwrites: made by the first layer, since a
    new one a layer would be a leaf of the graph, and ggml's allocator holds every leaf from the start; or given,
    zeroed, where packed positions are no segment's (a shape class's tail rows, which no set_rows writes. A tensor
    of the compute buffer is freed once the last layer's output product has read it, its memory going to the
    tensors after it (on the CPU the logits and the guided pick): from a graph's second run on its tail rows would
    hold their bits, read in the outputs' type, non-finite values among them where that is BF16, and carry them
    through the layers into the spare row of K and V)."""

    buckets: tuple
    rows: object     # I64 [L]: the padded row of each packed position
    q_rows: object
    k_rows: object
    v_rows: object
    scatter: object  # I64 [R]: the packed position of each padded row, L for padding (a row the result leaves out)
    results: dict = field(default_factory=dict)
    # ggml patch 0019: tell CUDA's short-sequence attention (op_params[5] = 1) that a bucket mask's rows are the same
    # for every query of a segment, so that it reads one row a segment; every other kernel reads the whole mask
    same_rows: bool = False


def padded_out_type(layer: "LMLayer", variant: "Variant") -> int:
    """The type padded attention writes its outputs in: under attn_cast the output product's input type (their
    set_rows casts), else F32."""
    return layer.o.type if variant.attn_cast and layer.o.type in (types.F16, types.BF16) else types.F32


def padded_attention(ctx, cfg: LMConfig, q, k, v, padded: PaddedSegments, out_type: int = types.F32):
    """segmented_attention's result with one flash-attention call per bucket of similar-length segments instead
    of one per segment: q [D, H, L], k/v [D, Hkv, L] F32 -> [D*H, L] in `out_type`.

    The rows of each bucket's segments are laid out as [D, P, H, S] (padding rows zero), attended with a mask that
    hides every segment's padding keys, and put back in packed order. On a GPU a batch of 64 requests then runs a
    few attention kernels per layer rather than 128 small ones in a row; the arithmetic of a real row is the same
    up to summation order (the CPU keeps segmented_attention: bit-exact per request). Q, K and V go into the
    padded layout by one set_rows each (K and V in the K/V type), which CUDA fuses into the RMSNorm + RoPE kernel
    before it for Q and K, rather than a gather (and a cast) per bucket: at 64 packed requests the K/V casts (ggml's
    F32 -> F16 copy is a scalar kernel) and the gathers were a sixth of a step's GPU time. The outputs go back by
    one set_rows per bucket that also casts them
    to the output product's input type (ggml patch 0018 has CUDA's attention kernel write those rows itself)."""
    D, H, Hkv = cfg.head_dim, cfg.n_head, cfg.n_head_kv
    # one row per position, [D*heads, L] (a view: set_rows reads rows at any stride), scattered into [D*heads, R]
    q2, k2, v2 = (lib.ggml_set_rows(ctx, dst, lib.ggml_view_2d(ctx, x, x.ne[0] * x.ne[1], x.ne[2], x.nb[2], 0),
                                    padded.rows)
                  for x, dst in ((q, padded.q_rows), (k, padded.k_rows), (v, padded.v_rows)))
    scale = 1.0 / math.sqrt(cfg.head_dim)
    L = q.ne[2]
    if out_type not in padded.results:
        padded.results[out_type] = lib.ggml_new_tensor_2d(ctx, out_type, D * H, L + 1)
    result = padded.results[out_type]                                                           # [D*H, L + 1]
    first = 0  # the bucket's first row in the joined padded layout
    for b in padded.buckets:
        P, S = b.length, b.count

        def rows(x, heads):
            r = lib.ggml_view_2d(ctx, x, x.ne[0], P * S, x.nb[1], first * x.nb[1])               # [D*heads, P*S]
            return lib.ggml_permute(ctx, lib.ggml_reshape_4d(ctx, r, D, heads, P, S), 0, 2, 1, 3)  # [D, P, heads, S]

        out = lib.ggml_flash_attn_ext(ctx, rows(q2, H), rows(k2, Hkv), rows(v2, Hkv), b.mask, scale, 0.0, 0.0)
        lib.ggml_flash_attn_ext_set_prec(out, lib.GGML_PREC_F32)                               # [D, H, P, S]
        if padded.same_rows:
            out.op_params[5] = 1
        where = lib.ggml_view_1d(ctx, padded.scatter, P * S, first * padded.scatter.nb[0])
        result = lib.ggml_set_rows(ctx, result, lib.ggml_reshape_2d(ctx, out, D * H, P * S), where)  # [D*H, L + 1]
        first += P * S
    return lib.ggml_view_2d(ctx, result, D * H, L, result.nb[1], 0)                            # [D*H, L]


def decoder_layer(ctx, layer: LMLayer, cfg: LMConfig, il: int, x, pos, segments, flash_kv: int | None,
                  variant: Variant = DEFAULT, inputs: VariantInputs = VariantInputs(), contiguous_qk: bool = False,
                  packed: "PackedProducts | None" = None, cpu: bool = False, scratch: "CastScratch | None" = None):
    """Qwen3 decoder layer `il`: x [n_embd, L] -> [n_embd, L]. `segments`: (start, length) of each packed
    prompt, or PaddedSegments (flash attention only); `flash_kv`: K/V type of flash attention, or None for the
    plain path; `variant`: see Variant; `contiguous_qk`: the plain path's Q and K made contiguous before their
    product (Runtime.products_need_contiguous, nn.attention); `packed`: LMWeights.packed; `cpu`: the graph runs on
    the CPU backend (nn.rms_norm's one-node norms); `scratch`: the graph's CastScratch (Variant.cast_scratch)."""
    product, attn_out_product = products(variant, packed)  # (the latter: the unfused product)
    cast_product = scratch.typed_product if scratch is not None else typed_product
    if product is typed_product:
        product = cast_product
    residual = x
    cur = named(nn.rms_norm(ctx, x, layer.attn_norm, cfg.rms_eps, cpu), "attn_norm", il)

    padded = isinstance(segments, PaddedSegments)
    if variant.qk_rope:
        q, k, v = joint_qk_norm_rope(ctx, layer, cfg, cur, pos, product)                  # [D, H or Hkv, L]
    else:
        q, k, v = qkv_projections(ctx, layer, cfg, cur, product)                          # [D, H or Hkv, L]
        q = named(nn.rms_norm(ctx, q, layer.q_norm, cfg.rms_eps, cpu), "Qcur_normed", il)
        k = named(nn.rms_norm(ctx, k, layer.k_norm, cfg.rms_eps, cpu), "Kcur_normed", il)
        q = named(nn.rope_neox(ctx, q, pos, cfg.rope_theta), "Qcur", il)
        k = named(nn.rope_neox(ctx, k, pos, cfg.rope_theta), "Kcur", il)
    named(v, "Vcur", il)
    if variant.kv_rows and flash_kv is not None and not padded:
        k, v = rows_as(ctx, k, flash_kv, inputs.kv_rows), rows_as(ctx, v, flash_kv, inputs.kv_rows)
    if variant.one_attention:
        cur = nn.attention(ctx, q, k, v, inputs.attn_mask, 1.0 / math.sqrt(cfg.head_dim),
                           flash=flash_kv is not None, kv_type=flash_kv, contiguous_qk=contiguous_qk)
    elif padded:
        cur = padded_attention(ctx, cfg, q, k, v, segments, padded_out_type(layer, variant))
    else:
        cur = segmented_attention(ctx, cfg, q, k, v, segments, flash_kv, contiguous_qk, cpu, variant.fma_attention)
    named(cur, "kqv_out", il)                                                                # [D * H, L]
    if variant.attn_cast and not padded:
        attn_out_product = cast_product
    cur = named(attn_out_product(ctx, layer.o, cur), "attn_out", il)                         # [n_embd, L]
    x = named(lib.ggml_add(ctx, residual, cur), "ffn_inp", il)

    residual = x
    cur = named(nn.rms_norm(ctx, x, layer.ffn_norm, cfg.rms_eps, cpu), "ffn_norm", il)
    if layer.gate_up is not None:
        gate_up = product(ctx, layer.gate_up, cur)                                           # [2 n_ff, L]
        cur = product(ctx, layer.down, lib.ggml_swiglu(ctx, gate_up))
    else:
        cur = nn.swiglu(ctx, cur, layer.gate, layer.up, layer.down, product)
    named(cur, "ffn_out", il)
    return named(lib.ggml_add(ctx, residual, cur), "l_out", il)


FP16_MAX = 65504.0


def hidden_states(ctx, w: LMWeights, cfg: LMConfig, text_ids, audio_ids, audio_mask, text_mask, pos, segments,
                  flash_kv: int | None, clamp_fp16: bool = False, variant: Variant = DEFAULT,
                  inputs: VariantInputs = VariantInputs(), contiguous_qk: bool = False, cpu: bool = False):
    """The backbone: embeddings, every layer, final norm -> [n_embd, L].

    `clamp_fp16` bounds the residual stream to the F16 range after every layer (a debug aid for backends that
    keep activations in F16; a no-op on healthy F32 activations). `variant` and its `inputs`: see Variant.
    `contiguous_qk` and `cpu`: see decoder_layer.
    """
    x = embed(ctx, w, cfg, text_ids, audio_ids, audio_mask, text_mask)
    scratch = CastScratch() if variant.cast_scratch and w.packed is None else None
    for il, layer in enumerate(w.layers):
        x = decoder_layer(ctx, layer, cfg, il, x, pos, segments, flash_kv, variant, inputs, contiguous_qk,
                          w.packed, cpu, scratch)
        if clamp_fp16:
            x = lib.ggml_clamp(ctx, x, -FP16_MAX, FP16_MAX)
    return named(nn.rms_norm(ctx, x, w.output_norm, cfg.rms_eps, cpu), "result_norm")


def audio_logits(ctx, w: LMWeights, cfg: LMConfig, h, variant: Variant = DEFAULT):
    """audio_heads over the given positions: h [n_embd, N] -> logits [audio_vocab, n_codebook, N]."""
    # h: columns or gathered rows of the final norm's output, which no kernel writes in the weights' type
    logits = named(products(variant, w.packed)[1](ctx, w.audio_heads, h), "result_output")  # [8 * V, N]
    return lib.ggml_reshape_3d(ctx, logits, cfg.audio_vocab, cfg.n_codebook, h.ne[1])


def columns(ctx, x, start: int, n: int):
    """Columns [start, start + n) of a 2-D tensor [C, L] (a view)."""
    return lib.ggml_view_2d(ctx, x, x.ne[0], n, x.nb[1], start * x.nb[1])


# ------------------------------------------------------------------------ graph variants (Variant, issue 18)

def typed_product(ctx, w, x, scratch: "CastScratch | None" = None):
    """W x with x cast to W's type first where W is F16 or BF16 (what the backend's product converts it to); the
    cast written into `scratch`'s tensor of its shape where one is given (Variant.cast_scratch)."""
    if w.type in (types.F16, types.BF16) and x.type != w.type:
        x = lib.ggml_cast(ctx, x, w.type) if scratch is None else lib.ggml_cpy(ctx, x, scratch.like(ctx, x, w.type))
    return lib.ggml_mul_mat(ctx, w, x)


class CastScratch:
    """The casts of a graph's product inputs written into one tensor per type and shape (of the norms' outputs,
    SwiGLU's, the attention's) instead of a new tensor each (Variant.cast_scratch). Each layer's casts overwrite
    the layer's before, which the graph's data order makes safe: a cast's input depends on the product that read
    the cast before it. The tensor itself is the CPY's destination, not a view of it: a VIEW node between the
    kernel and its cast would keep CUDA from fusing them."""

    def __init__(self) -> None:
        self.tensors: dict[tuple, object] = {}

    def like(self, ctx, x, type_: int):
        """The scratch tensor of x's shape in `type_`."""
        key = (type_, *(x.ne[i] for i in range(4)))
        if key not in self.tensors:
            self.tensors[key] = lib.ggml_new_tensor(ctx, type_, 4, x.ne)
        return self.tensors[key]

    def typed_product(self, ctx, w, x):
        """typed_product with its cast written into this scratch."""
        return typed_product(ctx, w, x, self)


def rows_as(ctx, x, dst_type: int, ids):
    """x [D, Hkv, L] (rows of D * Hkv contiguous) written as `dst_type` by set_rows over row ids [L]."""
    D, Hkv, L = x.ne[0], x.ne[1], x.ne[2]
    x2 = lib.ggml_view_2d(ctx, x, D * Hkv, L, x.nb[2], 0)                                 # [D * Hkv, L]
    dst = lib.ggml_new_tensor_2d(ctx, dst_type, D * Hkv, L)
    return lib.ggml_reshape_3d(ctx, lib.ggml_set_rows(ctx, dst, x2, ids), D, Hkv, L)


def joint_qk_norm_rope(ctx, layer: LMLayer, cfg: LMConfig, cur, pos, product):
    """q, k and v of the stacked q/k/v product, q and k normed (by the joint weight) and rotated as one tensor
    [D, H + Hkv, L]: q [D, H, L], k and v [D, Hkv, L]."""
    H, Hkv, D = cfg.n_head, cfg.n_head_kv, cfg.head_dim
    if layer.qkv is None or layer.qk_norm is None:
        raise ValueError("the qk_rope variant needs stacked q/k/v weights and the joint q/k norm weight")
    qkv = product(ctx, layer.qkv, cur)                                                     # [(H + 2 Hkv) D, L]
    qk = nn.rms_norm(ctx, heads(ctx, qkv, cfg, H + Hkv), layer.qk_norm, cfg.rms_eps)      # [D, H + Hkv, L]
    qk = nn.rope_neox(ctx, qk, pos, cfg.rope_theta)
    q, k = (lib.ggml_view_3d(ctx, qk, D, n, qk.ne[2], qk.nb[1], qk.nb[2], first * qk.nb[1])
            for first, n in ((0, H), (H, Hkv)))
    return q, k, heads(ctx, qkv, cfg, Hkv, H + Hkv)


# --------------------------------------------------------------------------------- MaskGIT sampling in-graph

def log_softmax(ctx, x, cpu: bool = False):
    """log_softmax over ne0 of x [V, N]: (x - max) - log(sum(exp(x - max))), as torch computes it. `cpu`: the
    graph runs on the CPU backend (nn.row_max's node).

    sum(exp(x - max)) is 1 / max(softmax(x)), since the largest term is exp(0): one fused, vectorised softmax
    pass and a [1, N] log replace an elementwise exp and a row sum (half the time on the CPU, same error).
    """
    shifted = lib.ggml_sub(ctx, x, nn.row_max(ctx, x, cpu))
    log_max_p = lib.ggml_log(ctx, nn.row_max(ctx, lib.ggml_soft_max(ctx, x), cpu))        # [1, N] = -lse
    return lib.ggml_add(ctx, shifted, log_max_p)


def guided_log_probs(ctx, cond, uncond, guidance_scale: float, cpu: bool = False):
    """The reference's CFG, log_softmax(c + g (c - u)) with c, u the log_softmax of each row's logits, computed
    as log_softmax((1 + g) cond - g uncond).

    The two are equal: c and u differ from the logits by one constant per row, and log_softmax drops constants.
    The short form saves two log-softmax passes over [V, C*T] per step; it rounds differently, by ~1e-6 of
    the log-probs, which the token parity tests bound.
    """
    if guidance_scale == 0:
        return log_softmax(ctx, cond, cpu)
    z = lib.ggml_sub(ctx, lib.ggml_scale(ctx, cond, 1.0 + guidance_scale), lib.ggml_scale(ctx, uncond, guidance_scale))
    return log_softmax(ctx, z, cpu)


def guided_log_probs_per_column(ctx, cond, uncond, keep, mix, cpu: bool = False):
    """guided_log_probs with a guidance scale g per column (prompts of a batch with different settings):
    log_softmax(keep * cond - mix * uncond), keep = 1 + g and mix = g as [1, N]. A column with g = 0 gets
    log_softmax(cond) bit for bit (cond * 1 - uncond * 0 is cond), as guided_log_probs gives it."""
    z = lib.ggml_sub(ctx, lib.ggml_mul(ctx, cond, keep), lib.ggml_mul(ctx, uncond, mix))
    return log_softmax(ctx, z, cpu)


def greedy_pick(ctx, log_probs, class_bias, cpu: bool = False):
    """argmax and max over classes after adding `class_bias` [V] (-inf on the mask id): ([N] i32, [1, N])."""
    masked = lib.ggml_add(ctx, log_probs, class_bias)
    return lib.ggml_argmax(ctx, masked), nn.row_max(ctx, masked, cpu)
