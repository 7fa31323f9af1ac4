"""No integer of a model file's metadata is trusted before what it describes is checked: each one set to the
largest value of its type (u32: of a C int; a scalar, or the first or last item of an array) gives a clear error, or a file that
loads and runs (a key the loaders do not read). Found by tools/fuzz.py: `block_count` at 2^31 - 1 made the LM
loader build a list of that many tensor names before it reported the first missing one (seed 27), and a semantic
encoder dilation of 2^31 - 1 aborted inside ggml, whose convolutions take their padding as a 32-bit int (seed 29)."""

from __future__ import annotations

import pytest

from omnivoice.gguf import read_gguf

from ..gguf_edit import set_array_item, set_key
from .conftest import load_in_subprocess

# u32 at 2^31 - 1, the largest that passes for a C int: the value that reaches ggml's int parameters and
# overflows their arithmetic there (2^32 - 1 stops at cffi's conversion, in Python)
LARGEST = {"u8": 2**8 - 1, "u16": 2**16 - 1, "u32": 2**31 - 1, "i32": 2**31 - 1, "u64": 2**64 - 1, "i64": 2**63 - 1}


def _edits(src, out):
    """{what was set: the edited copy} for every integer scalar and both ends of every integer array."""
    f = read_gguf(str(src))
    edits = {}
    for key, t in f.types.items():
        if t in LARGEST:
            edits[f"{key} = {LARGEST[t]}"] = set_key(src, out / f"{key}.gguf", key, LARGEST[t])
        elif t.startswith("[") and t[1:-1] in LARGEST:
            for i in sorted({0, len(f.metadata[key]) - 1}):
                value = LARGEST[t[1:-1]]
                edits[f"{key}[{i}] = {value}"] = set_array_item(src, out / f"{key}-{i}.gguf", key, i, value)
    return edits


@pytest.mark.parametrize("kind", ["lm", "codec"])
def test_every_integer_key_at_its_largest(kind, tiny_gguf, tmp_path):
    edits = _edits(tiny_gguf["f32" if kind == "lm" else "codec"], tmp_path)
    assert len(edits) > 20 and ("omnivoice-lm.block_count = 2147483647" in edits or kind == "codec")
    results = load_in_subprocess(kind, list(edits.values()), timeout=300, max_gib=4)
    for what, path in edits.items():
        r = results[path.name]
        assert r["error"] in (None, "ModelFileError", "GGUFFormatError"), f"{what}: {r}"
        if r["error"]:
            key = what.split(" = ")[0].split("[")[0]
            assert str(path) in r["message"] and key.split(".")[-1] in r["message"], f"{what}: {r['message']}"
