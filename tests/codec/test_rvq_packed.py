"""omnivoice.cpp's headerless .rvq: the bit layout, both readers, the writer, and clear errors.

The reference layout is built here with Python integers: code j of the flattened [K, T] codes occupies bits
[11 j, 11 j + 11) of one little-endian number (omnivoice.cpp's src/rvq-file.h packs exactly so).
"""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.codec import RvqFormatError, load_rvq, read_rvq, save_rvq
from omnivoice.codec.rvq_format import FORMAT_CPP, FORMAT_OMNIVOICE
from omnivoice.codec.rvq_packed import CODE_BITS, pack_codes


def reference_bytes(codes: np.ndarray) -> bytes:
    flat = [int(c) for c in np.asarray(codes).reshape(-1)]
    value = sum(c << (CODE_BITS * j) for j, c in enumerate(flat))
    return value.to_bytes(-(-len(flat) * CODE_BITS // 8), "little")


@pytest.fixture
def codes(rng) -> np.ndarray:
    return rng.integers(0, 1024, (8, int(rng.integers(1, 40))))


def test_eleven_bits_per_code_lsb_first():
    assert CODE_BITS == 11
    codes = np.array([[1], [2], [1023], [0], [5], [1024], [2047], [7]])
    blob = pack_codes(codes)
    assert len(blob) == 11 and blob == reference_bytes(codes)
    # 1 in bits 0..10, 2 in bits 11..21 (bit 12 = byte 1's 0x10), 1023 from bit 22 (byte 2's top two bits)
    assert blob[:3] == bytes([0x01, 0x10, 0xC0])


def test_pack_matches_the_reference_layout(codes):
    assert pack_codes(codes) == reference_bytes(codes)


def test_read_their_file(tmp_path, codes):
    path = tmp_path / "voice.rvq"
    path.write_bytes(reference_bytes(codes))
    rvq = read_rvq(path)
    assert rvq.fmt == FORMAT_CPP and rvq.ref_rms is None and rvq.codes.dtype == np.int32
    np.testing.assert_array_equal(rvq.codes, codes)
    np.testing.assert_array_equal(load_rvq(path), codes)


def test_write_their_layout(tmp_path, codes):
    path = tmp_path / "voice.rvq"
    save_rvq(path, codes, ref_rms=0.05, fmt=FORMAT_CPP)
    assert path.read_bytes() == reference_bytes(codes)
    assert path.stat().st_size == 11 * codes.shape[1]


def test_other_codebook_counts_leave_zero_padding(tmp_path):
    codes = np.array([[3, 9, 1000], [4, 0, 17], [2047 // 2, 1, 2]])  # 3 x 3 x 11 = 99 bits -> 13 bytes
    path = tmp_path / "k3.rvq"
    path.write_bytes(reference_bytes(codes))
    np.testing.assert_array_equal(read_rvq(path, n_codebooks=3).codes, codes)
    with pytest.raises(RvqFormatError, match="whole number of frames"):
        read_rvq(path)  # as 8 codebooks: 104 bits is not a whole frame of 88


@pytest.mark.parametrize("mutate, match", [
    (lambda b: b[:-1], "whole number of frames"),
    (lambda b: b + b"\0", "whole number of frames"),
    (lambda b: b"", "whole number of frames"),
    (lambda b: b[:5], "whole number of frames"),
])
def test_bad_sizes(tmp_path, codes, mutate, match):
    path = tmp_path / "bad.rvq"
    path.write_bytes(mutate(reference_bytes(codes)))
    with pytest.raises(RvqFormatError, match=match) as e:
        read_rvq(path)
    assert str(path) in str(e.value) and "not a .rvq file" in str(e.value)


def test_codes_past_the_codebook(tmp_path):
    codes = np.zeros((8, 2), np.int64)
    codes[3, 1] = 1500
    path = tmp_path / "big.rvq"
    path.write_bytes(reference_bytes(codes))
    with pytest.raises(RvqFormatError, match=r"\[0, 1024\).*1500"):
        read_rvq(path)
    np.testing.assert_array_equal(read_rvq(path, codebook_size=2048).codes, codes)


def test_set_padding_bits(tmp_path):
    blob = bytearray(reference_bytes(np.ones((4, 1), np.int64)))  # 44 bits in 6 bytes
    blob[-1] |= 0x80
    path = tmp_path / "pad.rvq"
    path.write_bytes(bytes(blob))
    with pytest.raises(RvqFormatError, match="padding bits"):
        read_rvq(path, n_codebooks=4)


def test_a_wav_is_not_read_as_codes(tmp_path):
    path = tmp_path / "clip.rvq"
    path.write_bytes(b"RIFF" + bytes(range(256)) * 3)
    with pytest.raises(RvqFormatError, match="not a .rvq file"):
        read_rvq(path)


def test_writer_refuses_codebooks_wider_than_eleven_bits(tmp_path):
    with pytest.raises(ValueError, match="11-bit"):
        save_rvq(tmp_path / "x.rvq", np.zeros((8, 2), np.int64), codebook_size=4096, fmt=FORMAT_CPP)
    with pytest.raises(ValueError, match="unknown .rvq format"):
        save_rvq(tmp_path / "x.rvq", np.zeros((8, 2), np.int64), fmt="wav")
    assert not (tmp_path / "x.rvq").exists()


def test_our_container_is_still_ours(tmp_path, codes):
    save_rvq(tmp_path / "ours.rvq", codes, ref_rms=0.25)
    rvq = read_rvq(tmp_path / "ours.rvq")
    assert rvq.fmt == FORMAT_OMNIVOICE and rvq.ref_rms == 0.25
