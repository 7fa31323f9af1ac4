"""No integer of a model file's metadata is trusted before what it describes is checked: each one set to the
largest value of its type gives a clear error, or a file that loads and runs (a key the loaders do not read).
`block_count` at 2^31 - 1 once made the LM loader build a list of that many tensor names before it reported the
first missing one, then run out of memory (tools/fuzz.py, seed 27)."""

from __future__ import annotations

import pytest

from omnivoice.gguf import read_gguf

from ..gguf_edit import set_key
from .conftest import load_in_subprocess

LARGEST = {"u8": 2**8 - 1, "u16": 2**16 - 1, "u32": 2**32 - 1, "i32": 2**31 - 1, "u64": 2**64 - 1, "i64": 2**63 - 1}


@pytest.mark.parametrize("kind", ["lm", "codec"])
def test_every_integer_key_at_its_largest(kind, tiny_gguf, tmp_path):
    src = tiny_gguf["f32" if kind == "lm" else "codec"]
    types = read_gguf(str(src)).types
    paths = {k: set_key(src, tmp_path / f"{k}.gguf", k, LARGEST[t]) for k, t in types.items() if t in LARGEST}
    assert len(paths) > 20 and ("omnivoice-lm.block_count" in paths or kind == "codec")
    results = load_in_subprocess(kind, list(paths.values()), timeout=300, max_gib=4)
    for key, path in paths.items():
        r = results[path.name]
        assert r["error"] in (None, "ModelFileError", "GGUFFormatError"), f"{key} = {LARGEST[types[key]]}: {r}"
        if r["error"]:
            assert str(path) in r["message"] and key.split(".")[-1] in r["message"], f"{key}: {r['message']}"
