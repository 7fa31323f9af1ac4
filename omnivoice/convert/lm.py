"""The LM GGUF (``omnivoice-base-{QUANT}.gguf``, arch ``omnivoice-lm``): Qwen3 + audio embeddings/heads + tokenizer.

Tensors keep their Hugging Face names (``llm.layers.N.self_attn.q_proj.weight``, ``audio_embeddings.weight``,
...; the table in ``omnivoice.gguf.names``) and shapes (ggml ne = reversed torch shape).
``codebook_layer_offsets`` is dropped: its values go to the ``omnivoice.codebook_layer_offsets`` metadata array.

Storage types by ``--quant`` (norms are always F32): the schemes of ``omnivoice.quantize`` (f32, f16, bf16,
q8_0 and the K-quants q4_k_m, q5_k_m, q6_k, ...: matrices, embeddings, bumped layers, F16 for rows that do not
split into blocks), the same policy as omnivoice.cpp's quantizer, so a K-quant file here has their tensor types.
Q8_0 and the K-quants are ggml's own encodings (K-quants through the binding's ggml_quantize_chunk).
"""

from __future__ import annotations

import sys

import numpy as np

from ..gguf import keys as K, names as N
from .checkpoint import Checkpoint, require
from .errors import CheckpointError, ConversionError, raise_problems
from ..gguf.writer import ENCODED, OutTensor
from ..quantize import (F16, F32, QUANTIZATION_VERSION, SCHEMES, Scheme, encode_ggml, fallback_note, scheme,
                        tensor_type)
from .tokenizer import TokenizerData, read_tokenizer

QUANTS = tuple(SCHEMES)
OFFSETS = N.LM_CODEBOOK_OFFSETS


def lm_hparams(config: dict) -> dict:
    """Hyper-parameters the graph needs, read from config.json (and its llm_config)."""
    where, lw = "config.json", "config.json llm_config"
    llm = config["llm_config"]
    hidden = require(llm, "hidden_size", lw)
    heads = require(llm, "num_attention_heads", lw)
    head_dim = llm.get("head_dim") or hidden // heads
    rope = llm.get("rope_parameters") or {}
    theta = rope.get("rope_theta", llm.get("rope_theta"))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool):
        raise CheckpointError(f"{lw}: rope_parameters.rope_theta (or rope_theta) is missing")
    if rope.get("rope_type", "default") != "default":
        raise CheckpointError(f"{lw}: rope_type {rope.get('rope_type')!r} is not supported (expected 'default')")
    if llm.get("attention_bias"):
        raise CheckpointError(f"{lw}: attention_bias is true; OmniVoice's Qwen3 has no attention biases")
    weights = config.get("audio_codebook_weights") or [8, 8, 6, 6, 4, 4, 2, 2]
    n_cb = require(config, "num_audio_codebook", where)
    if len(weights) != n_cb:
        raise CheckpointError(f"{where}: audio_codebook_weights has {len(weights)} entries, expected {n_cb}")
    return {
        "hidden": hidden, "layers": require(llm, "num_hidden_layers", lw), "heads": heads,
        "kv_heads": require(llm, "num_key_value_heads", lw), "head_dim": head_dim,
        "ffn": require(llm, "intermediate_size", lw), "context": require(llm, "max_position_embeddings", lw),
        "rms_eps": float(require(llm, "rms_norm_eps", lw, (int, float))), "rope_theta": float(theta),
        "vocab": require(llm, "vocab_size", lw), "tie": bool(llm.get("tie_word_embeddings", True)),
        "n_codebooks": n_cb, "audio_vocab": require(config, "audio_vocab_size", where),
        "mask_id": require(config, "audio_mask_id", where), "codebook_weights": [float(w) for w in weights],
    }


def lm_inventory(hp: dict) -> list[tuple[str, tuple[int, ...]]]:
    """Every tensor the LM GGUF holds, with its torch shape, in file order."""
    d, hd, L = hp["hidden"], hp["head_dim"], hp["layers"]
    inv = [(N.LM_TOKEN_EMBD, (hp["vocab"], d))]
    for i in range(L):
        inv += [(N.layer(name, i), shape) for name, shape in (
            (N.LM_ATTN_Q, (hp["heads"] * hd, d)),
            (N.LM_ATTN_K, (hp["kv_heads"] * hd, d)),
            (N.LM_ATTN_V, (hp["kv_heads"] * hd, d)),
            (N.LM_ATTN_OUT, (d, hp["heads"] * hd)),
            (N.LM_ATTN_Q_NORM, (hd,)),
            (N.LM_ATTN_K_NORM, (hd,)),
            (N.LM_FFN_GATE, (hp["ffn"], d)),
            (N.LM_FFN_UP, (hp["ffn"], d)),
            (N.LM_FFN_DOWN, (d, hp["ffn"])),
            (N.LM_ATTN_NORM, (d,)),
            (N.LM_FFN_NORM, (d,)),
        )]
    n_audio = hp["n_codebooks"] * hp["audio_vocab"]
    inv += [(N.LM_OUTPUT_NORM, (d,)), (N.LM_AUDIO_EMBD, (n_audio, d)), (N.LM_AUDIO_HEADS, (n_audio, d))]
    return inv


def _scheme(quant: str) -> Scheme:
    try:
        return scheme(quant)
    except ValueError as e:
        raise ConversionError(str(e)) from None


def storage_type(name: str, shape: tuple[int, ...], quant: str, n_layers: int = 0) -> str:
    """GGUF type of one LM tensor (torch-order `shape`) under ``quant`` (see the module doc)."""
    return tensor_type(name, tuple(reversed(shape)), _scheme(quant), n_layers) or "F32"


def _out_tensor(ck: Checkpoint, name: str, shape: tuple[int, ...], qtype: str) -> OutTensor:
    def values() -> np.ndarray:
        return ck.lm.get(name).astype(np.float32)

    if qtype in ENCODED:
        return OutTensor(name, shape, qtype, values, name)
    return OutTensor(name, shape, qtype, lambda: encode_ggml(values(), qtype), name, raw=True)


def _codebook_offsets(ck: Checkpoint, hp: dict) -> list[int]:
    n = hp["n_codebooks"]
    if OFFSETS not in ck.lm:
        print(f"warning: {OFFSETS} is absent; using k * {hp['audio_vocab']}", file=sys.stderr)
        return [k * hp["audio_vocab"] for k in range(n)]
    off = ck.lm.get(OFFSETS)
    if off.shape != (n,):
        raise CheckpointError(f"{ck.root / 'model.safetensors'}: {OFFSETS} has shape {off.shape}, expected ({n},)")
    return [int(v) for v in off]


def plan_lm(ck: Checkpoint, quant: str) -> tuple[list[tuple], list[OutTensor], TokenizerData]:
    """Metadata and tensors of the LM GGUF; raises CheckpointError before anything is written."""
    hp = lm_hparams(ck.config)
    inv = lm_inventory(hp)
    problems = []
    for name, shape in inv:
        if name not in ck.lm:
            problems.append(f"{name} is missing")
        elif ck.lm.shape(name) != shape:
            problems.append(f"{name} has shape {list(ck.lm.shape(name))}, expected {list(shape)}")
    raise_problems(problems, f"{ck.root}: LM weights do not match config.json")
    known = {n for n, _ in inv} | {OFFSETS}
    extra = [n for n in ck.lm.names() if n not in known]
    if extra:
        print(f"warning: dropping {len(extra)} unexpected LM tensor(s): {', '.join(extra[:5])}", file=sys.stderr)
    tok = read_tokenizer(ck.tokenizer_json, ck.tokenizer_config, hp["vocab"], str(ck.root / "tokenizer.json"))
    specials = {}
    for key, text in K.SPECIAL_TOKENS.items():
        if text not in tok.added:
            raise CheckpointError(f"{ck.root / 'tokenizer.json'}: added token {text!r} is missing")
        specials[key] = tok.added[text]
    s = _scheme(quant)
    kv: list[tuple] = [
        (K.GENERAL_NAME, "OmniVoice", "str"),
        (K.GENERAL_FILE_TYPE, s.file_type, "u32"),
        (K.LM_BLOCK_COUNT, hp["layers"], "u32"),
        (K.LM_CONTEXT_LENGTH, hp["context"], "u32"),
        (K.LM_EMBEDDING_LENGTH, hp["hidden"], "u32"),
        (K.LM_FEED_FORWARD_LENGTH, hp["ffn"], "u32"),
        (K.LM_HEAD_COUNT, hp["heads"], "u32"),
        (K.LM_HEAD_COUNT_KV, hp["kv_heads"], "u32"),
        (K.LM_KEY_LENGTH, hp["head_dim"], "u32"),
        (K.LM_VALUE_LENGTH, hp["head_dim"], "u32"),
        (K.LM_RMS_EPS, hp["rms_eps"], "f32"),
        (K.LM_ROPE_FREQ_BASE, hp["rope_theta"], "f32"),
        (K.LM_VOCAB_SIZE, hp["vocab"], "u32"),
        (K.TIE_WORD_EMBEDDINGS, hp["tie"], "bool"),
        (K.NUM_AUDIO_CODEBOOK, hp["n_codebooks"], "u32"),
        (K.AUDIO_VOCAB_SIZE, hp["audio_vocab"], "u32"),
        (K.AUDIO_MASK_ID, hp["mask_id"], "u32"),
        (K.AUDIO_CODEBOOK_WEIGHTS, hp["codebook_weights"], "[f32]"),
        (K.CODEBOOK_LAYER_OFFSETS, _codebook_offsets(ck, hp), "[u32]"),
        *[(key, tid, "u32") for key, tid in specials.items()],
        (K.TOKENIZER_MODEL, "gpt2", "str"),
        (K.TOKENIZER_PRE, "qwen2", "str"),
        (K.TOKENIZER_TOKENS, tok.tokens, "[str]"),
        (K.TOKENIZER_TOKEN_TYPE, tok.token_types, "[i32]"),
        (K.TOKENIZER_MERGES, tok.merges, "[str]"),
    ]
    for key, tid in ((K.TOKENIZER_BOS_ID, tok.bos_id), (K.TOKENIZER_EOS_ID, tok.eos_id), (K.TOKENIZER_PAD_ID, tok.pad_id)):
        if tid is not None:
            kv.append((key, tid, "u32"))
    kv += [
        (K.TOKENIZER_ADD_BOS, False, "bool"),
        (K.TOKENIZER_PRETOKENIZE_REGEX, tok.pretokenize_regex or "", "str"),
        (K.TOKENIZER_NORMALIZER, tok.normalizer, "str"),
    ]
    if s.base not in (F32, F16, "BF16"):
        kv.append((K.GENERAL_QUANTIZATION_VERSION, QUANTIZATION_VERSION, "u32"))
    tensors = [_out_tensor(ck, name, shape, storage_type(name, shape, quant, hp["layers"])) for name, shape in inv]
    note = fallback_note(((name, tuple(reversed(shape))) for name, shape in inv), s, hp["layers"])
    if note:
        print(f"warning: {ck.root}: {note}", file=sys.stderr)
    return kv, tensors, tok
