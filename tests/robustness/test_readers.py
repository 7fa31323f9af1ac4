"""Reader fixes of issue 14.6 and the fuzzer's tracebacks: safetensors headers of the wrong JSON types, .rvq
loudness fields that are not an RMS, an SRT cue without text."""

from __future__ import annotations

import json
import math
import struct

import numpy as np
import pytest
import soundfile as sf

from omnivoice.codec import RvqFormatError, read_rvq, save_rvq
from omnivoice.codec.rvq_format import HEADER, MAGIC
from omnivoice.convert.errors import CheckpointError
from omnivoice.convert.safetensors_reader import SafetensorsFile

from .conftest import FAST, cli, refused


def _safetensors(path, entry: dict, header_extra: dict | None = None, raw: bytes | None = None):
    body = np.arange(6, dtype=np.float32).tobytes()
    header = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, **(header_extra or {})}
    header["w"].update(entry)
    blob = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + body)
    return path


def test_a_good_header_reads(tmp_path):
    f = SafetensorsFile(_safetensors(tmp_path / "m.safetensors", {}))
    np.testing.assert_array_equal(f.get("w"), np.arange(6, dtype=np.float32).reshape(2, 3))


@pytest.mark.parametrize("entry, message", [
    ({"dtype": ["F32"]}, r"tensor 'w' has dtype \['F32'\]; expected a string"),
    ({"dtype": {"a": 1}}, r"tensor 'w' has dtype \{'a': 1\}"),
    ({"data_offsets": ["0", "24"]}, r"tensor 'w' has data_offsets \['0', '24'\]; expected \[begin, end\]"),
    ({"data_offsets": [0.0, 24.0]}, r"data_offsets \[0\.0, 24\.0\]"),
    ({"data_offsets": [0, 24.5]}, r"data_offsets \[0, 24\.5\]"),
    ({"data_offsets": [0]}, r"data_offsets \[0\]"),
    ({"data_offsets": [24, 0]}, r"needs 24 bytes, its offsets \[24, 0\) span -24"),
    ({"shape": [2.0, 3]}, r"has shape \[2\.0, 3\]; expected a list of non-negative integers"),
    ({"shape": ["2", "3"]}, r"has shape \['2', '3'\]"),
    ({"shape": [True, 6]}, r"has shape \[True, 6\]"),
    ({"shape": [-2, -3]}, r"has shape \[-2, -3\]"),
    ({"shape": "abc"}, r"has shape 'abc'"),
])
def test_header_fields_of_the_wrong_type_are_clear_errors(tmp_path, entry, message):
    with pytest.raises(CheckpointError, match=r"m\.safetensors: .*" + message):
        SafetensorsFile(_safetensors(tmp_path / "m.safetensors", entry))


@pytest.mark.parametrize("raw, message", [
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (b'{"__metadata__": [1, 2]}', "__metadata__ is not a JSON object"),
    (b'{"w": 5}', "tensor 'w' needs an object with dtype, shape and data_offsets"),
])
def test_malformed_headers_are_clear_errors(tmp_path, raw, message):
    with pytest.raises(CheckpointError, match=message):
        SafetensorsFile(_safetensors(tmp_path / "m.safetensors", {}, raw=raw))


def test_the_convert_cli_reports_a_list_as_dtype(tmp_path, tiny_checkpoint):
    """Fuzzer case safetensors:7: a TypeError traceback and exit 1 before."""
    ck = tmp_path / "ckpt"
    for f in tiny_checkpoint.rglob("*"):
        if f.is_file():
            (ck / f.relative_to(tiny_checkpoint)).parent.mkdir(parents=True, exist_ok=True)
            (ck / f.relative_to(tiny_checkpoint)).symlink_to(f)
    st = ck / "audio_tokenizer" / "model.safetensors"
    data = st.read_bytes()
    (n,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8:8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["dtype"] = [header[name]["dtype"]]
    blob = json.dumps(header).encode()
    st.unlink()
    st.write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + n:])
    refused(cli("convert", ck, "-o", tmp_path / "out", "-q"), "model.safetensors", name, "expected a string")
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


# ------------------------------------------------------------------------------------------------ .rvq ref_rms

def _rvq(path, rms_bytes: bytes):
    codes = np.zeros((8, 3), "<i4")
    head = bytearray(HEADER.pack(MAGIC, 1, 40, 8, 3, 24000, 25.0, 1024, 0.0, 0))
    head[32:36] = rms_bytes
    path.write_bytes(bytes(head) + codes.tobytes())
    return path


@pytest.mark.parametrize("rms", [math.inf, -math.inf, -0.5, b"\x00\x00\xc0\xff", b"\x01\x00\x80\x7f"])
def test_a_ref_rms_that_is_no_rms_is_refused(tmp_path, rms):
    raw = rms if isinstance(rms, bytes) else struct.pack("<f", rms)
    with pytest.raises(RvqFormatError, match=r"v\.rvq: ref_rms field is .* expected a finite RMS >= 0, or NaN"):
        read_rvq(_rvq(tmp_path / "v.rvq", raw))


def test_unknown_rms_stays_readable(tmp_path):
    """Files written so far store an unknown RMS as the NaN struct.pack gives: 0x7FC00000."""
    assert read_rvq(_rvq(tmp_path / "v.rvq", b"\x00\x00\xc0\x7f")).ref_rms is None
    assert read_rvq(_rvq(tmp_path / "w.rvq", struct.pack("<f", 0.05))).ref_rms == pytest.approx(0.05)
    save_rvq(tmp_path / "x.rvq", np.zeros((8, 3), np.int32))
    assert (tmp_path / "x.rvq").read_bytes()[32:36] == b"\x00\x00\xc0\x7f"
    assert read_rvq(tmp_path / "x.rvq").ref_rms is None


@pytest.mark.parametrize("rms", [math.inf, math.nan, -1.0])
def test_save_refuses_a_ref_rms_that_is_no_rms(tmp_path, rms):
    with pytest.raises(ValueError, match="ref_rms must be a finite RMS"):
        save_rvq(tmp_path / "x.rvq", np.zeros((8, 3), np.int32), ref_rms=rms)
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------------ SRT

def test_an_srt_cue_without_text_is_silence(model, tmp_path):
    """The Cue docstring promises silence (issue 14.6: the whole job was once refused as "text is empty")."""
    srt = tmp_path / "subs.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:00,800\nHello there.\n\n2\n00:00:01,000 --> 00:00:01,600\n\n"
                   "3\n00:00:01,700 --> 00:00:02,300\nGoodbye.\n", encoding="utf-8")
    out = tmp_path / "dub.wav"
    r = cli("tts", "--srt", srt, *model, *FAST, "-o", out)
    assert r.returncode == 0, r.stderr
    audio, rate = sf.read(out, dtype="float32")
    assert rate == 24000 and len(audio) == round(2.3 * rate)
    assert np.abs(audio[:int(0.8 * rate)]).max() > 0.01 and np.abs(audio[int(1.7 * rate):]).max() > 0.01
    assert not audio[int(0.8 * rate):int(1.7 * rate)].any()


def test_an_srt_of_empty_cues_is_a_silent_timeline(model, tmp_path):
    srt = tmp_path / "subs.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:00,500\n\n2\n00:00:00,600 --> 00:00:01,000\n", encoding="utf-8")
    out = tmp_path / "dub.wav"
    r = cli("tts", "--srt", srt, *model, *FAST, "-o", out)
    assert r.returncode == 0, r.stderr
    audio, _ = sf.read(out, dtype="float32")
    assert len(audio) == 24000 and not audio.any()
