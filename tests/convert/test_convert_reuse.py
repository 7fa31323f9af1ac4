"""A second conversion into the same folder keeps the codec file when it was made from the same codec weights,
and rewrites it when those weights changed (the codec GGUF records a hash of its sources)."""

from __future__ import annotations

import shutil

from omnivoice.gguf import keys as K
from omnivoice.convert import CODEC_FILENAME, convert_checkpoint
from omnivoice.convert.source import source_digest
from omnivoice.gguf import read_gguf_metadata


def test_second_weight_type_keeps_the_codec_file(tmp_path, tiny_ckpt):
    out = tmp_path / "models"
    _, codec = convert_checkpoint(tiny_ckpt, out, "f32", progress=False)
    before = codec.stat()
    assert read_gguf_metadata(str(codec), [K.SOURCE_SHA256])[K.SOURCE_SHA256] == \
        source_digest(tiny_ckpt, ("codec",))
    lm, codec2 = convert_checkpoint(tiny_ckpt, out, "q8_0", progress=False)
    after = codec2.stat()
    assert codec2 == codec and lm.name == "omnivoice-base-Q8_0.gguf"
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_changed_codec_weights_rewrite_the_codec_file(tmp_path, tiny_ckpt):
    ck = tmp_path / "ck"
    shutil.copytree(tiny_ckpt, ck)
    out = tmp_path / "models"
    _, codec = convert_checkpoint(ck, out, "f32", progress=False)
    first = codec.read_bytes()
    cfg = ck / "audio_tokenizer" / "config.json"
    cfg.write_text(cfg.read_text() + "\n")  # same settings, other bytes: a new source
    convert_checkpoint(ck, out, "f16", progress=False)
    assert read_gguf_metadata(str(out / CODEC_FILENAME), [K.SOURCE_SHA256])[K.SOURCE_SHA256] == \
        source_digest(ck, ("codec",))
    assert (out / CODEC_FILENAME).read_bytes() != first
