"""audio.io's AudioEncoder: every output format, whole and streamed piece by piece, decodes to its samples."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.audio.io import OUTPUT_FORMATS, AudioEncoder, encode_audio, encode_samples, format_unavailable
from tests.audio_decode import CONTAINER, container, decode, decode_flac_stream

RATE = 24000
LOSSLESS = {"wav16": 16, "wav24": 24, "wav32": 32, "flac": 16}


@pytest.fixture
def audio(rng) -> np.ndarray:
    t = np.arange(int(1.3 * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def _check_samples(fmt: str, got: np.ndarray, audio: np.ndarray) -> None:
    if fmt == "wav32":
        np.testing.assert_array_equal(got, audio)
    elif fmt in LOSSLESS:  # the quantisation of encode_samples, exactly
        bits = LOSSLESS[fmt]
        raw = np.frombuffer(encode_samples(audio, f"wav{bits}"), np.uint8)
        ints = np.frombuffer(raw, "<i2") if bits == 16 else \
            (np.pad(raw.reshape(-1, 3), ((0, 0), (1, 0))).view("<i4")[:, 0] >> 8)
        np.testing.assert_array_equal(got, (ints / np.float64(2 ** (bits - 1))).astype(np.float32))
    else:  # lossy: the same signal, give or take the codec's error
        assert np.corrcoef(got[:len(audio)], audio[:len(got)])[0, 1] > 0.9


@pytest.mark.parametrize("fmt", list(OUTPUT_FORMATS))
def test_whole_file_decodes_to_its_samples(fmt, audio):
    data = encode_audio(audio, RATE, fmt)
    assert container(data) == CONTAINER[fmt]
    got = decode(data, fmt)
    assert len(got) == len(audio)
    _check_samples(fmt, got, audio)


@pytest.mark.parametrize("fmt", list(OUTPUT_FORMATS))
def test_stream_decodes_to_its_samples(fmt, audio):
    enc = AudioEncoder(fmt, RATE)
    pieces = [audio[:7000], audio[7000:7001], audio[7001:]]
    data = b"".join(enc.write(p) for p in pieces) + enc.finish()
    got = decode_flac_stream(data, len(audio)) if fmt == "flac" else decode(data, fmt)
    if fmt == "mp3":  # no Info tag to take the encoder's delay (1105 samples) and padding off
        assert len(audio) <= len(got) <= len(audio) + 1105 + 576
    else:
        assert len(got) == len(audio)
        _check_samples(fmt, got, audio)
    whole = decode(enc.whole(), fmt)  # the same file with its totals filled in
    assert len(whole) == len(audio)
    _check_samples(fmt, whole, audio)


@pytest.mark.parametrize("first", [1, 100, 3000])
def test_mp3_stream_leaves_out_the_info_placeholder_however_small_the_first_piece(audio, first):
    enc = AudioEncoder("mp3", RATE)
    data = enc.write(audio[:first]) + enc.write(audio[first:]) + enc.finish()
    assert data[:2] == b"\xff\xf3" and any(data[4:40])  # starts with an audio frame, not the zero placeholder
    assert len(audio) <= len(decode(data, "mp3")) <= len(audio) + 1105 + 576


def test_bad_audio_and_formats_are_refused():
    with pytest.raises(ValueError, match="NaN"):
        AudioEncoder("mp3", RATE).write(np.array([0.0, np.inf], np.float32))
    with pytest.raises(ValueError, match="unknown output format 'aac'"):
        AudioEncoder("aac", RATE)
    assert all(format_unavailable(f) is None for f in OUTPUT_FORMATS)
