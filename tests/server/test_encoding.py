"""Response audio encoding, without a server: every format decodes back to its samples, whole and streamed."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.audio.io import encode_samples
from omnivoice.server import encoding

from .audio_decode import CONTAINER, RATE, container, decode, decode_flac_stream

FORMATS = ["mp3", "opus", "vorbis", "flac", "wav", "pcm"]


@pytest.fixture
def audio(rng) -> np.ndarray:
    t = np.arange(int(1.3 * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.01 * rng.standard_normal(t.size)).astype(np.float32)


def _lossless_equal(got: np.ndarray, audio: np.ndarray) -> None:
    """16-bit formats: the samples of encode_samples' wav16 quantisation, exactly."""
    np.testing.assert_array_equal(got, np.frombuffer(encode_samples(audio, "wav16"), "<i2") / np.float32(32768))


@pytest.mark.parametrize("fmt", FORMATS)
def test_whole_file_decodes_to_its_samples(fmt, audio):
    data = encoding.encode(audio, RATE, fmt)
    if fmt != "pcm":
        assert container(data) == CONTAINER[fmt]
    got = decode(data, fmt)
    assert len(got) == len(audio)
    if fmt in ("flac", "wav", "pcm"):
        _lossless_equal(got, audio)
    else:  # lossy: the same signal, give or take the codec's error
        assert np.corrcoef(got, audio)[0, 1] > 0.9


@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_decodes_to_its_samples(fmt, audio):
    enc = encoding.StreamEncoder(fmt, RATE)
    pieces = [audio[:7000], audio[7000:7001], audio[7001:]]
    data = b"".join(enc.write(p) for p in pieces) + enc.finish()
    got = decode_flac_stream(data, len(audio)) if fmt == "flac" else decode(data, fmt)
    if fmt == "mp3":  # no Info tag to remove the encoder's delay (1105 samples) and padding in a stream
        assert len(audio) <= len(got) <= len(audio) + 1105 + 576
    else:
        assert len(got) == len(audio)
    if fmt in ("flac", "wav", "pcm"):
        _lossless_equal(got, audio)


def test_pcm_is_wav_without_its_header(audio):
    wav, pcm = encoding.encode(audio, RATE, "wav"), encoding.encode(audio, RATE, "pcm")
    assert wav[:4] == b"RIFF" and wav.endswith(pcm) and len(wav) - len(pcm) == 44


def test_aac_cannot_be_encoded_and_says_so():
    why = encoding.unavailable("aac")
    assert "aac" in why and "libsndfile" in why and "mp3" in why
    with pytest.raises(ValueError, match="aac"):
        encoding.StreamEncoder("aac", RATE)
    assert "unknown response_format" in encoding.unavailable("m4a")
    assert all(encoding.unavailable(f) is None for f in FORMATS)
