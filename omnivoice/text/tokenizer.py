"""Qwen2 byte-level BPE tokenizer in pure Python, id-exact with Hugging Face `tokenizers`.

The pipeline is the one of the Qwen2/Qwen3 tokenizer.json:
  1. added tokens (special or not) are cut out of the raw text first, leftmost-longest;
  2. every other segment is NFC-normalized, then split by the Qwen2 pre-tokenizer regex;
  3. each piece is mapped byte -> printable unicode (GPT-2's table) and merged by merge rank.

The regex needs \\p{L}, \\p{N} and Oniguruma's \\s; the standard `re` module has none of them, so the classes are
spelled out from unicode_classes.py (probed from `tokenizers` itself, so the Unicode version matches too).
"""

from __future__ import annotations

import heapq
import json
import re
import unicodedata
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..gguf.keys import QWEN2_PRETOKENIZE_REGEX
from ..gguf.reader import read_gguf_metadata
from .unicode_classes import LETTER_RANGES, NUMBER_RANGES, SPACE_RANGES

# GGUF token types (llama.cpp's llama_token_type).
TOKEN_TYPE_NORMAL = 1
TOKEN_TYPE_UNKNOWN = 2
TOKEN_TYPE_CONTROL = 3  # added token, special=True
TOKEN_TYPE_USER_DEFINED = 4  # added token, special=False
TOKEN_TYPE_UNUSED = 5
TOKEN_TYPE_BYTE = 6

# Pieces at most this long are merged by a plain scan; longer ones (long whitespace runs) by a heap.
_SHORT_PIECE = 48
_CACHE_LIMIT = 200_000


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


# The split regex of Qwen2/Qwen3 tokenizer.json files, in Oniguruma syntax (what a GGUF's
# omnivoice.tokenizer.pretokenize_regex holds, so its home is the format's key table).
QWEN2_SPLIT_REGEX = QWEN2_PRETOKENIZE_REGEX


def _char_class(ranges: Iterable[Tuple[int, int]]) -> str:
    parts = []
    for lo, hi in ranges:
        parts.append(re.escape(chr(lo)) if lo == hi else f"{re.escape(chr(lo))}-{re.escape(chr(hi))}")
    return "".join(parts)


def qwen2_pretokenizer_pattern() -> "re.Pattern[str]":
    """The Qwen2 split regex, rewritten for `re` with explicit \\p{L}, \\p{N}, \\s classes.

    Original: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*
              |\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
    """
    L, N, S = _char_class(LETTER_RANGES), _char_class(NUMBER_RANGES), _char_class(SPACE_RANGES)
    pat = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
        rf"|[^\r\n{L}{N}]?[{L}]+"
        rf"|[{N}]"
        rf"| ?[^{S}{L}{N}]+[\r\n]*"
        rf"|[{S}]*[\r\n]+"
        rf"|[{S}]+(?![^{S}])"
        rf"|[{S}]+"
    )
    return re.compile(pat)


def _walk_pretokenizers(node) -> List[dict]:
    if not isinstance(node, dict):
        return []
    out = [node]
    for child in node.get("pretokenizers", []) or []:
        out.extend(_walk_pretokenizers(child))
    return out


class Tokenizer:
    """Qwen2 byte-level BPE: `encode(text) -> list[int]`, `decode(ids) -> str`.

    Build it with `Tokenizer.from_gguf(path)` (the LM GGUF's tokenizer.ggml.* keys), `Tokenizer.from_tokenizer_json`
    (a Hugging Face tokenizer.json) or the constructor from plain lists.
    """

    def __init__(self, tokens: Sequence[str], token_types: Sequence[int], merges: Sequence[str],
                 source: str = "<lists>") -> None:
        """tokens: strings in id order (byte-level form, added tokens verbatim); token_types: GGUF token types
        (1 normal, 3 control = added special, 4 user-defined = added non-special); merges: "a b" strings in
        rank order. `source` names where they came from, for error messages."""
        if len(tokens) != len(token_types):
            raise ValueError(f"{source}: {len(tokens)} tokens but {len(token_types)} token types")
        self.source = source
        self.tokens: List[str] = list(tokens)
        self.token_types: List[int] = [int(t) for t in token_types]
        self.vocab: Dict[str, int] = {}
        self.added: Dict[str, int] = {}
        self.special_ids = set()
        for i, (tok, tt) in enumerate(zip(self.tokens, self.token_types)):
            if tt in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED):
                self.added[tok] = i
                if tt == TOKEN_TYPE_CONTROL:
                    self.special_ids.add(i)
            elif tt in (TOKEN_TYPE_NORMAL, TOKEN_TYPE_BYTE, TOKEN_TYPE_UNUSED, TOKEN_TYPE_UNKNOWN):
                self.vocab.setdefault(tok, i)
            else:
                raise ValueError(f"{source}: token {i} ({tok!r}) has unknown token type {tt} "
                                 "(expected 1 normal, 3 control or 4 user-defined)")
        self._b2u = bytes_to_unicode()
        self._u2b = {u: b for b, u in self._b2u.items()}
        missing = [u for u in self._b2u.values() if u not in self.vocab]
        if missing:
            raise ValueError(f"{source}: vocabulary lacks byte tokens {missing[:8]} (not a byte-level BPE vocab)")
        self.merge_ranks: Dict[Tuple[str, str], int] = {}
        for rank, m in enumerate(merges):
            a, sep, b = m.partition(" ")
            if not sep or not a or not b or " " in b:
                raise ValueError(f"{source}: merge {rank} {m!r} is not of the form 'left right'")
            if a + b not in self.vocab:
                raise ValueError(f"{source}: merge {rank} {m!r} makes {a + b!r}, which is not in the vocabulary")
            self.merge_ranks.setdefault((a, b), rank)
        self._pattern = qwen2_pretokenizer_pattern()
        # Longest first so that the alternation is leftmost-longest, as tokenizers' Aho-Corasick split.
        if self.added:
            alts = sorted(self.added, key=lambda t: (-len(t), t))
            self._added_re: Optional[re.Pattern[str]] = re.compile("|".join(re.escape(t) for t in alts))
        else:
            self._added_re = None
        self._byte_map = [self._b2u[b] for b in range(256)]
        self._cache: Dict[str, Tuple[int, ...]] = {}

    # ---------------------------------------------------------------- constructors
    @classmethod
    def from_gguf(cls, path: str) -> "Tokenizer":
        """Load from the tokenizer.ggml.* metadata of a GGUF file (model "gpt2", pre "qwen2"); omnivoice.cpp's
        files have no token types and no pre-tokenizer name: omnivoice.gguf.compat gives them."""
        from ..gguf import compat, keys as K

        keys = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
        # the keys compat tells omnivoice.cpp's files by, and derives their token types from
        meta = read_gguf_metadata(path, keys + (K.GENERAL_ARCHITECTURE, K.CODEBOOK_LAYER_OFFSETS, *K.SPECIAL_TOKENS))
        if K.TOKENIZER_TOKENS in meta and K.TOKENIZER_MERGES in meta:
            meta = compat.complete(meta, {}, path, only=(K.TOKENIZER_PRE, K.TOKENIZER_TOKEN_TYPE))
        for k in keys:
            if k not in meta:
                raise ValueError(f"{path}: GGUF metadata has no {k!r}; not an OmniVoice LM GGUF with a tokenizer")
        if meta["tokenizer.ggml.model"] != "gpt2":
            raise ValueError(f"{path}: tokenizer.ggml.model is {meta['tokenizer.ggml.model']!r}, "
                             "expected 'gpt2' (byte-level BPE)")
        if meta["tokenizer.ggml.pre"] != "qwen2":
            raise ValueError(f"{path}: tokenizer.ggml.pre is {meta['tokenizer.ggml.pre']!r}, expected 'qwen2'")
        return cls(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"],
                   meta["tokenizer.ggml.merges"], source=path)

    @classmethod
    def from_tokenizer_json(cls, path: str) -> "Tokenizer":
        """Load from a Hugging Face tokenizer.json of the Qwen2 kind (BPE model, added_tokens list)."""
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        model = data.get("model") or {}
        if model.get("type") != "BPE":
            raise ValueError(f"{path}: model.type is {model.get('type')!r}, expected 'BPE'")
        splits = [p.get("pattern", {}).get("Regex") for p in _walk_pretokenizers(data.get("pre_tokenizer"))
                  if p.get("type") == "Split"]
        if splits != [QWEN2_SPLIT_REGEX]:
            raise ValueError(f"{path}: pre_tokenizer is not the Qwen2 split regex (found {splits}); "
                             "only Qwen2-style byte-level BPE is implemented")
        if (data.get("normalizer") or {}).get("type") != "NFC":
            raise ValueError(f"{path}: normalizer is {data.get('normalizer')!r}, expected NFC")
        vocab: Dict[str, int] = model["vocab"]
        added = {int(a["id"]): a for a in data.get("added_tokens", [])}
        n = max(list(vocab.values()) + list(added)) + 1
        tokens: List[Optional[str]] = [None] * n
        types = [TOKEN_TYPE_NORMAL] * n
        for tok, i in vocab.items():
            tokens[i] = tok
        for i, a in added.items():
            if a.get("lstrip") or a.get("rstrip") or a.get("single_word") or a.get("normalized"):
                raise ValueError(f"{path}: added token {a['content']!r} uses lstrip/rstrip/single_word/normalized, "
                                 "which this tokenizer does not implement")
            tokens[i] = a["content"]
            types[i] = TOKEN_TYPE_CONTROL if a.get("special") else TOKEN_TYPE_USER_DEFINED
        holes = [i for i, t in enumerate(tokens) if t is None]
        if holes:
            raise ValueError(f"{path}: token ids {holes[:8]} have no token")
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        return cls(tokens, types, merges, source=path)  # type: ignore[arg-type]

    # ---------------------------------------------------------------- encode
    def __len__(self) -> int:
        return len(self.tokens)

    def token_to_id(self, token: str) -> int:
        """Id of a token string (added tokens verbatim, others in byte-level form); KeyError if absent."""
        if token in self.added:
            return self.added[token]
        return self.vocab[token]

    def encode(self, text: str) -> List[int]:
        """Token ids of `text`, with added/special tokens recognized; no BOS/EOS are added."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"text has a lone surrogate {text[e.start]!r} at index {e.start}: "
                             "it cannot be encoded as UTF-8") from None
        ids: List[int] = []
        if self._added_re is None:
            self._encode_segment(text, ids)
            return ids
        last = 0
        for m in self._added_re.finditer(text):
            if m.start() > last:
                self._encode_segment(text[last : m.start()], ids)
            ids.append(self.added[m.group()])
            last = m.end()
        if last < len(text):
            self._encode_segment(text[last:], ids)
        return ids

    def _encode_segment(self, segment: str, ids: List[int]) -> None:
        segment = unicodedata.normalize("NFC", segment)
        cache = self._cache
        for piece in self._pattern.findall(segment):
            got = cache.get(piece)
            if got is None:
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                got = cache[piece] = self._bpe(piece)
            ids.extend(got)

    def _bpe(self, piece: str) -> Tuple[int, ...]:
        bm = self._byte_map
        word = "".join(bm[b] for b in piece.encode("utf-8"))
        parts = self._merge_short(list(word)) if len(word) <= _SHORT_PIECE else self._merge_long(word)
        vocab = self.vocab
        return tuple(vocab[p] for p in parts)

    def _merge_short(self, parts: List[str]) -> List[str]:
        # Repeatedly merge the lowest-ranked adjacent pair, leftmost on ties (same as tokenizers' merge queue).
        ranks = self.merge_ranks
        while len(parts) > 1:
            best = None
            best_i = -1
            for i in range(len(parts) - 1):
                r = ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, best_i = r, i
            if best is None:
                break
            parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
        return parts

    def _merge_long(self, word: str) -> List[str]:
        # Same merge order as _merge_short in O(n log n): a heap of (rank, left position) over a linked list.
        ranks = self.merge_ranks
        n = len(word)
        sym = list(word)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        alive = [True] * n
        heap = []
        for i in range(n - 1):
            r = ranks.get((sym[i], sym[i + 1]))
            if r is not None:
                heap.append((r, i, sym[i], sym[i + 1]))
        heapq.heapify(heap)
        while heap:
            r, i, a, b = heapq.heappop(heap)
            j = nxt[i] if alive[i] else -1
            if j < 0 or sym[i] != a or sym[j] != b:
                continue  # stale entry: one side changed since it was pushed
            sym[i] = a + b
            alive[j] = False
            k = nxt[j]
            nxt[i] = k
            if k >= 0:
                prev[k] = i
                r2 = ranks.get((sym[i], sym[k]))
                if r2 is not None:
                    heapq.heappush(heap, (r2, i, sym[i], sym[k]))
            p = prev[i]
            if p >= 0:
                r2 = ranks.get((sym[p], sym[i]))
                if r2 is not None:
                    heapq.heappush(heap, (r2, p, sym[p], sym[i]))
        out = []
        i = 0
        while i >= 0:
            out.append(sym[i])
            i = nxt[i]
        return out

    # ---------------------------------------------------------------- decode
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`: byte-level tokens become bytes, added tokens their text; invalid UTF-8 becomes U+FFFD.

        With skip_special_tokens, added tokens of type control (special=True) are left out.
        """
        u2b = self._u2b
        out = bytearray()
        n = len(self.tokens)
        for i in ids:
            i = int(i)
            if not 0 <= i < n:
                raise ValueError(f"token id {i} is out of range for a vocabulary of {n} ({self.source})")
            if skip_special_tokens and i in self.special_ids:
                continue
            tok = self.tokens[i]
            try:
                out.extend([u2b[c] for c in tok])
            except KeyError:
                # Tokens outside the byte alphabet go through as their own UTF-8, like tokenizers' ByteLevel.
                out.extend(tok.encode("utf-8"))
        return out.decode("utf-8", errors="replace")
