"""Decoding encoded audio (files, streams, server responses) with soundfile (libsndfile) as the independent
decoder."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf

RATE = 24000


def decode(data: bytes, fmt: str) -> np.ndarray:
    """Mono float32 samples of a response body; pcm is raw s16le at 24 kHz. Reads to the end of the data (a
    stream's header may say "length unknown")."""
    if fmt == "pcm":
        assert len(data) % 2 == 0, "pcm is 16-bit samples"
        return np.frombuffer(data, "<i2").astype(np.float32) / 32768
    with sf.SoundFile(io.BytesIO(data)) as f:
        assert f.samplerate == RATE and f.channels == 1, (f.samplerate, f.channels)
        blocks = []
        while True:
            block = f.read(8192, dtype="float32")
            if not len(block):
                break
            blocks.append(block)
    return np.concatenate(blocks)


def decode_flac_stream(data: bytes, n_samples: int) -> np.ndarray:
    """A streamed FLAC: its STREAMINFO says "total samples unknown" (0, valid FLAC, what libFLAC writes when it
    cannot seek back). libsndfile 1.2 reads such a stream but fails on its last frame, so the total is filled
    in here from the expected length first; then the stream must decode whole."""
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0, "STREAMINFO first"
    field = 8 + 10  # STREAMINFO body at 8; 20-bit rate, 3-bit channels, 5-bit depth, 36-bit total at 10..17
    packed = int.from_bytes(data[field:field + 8], "big")
    assert packed & (2**36 - 1) == 0, "a stream cannot know its total length"
    patched = (packed | n_samples).to_bytes(8, "big")
    return decode(data[:field] + patched + data[field + 8:], "flac")


CONTAINER = {"mp3": "MP3", "opus": "OGG", "ogg": "OGG", "flac": "FLAC", "wav": "WAV", "wav16": "WAV", "wav24": "WAV",
             "wav32": "WAV"}


def container(data: bytes) -> str:
    """libsndfile's name for the container of `data`."""
    with sf.SoundFile(io.BytesIO(data)) as f:
        return f.format
