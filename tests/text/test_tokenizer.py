"""Tokenizer: ids and text equal Hugging Face `tokenizers` (live) and transformers (golden) on a multilingual corpus."""

import json
import os
import random
import runpy
import time
import unicodedata

import pytest
from text_golden import ROOT, check_digest, load_golden_json
from text_corpus import CORPUS, random_texts

from omnivoice.text import Tokenizer
from omnivoice.gguf import GGUFFormatError, read_gguf_metadata
from omnivoice.text.tokenizer import (TOKEN_TYPE_CONTROL, TOKEN_TYPE_NORMAL, TOKEN_TYPE_USER_DEFINED,
                                     bytes_to_unicode)
from omnivoice.text.unicode_classes import LETTER_RANGES, NUMBER_RANGES, SPACE_RANGES


def test_corpus_ids_equal_hf(tokenizer, hf_tokenizer):
    for text in CORPUS:
        assert tokenizer.encode(text) == hf_tokenizer.encode(text).ids, repr(text)


def test_random_texts_ids_equal_hf(tokenizer, hf_tokenizer):
    seed = random.randrange(1 << 30)
    for text in random_texts(seed, 400):
        assert tokenizer.encode(text) == hf_tokenizer.encode(text).ids, (seed, repr(text))


def test_long_pieces_equal_hf(tokenizer, hf_tokenizer):
    # Pieces over 48 byte-level characters take the heap merge path.
    rng = random.Random()
    alphabet = "abcdefghijklmnopqrstuvwxyzéüñ你好日本語한국어абв"
    for _ in range(30):
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(40, 400)))
        spaces = "".join(rng.choice(" \t\u3000\n") for _ in range(rng.randint(40, 300)))
        for text in (word, spaces + "x", "z" + spaces):
            assert tokenizer.encode(text) == hf_tokenizer.encode(text).ids, repr(text)


def test_heap_merge_equals_scan_merge(tokenizer):
    rng = random.Random()
    chars = [tokenizer.tokens[i] for i in range(256)] + ["Ġ", "a", "e", "t", "Ġt"]
    for _ in range(300):
        word = "".join(rng.choice(chars[:256]) if rng.random() < 0.3 else rng.choice("abcdeĠthinrs")
                       for _ in range(rng.randint(2, 120)))
        assert tokenizer._merge_long(word) == tokenizer._merge_short(list(word))


def test_ids_equal_transformers_golden(tokenizer, vocab_digest):
    g = load_golden_json("text_tokenizer.json")
    check_digest(g["vocab_digest"], vocab_digest)
    assert len(g["cases"]) >= 300
    for c in g["cases"]:
        assert tokenizer.encode(c["text"]) == c["ids"], repr(c["text"])
        # The reference tokenizes the style prefix with add_special_tokens=True: that must add nothing.
        assert c["same_with_special"]


def test_known_ids(tokenizer):
    # From NOTES.md (the real OmniVoice tokenizer).
    assert tokenizer.encode("hello") == [14990]
    assert tokenizer.encode(" world") == [1879]
    assert tokenizer.encode("English") == [22574]
    names = ["<|denoise|>", "<|lang_start|>", "<|lang_end|>", "<|instruct_start|>", "<|instruct_end|>",
             "<|text_start|>", "<|text_end|>"]
    assert tokenizer.encode("".join(names)) == list(range(151669, 151676))
    assert len(tokenizer) == 151676


def test_decode_equals_hf(tokenizer, hf_tokenizer):
    rng = random.Random()
    n = len(tokenizer)
    for _ in range(1500):
        ids = [rng.randrange(n) if rng.random() < 0.9 else rng.randrange(151643, n) for _ in range(rng.randint(0, 12))]
        for skip in (False, True):
            assert tokenizer.decode(ids, skip_special_tokens=skip) == hf_tokenizer.decode(ids, skip_special_tokens=skip), ids


def test_decode_round_trip(tokenizer, hf_tokenizer):
    for text in CORPUS + random_texts(random.randrange(1 << 30), 100):
        ids = tokenizer.encode(text)
        # NFC applies to the segments between added tokens, as in tokenizers.
        assert tokenizer.decode(ids) == hf_tokenizer.decode(ids, skip_special_tokens=False)
        if "<|" not in text and "<t" not in text and "</" not in text:
            assert tokenizer.decode(ids) == unicodedata.normalize("NFC", text)


def test_from_gguf_equals_tokenizer_json(tokenizer, gguf_path):
    g = Tokenizer.from_gguf(gguf_path)
    assert g.tokens == tokenizer.tokens
    assert g.token_types == tokenizer.token_types
    assert g.merge_ranks == tokenizer.merge_ranks
    assert g.token_types[151643] == TOKEN_TYPE_CONTROL and g.token_types[151657] == TOKEN_TYPE_USER_DEFINED
    assert g.token_types[0] == TOKEN_TYPE_NORMAL
    for text in CORPUS[:20]:
        assert g.encode(text) == tokenizer.encode(text)


def test_gguf_metadata_reader(tmp_path):
    # Every value type, compared with gguf-py's own reader.
    import gguf
    import numpy as np

    rng = random.Random()
    path = str(tmp_path / "kv.gguf")
    w = gguf.GGUFWriter(path, "omnivoice-lm")
    w.add_uint8("t.u8", rng.randrange(256))
    w.add_int8("t.i8", rng.randrange(-128, 128))
    w.add_uint16("t.u16", rng.randrange(1 << 16))
    w.add_int16("t.i16", rng.randrange(-(1 << 15), 1 << 15))
    w.add_uint32("t.u32", rng.randrange(1 << 32))
    w.add_int32("t.i32", rng.randrange(-(1 << 31), 1 << 31))
    w.add_uint64("t.u64", rng.randrange(1 << 64))
    w.add_int64("t.i64", rng.randrange(-(1 << 63), 1 << 63))
    w.add_float32("t.f32", rng.random())
    w.add_float64("t.f64", rng.random())
    w.add_bool("t.bool", rng.random() < 0.5)
    w.add_string("t.str", "héllo 你好 " + str(rng.random()))
    w.add_array("t.arr_i32", [rng.randrange(-1000, 1000) for _ in range(rng.randint(1, 50))])
    w.add_array("t.arr_f32", [rng.random() for _ in range(rng.randint(1, 50))])
    w.add_array("t.arr_str", ["".join(rng.choice("abĠ你 ") for _ in range(rng.randint(0, 9))) for _ in range(40)])
    w.add_tensor("dummy", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta = read_gguf_metadata(path)
    reader = gguf.GGUFReader(path)
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}  # reader's own pseudo-keys
    assert set(meta) == set(fields)
    for key, field in fields.items():
        want = field.contents()
        if key in ("t.f32", "t.arr_f32"):
            assert np.array_equal(np.float32(meta[key]), np.float32(want)), key
        else:
            assert meta[key] == want, key
    only = read_gguf_metadata(path, ["t.str", "absent.key"])
    assert only == {"t.str": meta["t.str"]}


def test_unicode_classes_match_tokenizers_regex():
    # The committed tables must be what the tokenizers regex engine itself says, for every code point.
    gen = runpy.run_path(os.path.join(ROOT, "tools", "gen_text_tables.py"))
    live = gen["unicode_class_ranges"]()
    assert tuple(live["LETTER_RANGES"]) == LETTER_RANGES
    assert tuple(live["NUMBER_RANGES"]) == NUMBER_RANGES
    assert tuple(live["SPACE_RANGES"]) == SPACE_RANGES


def test_speed_10k_chars(qwen_json):
    tk = Tokenizer.from_tokenizer_json(qwen_json)  # cold cache
    text = "".join(random_texts(random.randrange(1 << 30), 800, 40))[:10000]
    t0 = time.perf_counter()
    tk.encode(text)
    assert time.perf_counter() - t0 < 0.5


# ------------------------------------------------------------------ bad input
def test_bad_inputs(tokenizer, tmp_path):
    with pytest.raises(TypeError, match="str"):
        tokenizer.encode(b"bytes")
    with pytest.raises(ValueError, match="out of range"):
        tokenizer.decode([len(tokenizer)])
    with pytest.raises(ValueError, match="out of range"):
        tokenizer.decode([-1])
    with pytest.raises(ValueError, match="lone surrogate .* at index 5"):
        tokenizer.encode("lone \ud800 surrogate")


def test_bad_construction():
    b2u = bytes_to_unicode()
    byte_tokens = [b2u[b] for b in range(256)]
    types = [1] * 256
    with pytest.raises(ValueError, match="token types"):
        Tokenizer(byte_tokens, types[:-1], [])
    with pytest.raises(ValueError, match="unknown token type 9"):
        Tokenizer(byte_tokens, [9] + types[1:], [])
    with pytest.raises(ValueError, match="byte tokens"):
        Tokenizer(byte_tokens[1:], types[1:], [])
    with pytest.raises(ValueError, match="not of the form"):
        Tokenizer(byte_tokens, types, ["ab"])
    with pytest.raises(ValueError, match="not in the vocabulary"):
        Tokenizer(byte_tokens, types, ["a b"])
    tk = Tokenizer(byte_tokens + ["ab", "<x>"], types + [1, 3], ["a b"])
    assert tk.encode("ab<x>abc") == [256, 257, 256, byte_tokens.index("c")]


def test_bad_gguf(tmp_path, gguf_path):
    p = tmp_path / "not.gguf"
    p.write_bytes(b"NOPE" + b"\0" * 40)
    with pytest.raises(GGUFFormatError, match="not a GGUF file"):
        Tokenizer.from_gguf(str(p))
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFFormatError, match="empty"):
        Tokenizer.from_gguf(str(empty))
    data = open(gguf_path, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(GGUFFormatError, match="truncated"):
        Tokenizer.from_gguf(str(cut))

    import gguf

    nokeys = str(tmp_path / "nokeys.gguf")
    w = gguf.GGUFWriter(nokeys, "omnivoice-lm")
    w.add_tokenizer_model("gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="tokenizer.ggml.pre"):
        Tokenizer.from_gguf(nokeys)

    wrong = str(tmp_path / "wrong.gguf")
    w = gguf.GGUFWriter(wrong, "omnivoice-lm")
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(["a"])
    w.add_token_types([1])
    w.add_token_merges(["x y"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ValueError, match="expected 'gpt2'"):
        Tokenizer.from_gguf(wrong)


def test_tokenizer_json_must_be_qwen2(tmp_path):
    from omnivoice.text.tokenizer import QWEN2_SPLIT_REGEX

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    vocab["ab"] = 256

    def write(regex, normalizer="NFC"):
        data = {
            "normalizer": {"type": normalizer},
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            "model": {"type": "BPE", "vocab": vocab, "merges": [["a", "b"]]},
            "added_tokens": [{"id": 257, "content": "<x>", "special": True, "normalized": False}],
        }
        p = tmp_path / "tokenizer.json"
        p.write_text(json.dumps(data), encoding="utf-8")
        return str(p)

    tk = Tokenizer.from_tokenizer_json(write(QWEN2_SPLIT_REGEX))
    assert tk.encode("ab<x>") == [256, 257]
    with pytest.raises(ValueError, match="not the Qwen2 split regex"):
        Tokenizer.from_tokenizer_json(write(r"\s+|\S+"))
    with pytest.raises(ValueError, match="expected NFC"):
        Tokenizer.from_tokenizer_json(write(QWEN2_SPLIT_REGEX, "NFKC"))
