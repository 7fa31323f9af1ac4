"""Fixtures for the text front-end tests: a real Qwen tokenizer (built once per session) and the goldens."""

import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import qwen_files  # noqa: E402


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory):
    """Directory with the Qwen3 + OmniVoice tokenizer.json / tokenizer_config.json."""
    d = tmp_path_factory.mktemp("qwen_tokenizer")
    qwen_files.write_tokenizer_files(str(d))
    return str(d)


@pytest.fixture(scope="session")
def qwen_json(qwen_dir):
    return os.path.join(qwen_dir, "tokenizer.json")


@pytest.fixture(scope="session")
def vocab_digest(qwen_json):
    return qwen_files.vocab_digest(qwen_json)


@pytest.fixture(scope="session")
def hf_tokenizer(qwen_json):
    from tokenizers import Tokenizer as HFTokenizer

    return HFTokenizer.from_file(qwen_json)


@pytest.fixture(scope="session")
def tokenizer(qwen_json):
    from omnivoice.text import Tokenizer

    return Tokenizer.from_tokenizer_json(qwen_json)


@pytest.fixture(scope="session")
def gguf_path(qwen_json, tmp_path_factory):
    """A GGUF holding the tokenizer under the standard keys, written with gguf-py as the converter does."""
    import gguf

    with open(qwen_json, encoding="utf-8") as f:
        data = json.load(f)
    vocab = data["model"]["vocab"]
    n = len(vocab) + len(data["added_tokens"])
    tokens = [None] * n
    types = [gguf.TokenType.NORMAL] * n
    for tok, i in vocab.items():
        tokens[i] = tok
    for a in data["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    path = str(tmp_path_factory.mktemp("gguf") / "tok.gguf")
    w = gguf.GGUFWriter(path, "omnivoice-lm")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(151645)
    w.add_tensor("dummy", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
