"""Read the Hugging Face BPE tokenizer (tokenizer.json + tokenizer_config.json) into GGUF's tokenizer arrays."""

from __future__ import annotations

from dataclasses import dataclass

from ..gguf import keys as K
from .errors import CheckpointError

TOKEN_TYPE_UNUSED = 5  # padding rows of an embedding larger than the tokenizer


@dataclass
class TokenizerData:
    """The text tokenizer as GGUF stores it."""

    tokens: list[str]          # id order; byte-level strings for BPE tokens, plain text for added tokens
    token_types: list[int]     # gguf TokenType per id
    merges: list[str]          # "left right", rank order
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None
    pretokenize_regex: str
    normalizer: str
    added: dict[str, int]      # added token text -> id


def _token_text(value, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        value = value.get("content")
    if not isinstance(value, str):
        raise CheckpointError(f"{where}: expected a token string, got {value!r}")
    return value


def _find_regex(pre: dict | None) -> str:
    """The Split regex of the pre-tokenizer (Qwen2: a Sequence of Split + ByteLevel)."""
    if not pre:
        return ""
    if pre.get("type") == "Split":
        pat = pre.get("pattern") or {}
        return pat.get("Regex") or pat.get("String") or ""
    if pre.get("type") == "Sequence":
        for p in pre.get("pretokenizers") or []:
            found = _find_regex(p)
            if found:
                return found
    return ""


def read_tokenizer(tok_json: dict, tok_cfg: dict, vocab_size: int, where: str = "tokenizer.json") -> TokenizerData:
    """Build id-ordered token, type and merge lists; every id below ``vocab_size`` gets exactly one token."""
    model = tok_json.get("model") or {}
    if model.get("type") != "BPE":
        raise CheckpointError(f"{where}: model.type is {model.get('type')!r}, expected 'BPE'")
    vocab = model.get("vocab")
    if not isinstance(vocab, dict) or not vocab:
        raise CheckpointError(f"{where}: model.vocab is missing or empty")
    tokens: list[str | None] = [None] * vocab_size
    types = [K.TOKEN_TYPE_NORMAL] * vocab_size
    for text, i in vocab.items():
        if not isinstance(i, int) or not 0 <= i < vocab_size:
            raise CheckpointError(f"{where}: token {text!r} has id {i!r}, outside [0, {vocab_size})")
        if tokens[i] is not None:
            raise CheckpointError(f"{where}: id {i} is used by both {tokens[i]!r} and {text!r}")
        tokens[i] = text
    added: dict[str, int] = {}
    for a in tok_json.get("added_tokens") or []:
        i, text = a.get("id"), a.get("content")
        if not isinstance(i, int) or not 0 <= i < vocab_size or not isinstance(text, str):
            raise CheckpointError(f"{where}: bad added token {a!r} (vocab size {vocab_size})")
        if tokens[i] is not None and tokens[i] != text:
            raise CheckpointError(f"{where}: added token {text!r} reuses id {i} of {tokens[i]!r}")
        tokens[i] = text
        types[i] = K.TOKEN_TYPE_CONTROL if a.get("special") else K.TOKEN_TYPE_USER_DEFINED
        added[text] = i
    for i, t in enumerate(tokens):
        if t is None:
            # the embedding may be padded past the tokenizer (as in Qwen2); those rows are never produced
            tokens[i] = f"[PAD{i}]"
            types[i] = TOKEN_TYPE_UNUSED
    merges = []
    for m in model.get("merges") or []:
        if isinstance(m, str):
            parts = m.split(" ")
        elif isinstance(m, (list, tuple)):
            parts = list(m)
        else:
            parts = []
        if len(parts) != 2 or not all(isinstance(p, str) and p and " " not in p for p in parts):
            raise CheckpointError(f"{where}: bad merge entry {m!r}")
        merges.append(f"{parts[0]} {parts[1]}")
    if not merges:
        raise CheckpointError(f"{where}: model.merges is missing or empty")

    def lookup(field: str) -> int | None:
        text = _token_text(tok_cfg.get(field), f"tokenizer_config.json field {field!r}")
        if text is None:
            return None
        if text in added:
            return added[text]
        if text in vocab:
            return vocab[text]
        raise CheckpointError(f"tokenizer_config.json: {field} {text!r} is not a token of {where}")

    norm = tok_json.get("normalizer") or {}
    return TokenizerData(
        tokens=tokens,  # type: ignore[arg-type]
        token_types=types,
        merges=merges,
        bos_id=lookup("bos_token"),
        eos_id=lookup("eos_token"),
        pad_id=lookup("pad_token"),
        pretokenize_regex=_find_regex(tok_json.get("pre_tokenizer")),
        normalizer=norm.get("type", "none") if isinstance(norm, dict) else "none",
        added=added,
    )
