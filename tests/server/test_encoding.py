"""The response formats, without a server: OpenAI's names onto audio.io's encoders, pcm, and the refused aac."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.server import encoding
from tests.audio_decode import CONTAINER, container, decode

RATE = 24000


@pytest.fixture
def audio(rng) -> np.ndarray:
    return (0.3 * np.sin(np.arange(RATE) / RATE * 2 * np.pi * 330) + 0.01 * rng.standard_normal(RATE)).astype(
        np.float32)


@pytest.mark.parametrize("name", ["mp3", "opus", "ogg", "flac", "wav", "pcm"])
def test_every_response_format(name, audio):
    data = encoding.encode(audio, RATE, name)
    if name != "pcm":
        assert container(data) == CONTAINER[name]
    assert len(decode(data, name)) == len(audio)


def test_pcm_is_wav_without_its_header(audio):
    wav, pcm = encoding.encode(audio, RATE, "wav"), encoding.encode(audio, RATE, "pcm")
    assert wav[:4] == b"RIFF" and wav.endswith(pcm) and len(wav) - len(pcm) == 44
    enc = encoding.encoder("pcm", RATE)
    assert enc.write(audio[:100]) + enc.write(audio[100:]) + enc.finish() == pcm


def test_aac_cannot_be_encoded_and_says_so():
    why = encoding.unavailable("aac")
    assert "aac" in why and "libsndfile" in why and "mp3" in why
    with pytest.raises(ValueError, match="aac"):
        encoding.encoder("aac", RATE)
    assert "unknown response_format" in encoding.unavailable("m4a")
    assert [n for n in encoding.FORMATS if encoding.unavailable(n)] == ["aac"]
