"""Other shapes of input the converter accepts: sharded LM weights, BF16/F16 source tensors."""

from __future__ import annotations

import json
import struct

import numpy as np

from omnivoice.convert import convert_checkpoint
from omnivoice.convert.safetensors_reader import SafetensorsFile
from tests.convert.convert_helpers import link_copy


def write_safetensors(path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """Minimal writer: name -> (safetensors dtype, array of the matching byte layout)."""
    header, blobs, off = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        raw = np.ascontiguousarray(arr).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_sharded_lm_weights_convert_like_a_single_file(tmp_path, tiny_ckpt, converted):
    from safetensors.numpy import load_file, save_file

    ck = link_copy(tiny_ckpt, tmp_path / "ck", skip=("model.safetensors",))
    tensors = load_file(tiny_ckpt / "model.safetensors")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for fname, part in shards.items():
        save_file({n: tensors[n] for n in part}, ck / fname, metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {n: f for f, part in shards.items() for n in part}}
    (ck / "model.safetensors.index.json").write_text(json.dumps(index))
    lm, codec = convert_checkpoint(ck, tmp_path / "out", "q8_0", progress=False)
    assert lm.read_bytes() == converted["q8_0"][0].read_bytes()


def test_bf16_and_f16_sources_are_widened_exactly(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated bf16
    half = x.astype(np.float16)
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"a": ("BF16", bits), "b": ("F16", half), "c": ("I64", np.arange(3, dtype=np.int64))})
    f = SafetensorsFile(path)
    assert f.names() == ["a", "b", "c"] and f.shape("a") == (4, 6) and f.dtype("a") == "BF16"
    assert np.array_equal(f.get("a"), (bits.astype(np.uint32) << 16).view(np.float32))
    assert f.get("b").dtype == np.float32 and np.array_equal(f.get("b"), half.astype(np.float32))
    assert np.array_equal(f.get("c"), np.arange(3))
