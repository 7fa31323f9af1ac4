"""The .rvq container: round trip, header fields, atomic writes, and a clear error for every malformation."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from omnivoice.codec import RvqFormatError, load_rvq, read_rvq, save_rvq
from omnivoice.codec.rvq_format import HEADER_SIZE


@pytest.fixture
def codes(rng) -> np.ndarray:
    return rng.integers(0, 1024, (8, int(rng.integers(1, 60))))


def test_round_trip(tmp_path, codes):
    path = tmp_path / "clip.rvq"
    save_rvq(path, codes, ref_rms=0.0625)
    back = read_rvq(path)
    assert back.codes.dtype == np.int32
    np.testing.assert_array_equal(back.codes, codes)
    np.testing.assert_array_equal(load_rvq(path), codes)
    assert (back.sample_rate, back.frame_rate, back.codebook_size, back.ref_rms) == (24000, 25.0, 1024, 0.0625)
    assert back.hop_length == 960 and back.duration == pytest.approx(codes.shape[1] / 25)
    assert path.stat().st_size == HEADER_SIZE + 4 * codes.size


def test_layout_is_the_documented_one(tmp_path):
    codes = np.arange(8 * 3, dtype=np.int64).reshape(8, 3)
    path = tmp_path / "x.rvq"
    save_rvq(path, codes)
    blob = path.read_bytes()
    magic, version, header, n_cb, n_fr, sr, fr, cb, rms, reserved = struct.unpack_from("<4sIIIIIfIfI", blob)
    assert (magic, version, header, n_cb, n_fr, sr, fr, cb, reserved) == (b"ORVQ", 1, 40, 8, 3, 24000, 25.0, 1024, 0)
    assert math.isnan(rms) and read_rvq(path).ref_rms is None
    # codebook-major int32 little-endian
    assert np.frombuffer(blob[40:], "<i4").tolist() == list(range(24))


def test_write_is_atomic_and_replaces(tmp_path, codes):
    path = tmp_path / "clip.rvq"
    path.write_bytes(b"old")
    save_rvq(path, codes)
    np.testing.assert_array_equal(load_rvq(path), codes)
    with pytest.raises(ValueError, match=r"\[0, 1024\)"):
        save_rvq(path, np.full((8, 2), 5000))
    np.testing.assert_array_equal(load_rvq(path), codes)  # a failed write leaves the old file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.rvq"]


@pytest.mark.parametrize("bad, error, match", [
    (np.zeros((8, 2), np.float32), TypeError, "integers"),
    (np.zeros(16, np.int32), ValueError, "shape"),
    (np.zeros((8, 0), np.int32), ValueError, "shape"),
    (np.full((8, 2), -1), ValueError, r"\[0, 1024\)"),
])
def test_save_rejects_bad_codes(tmp_path, bad, error, match):
    with pytest.raises(error, match=match):
        save_rvq(tmp_path / "x.rvq", bad)
    assert not (tmp_path / "x.rvq").exists()


def _valid(tmp_path, codes) -> bytes:
    save_rvq(tmp_path / "ok.rvq", codes)
    return (tmp_path / "ok.rvq").read_bytes()


@pytest.mark.parametrize("mutate, match", [
    (lambda b: b"RIFF" + b[4:], "not a .rvq file"),
    (lambda b: b[:20], "too short"),
    (lambda b: b[:-4], "needs exactly"),
    (lambda b: b + b"\0\0\0\0", "needs exactly"),
    (lambda b: b[:4] + struct.pack("<I", 2) + b[8:], "version 2"),
    (lambda b: b[:8] + struct.pack("<I", 12) + b[12:], "header size"),
    (lambda b: b[:16] + struct.pack("<I", 0) + b[20:], "empty"),
    (lambda b: b[:28] + struct.pack("<I", 4) + b[32:], r"\[0, 4\)"),
    (lambda b: b[:24] + struct.pack("<f", 0.0) + b[28:], "frame_rate"),
])
def test_read_rejects_malformed_files(tmp_path, codes, mutate, match):
    path = tmp_path / "bad.rvq"
    path.write_bytes(mutate(_valid(tmp_path, np.maximum(codes, 5))))
    with pytest.raises(RvqFormatError, match=match) as e:
        read_rvq(path)
    assert str(path) in str(e.value)


def test_read_skips_a_larger_header(tmp_path, codes):
    blob = _valid(tmp_path, codes)
    longer = blob[:8] + struct.pack("<I", 48) + blob[12:40] + b"\xff" * 8 + blob[40:]
    (tmp_path / "v.rvq").write_bytes(longer)
    np.testing.assert_array_equal(load_rvq(tmp_path / "v.rvq"), codes)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such"):
        load_rvq(tmp_path / "none.rvq")
