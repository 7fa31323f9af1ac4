"""Helpers shared by the text tests: golden loading (tests/golden/text_*, written by tools/reference/goldens.py text)."""

import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(ROOT, "tests", "golden")
REGEN = ".venv-ref/bin/python tools/reference/goldens.py text"


def load_golden_json(name):
    """A text golden written by tools/reference/goldens.py text."""
    path = os.path.join(GOLDEN, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; regenerate the text goldens with: {REGEN}")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_golden_npz(name):
    """A text golden .npz written by tools/reference/goldens.py text."""
    path = os.path.join(GOLDEN, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing; regenerate the text goldens with: {REGEN}")
    return np.load(path)


def check_digest(golden_digest, digest):
    assert golden_digest == digest, (
        "the golden was made with a different tokenizer vocabulary than tests/text/qwen_files.py builds; "
        f"regenerate with: {REGEN}")
