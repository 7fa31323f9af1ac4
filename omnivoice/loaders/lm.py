"""The LM's GGUF (``omnivoice-base-*.gguf``) -> LMConfig and LMWeights on a runtime, everything checked first.

The hyper-parameters are checked against each other, then every tensor's shape and type against what they
imply, before ggml sees any of it: a damaged or mismatched file is a ModelFileError naming the file and the key
or tensor, not an abort inside ggml.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..ggml import Runtime, WeightStore, quants
from ..gguf import GGUFFile, keys as K, names as N
from ..models.lm import LMConfig, LMLayer, LMWeights
from ..nn.packed import Kernel, PackedProducts
from .tensors import EMBEDDING, MATRIX, VECTOR, Metadata, TensorLoader, check

ARCH = K.ARCH_LM


def read_config(f: GGUFFile) -> LMConfig:
    """The hyper-parameters of an LM file, each of the right kind and all consistent with each other."""
    m, src = Metadata(f.metadata, f.path), f.path
    cfg = LMConfig(
        n_layer=m.int(K.LM_BLOCK_COUNT), n_embd=m.int(K.LM_EMBEDDING_LENGTH), n_ff=m.int(K.LM_FEED_FORWARD_LENGTH),
        n_head=m.int(K.LM_HEAD_COUNT), n_head_kv=m.int(K.LM_HEAD_COUNT_KV), head_dim=m.int(K.LM_KEY_LENGTH),
        rms_eps=m.eps(K.LM_RMS_EPS), rope_theta=m.float(K.LM_ROPE_FREQ_BASE),
        n_codebook=m.int(K.NUM_AUDIO_CODEBOOK), audio_vocab=m.int(K.AUDIO_VOCAB_SIZE, 2),
        audio_mask_id=m.int(K.AUDIO_MASK_ID, 0), n_vocab=m.int(K.LM_VOCAB_SIZE))
    # the last layer block_count names must be in the file (the others' tensors are checked one by one at load),
    # before anything is made per layer: a count of 2^31 - 1 made a list of that many tensor names before the
    # first missing one was reported, and ran out of memory (tools/fuzz.py, seed 27)
    names, last = {t.name for t in f.tensors}, N.layer(N.LM_ATTN_NORM, cfg.n_layer - 1)
    check(last in names, src, f"{K.LM_BLOCK_COUNT} = {cfg.n_layer}, but tensor {last!r} is missing (the file holds "
          f"the tensors of {sum(N.is_layer(N.LM_ATTN_NORM, n) for n in names)} layers)")
    check(cfg.n_head % cfg.n_head_kv == 0, src, f"{K.LM_HEAD_COUNT} = {cfg.n_head} is not a multiple of "
          f"{K.LM_HEAD_COUNT_KV} = {cfg.n_head_kv} (each key/value head serves a whole group of query heads)")
    check(cfg.head_dim % 2 == 0, src, f"{K.LM_KEY_LENGTH} = {cfg.head_dim} is odd; RoPE rotates pairs")
    value_length = m.int(K.LM_VALUE_LENGTH)
    check(value_length == cfg.head_dim, src, f"{K.LM_VALUE_LENGTH} = {value_length} differs from "
          f"{K.LM_KEY_LENGTH} = {cfg.head_dim}; the graph has one head size")
    check(cfg.audio_mask_id < cfg.audio_vocab, src, f"{K.AUDIO_MASK_ID} = {cfg.audio_mask_id} is not an id below "
          f"{K.AUDIO_VOCAB_SIZE} = {cfg.audio_vocab}")
    if K.AUDIO_CODEBOOK_WEIGHTS in f.metadata:  # the training loss's weights: unused here, but a NaN says the
        m.floats(K.AUDIO_CODEBOOK_WEIGHTS, cfg.n_codebook)  # file is not what it claims to be
    if K.CODEBOOK_LAYER_OFFSETS in f.metadata:  # the graph shifts codebook k's ids by k * audio_vocab
        offsets = m.ints(K.CODEBOOK_LAYER_OFFSETS, 0, cfg.n_codebook)
        want = tuple(k * cfg.audio_vocab for k in range(cfg.n_codebook))
        check(offsets == want, src, f"{K.CODEBOOK_LAYER_OFFSETS} is {list(offsets)}, expected {list(want)} "
              f"(codebook k's ids start at k * {K.AUDIO_VOCAB_SIZE})")
    # every text id the tokenizer can produce must be a row of the text embedding
    tokens = f.metadata.get(K.TOKENIZER_TOKENS)
    if tokens is not None:
        check(isinstance(tokens, list) and len(tokens) <= cfg.n_vocab, src,
              f"{K.TOKENIZER_TOKENS} holds {len(tokens) if isinstance(tokens, list) else tokens!r} tokens, more "
              f"than {K.LM_VOCAB_SIZE} = {cfg.n_vocab} rows of the text embedding")
    for key in K.SPECIAL_TOKENS:
        if key in f.metadata:
            token = m.int(key, 0)
            check(token < cfg.n_vocab, src, f"{key} = {token} is not a token id below {K.LM_VOCAB_SIZE} = "
                  f"{cfg.n_vocab}")
    return cfg


def _layer(t: TensorLoader, cfg: LMConfig, i: int, stack: bool) -> LMLayer:
    E, D, F = cfg.n_embd, cfg.head_dim, cfg.n_ff
    q, kv = (E, cfg.n_head * D), (E, cfg.n_head_kv * D)
    parts = {"q": (N.layer(N.LM_ATTN_Q, i), q), "k": (N.layer(N.LM_ATTN_K, i), kv),
             "v": (N.layer(N.LM_ATTN_V, i), kv), "gate": (N.layer(N.LM_FFN_GATE, i), (E, F)),
             "up": (N.layer(N.LM_FFN_UP, i), (E, F))}
    if stack:  # one product instead of three (two): faster on GPUs, but the CPU would need a copy of the file
        projections = dict(
            qkv=t.stacked(N.layer(N.LM_ATTN_QKV, i), [parts[n] for n in ("q", "k", "v")], MATRIX),
            gate_up=t.stacked(N.layer(N.LM_FFN_GATE_UP, i), [parts["gate"], parts["up"]], MATRIX))
    else:
        projections = {field: t.get(name, ne, MATRIX) for field, (name, ne) in parts.items()}
    return LMLayer(
        attn_norm=t.get(N.layer(N.LM_ATTN_NORM, i), (E,), VECTOR),
        q_norm=t.get(N.layer(N.LM_ATTN_Q_NORM, i), (D,), VECTOR),
        k_norm=t.get(N.layer(N.LM_ATTN_K_NORM, i), (D,), VECTOR),
        o=t.get(N.layer(N.LM_ATTN_OUT, i), (cfg.n_head * D, E), MATRIX),
        ffn_norm=t.get(N.layer(N.LM_FFN_NORM, i), (E,), VECTOR),
        down=t.get(N.layer(N.LM_FFN_DOWN, i), (F, E), MATRIX),
        **projections)


def _class_bias(cfg: LMConfig) -> np.ndarray:
    """0, -inf at the mask id: the greedy pick in the graph never emits it."""
    bias = np.zeros(cfg.audio_vocab, np.float32)
    bias[cfg.audio_mask_id] = -np.inf
    return bias


def _joint_qk_norm(f: GGUFFile, store: WeightStore, cfg: LMConfig, layer: LMLayer, i: int) -> LMLayer:
    """The layer with `qk_norm` [D, H + Hkv]: q_norm for each query head, then k_norm for each key head (the
    qk_rope graph variant norms q and k as one tensor)."""
    def values(name: str) -> np.ndarray:  # a checked F32 vector of the file
        return f.tensor(N.layer(name, i)).data.view(np.float32)

    joint = np.concatenate([np.tile(values(N.LM_ATTN_Q_NORM), (cfg.n_head, 1)),
                            np.tile(values(N.LM_ATTN_K_NORM), (cfg.n_head_kv, 1))])
    return dataclasses.replace(layer, qk_norm=store.add_array(N.layer(N.LM_ATTN_Q_NORM, i) + ".joint", joint))


def product_matrices(cfg: LMConfig) -> list[str]:
    """The names of the matrices the graph only ever multiplies (every layer's projections, the audio heads)."""
    per_layer = (N.LM_ATTN_Q, N.LM_ATTN_K, N.LM_ATTN_V, N.LM_ATTN_OUT, N.LM_FFN_GATE, N.LM_FFN_UP, N.LM_FFN_DOWN)
    return [N.layer(name, i) for i in range(cfg.n_layer) for name in per_layer] + [N.LM_AUDIO_HEADS]


def matrix_type(path) -> int | None:
    """The ggml type of the product matrices of the LM file at `path` (its first layer's query projection, as
    LanguageModel picks its CPU kernel by), or None for a file without one or one that does not read as an LM
    file: loading it says what is wrong. Asked before a runtime exists: an F32 file asks for F32 arithmetic."""
    from ..gguf import open_model

    try:
        return open_model(path, ARCH).tensor(N.layer(N.LM_ATTN_Q, 0)).tensor_type
    except (OSError, ValueError, KeyError):
        return None


def _pack(f: GGUFFile, store: WeightStore, cfg: LMConfig, kernel: Kernel,
          threads: int) -> tuple[PackedProducts, set[str]]:
    """The product matrices of `f` whose rows `kernel` takes (Kernel.fits), in its layout, from their values in
    the file, and their names; the file's pages of each are released after (the graph reads the packed copy). The
    others keep ggml's products. Matrices are packed on `threads` threads (ggml's conversion and the packing are C
    calls, which cffi makes without the GIL): packing reads and converts every matrix at load, where ggml's
    products read the mapped file's pages as the first step touches them, so a packed LM loads slower."""
    products = PackedProducts(kernel)

    def pack(name: str) -> str | None:
        t = f.tensor(name)
        if not kernel.fits(t.shape):
            return None
        K, M = (int(n) for n in t.shape)
        products.add(store[name], quants.dequantize(t.data, t.tensor_type, K * M).reshape(M, K))
        f.release(t.data)
        return name

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        names = {n for n in pool.map(pack, product_matrices(cfg)) if n is not None}
    return products, names


def load_weights(runtime: Runtime, f: GGUFFile, cfg: LMConfig, stack: bool = False,
                 in_place: bool | None = None, joint_qk_norm: bool = False,
                 packed_products: Kernel | None = None) -> tuple[LMWeights, WeightStore]:
    """Every LM tensor of `f`, checked against `cfg`, on `runtime`: (the record, the store that owns them).

    `stack` joins q/k/v and gate/up into one matrix each (copies of their rows); `in_place` (default: on the CPU)
    uses the file's memory map as the buffer of the other tensors instead of a copy; `joint_qk_norm` adds each
    layer's `qk_norm` (the qk_rope graph variant); `packed_products` (CPU runtimes, unstacked) packs every product
    matrix for that kernel of the package (`LMWeights.packed`: nn.int16, nn.amx).
    """
    if packed_products is not None and (runtime.is_gpu or stack):
        raise ValueError(f"{packed_products.name} products run on the CPU backend, on unstacked projections")
    E, N_audio = cfg.n_embd, cfg.n_codebook * cfg.audio_vocab
    store = WeightStore(runtime, f.path, f.metadata, region=f.data)
    try:
        t = TensorLoader(f, store)
        weights = LMWeights(
            tok_embd=t.get(N.LM_TOKEN_EMBD, (E, cfg.n_vocab), EMBEDDING),
            audio_embd=t.get(N.LM_AUDIO_EMBD, (E, N_audio), EMBEDDING),
            layers=tuple(_joint_qk_norm(f, store, cfg, _layer(t, cfg, i, stack), i) if joint_qk_norm
                         else _layer(t, cfg, i, stack) for i in range(cfg.n_layer)),
            output_norm=t.get(N.LM_OUTPUT_NORM, (E,), VECTOR),
            audio_heads=t.get(N.LM_AUDIO_HEADS, (E, N_audio), MATRIX),
            # made last: only the checked tensors above bound audio_vocab, so a damaged file allocates nothing
            class_bias=store.add_array(N.LM_CLASS_BIAS, _class_bias(cfg)))
        if in_place is None:
            in_place = not runtime.is_gpu
        packed: set[str] = set()
        if packed_products is not None:
            products, packed = _pack(f, store, cfg, packed_products, runtime.n_threads)
            weights = dataclasses.replace(weights, packed=products)
        # the embedding tables are read by row, which the CPU's repacked layout does not allow; the matrices
        # packed for the package's kernels are never read by the graph
        store.upload(in_place=in_place, release=f.release,
                     repack=lambda name: name not in (N.LM_TOKEN_EMBD, N.LM_AUDIO_EMBD) and name not in packed)
    except BaseException:
        store.close()
        raise
    return weights, store
