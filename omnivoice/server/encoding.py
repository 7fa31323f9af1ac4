"""Response audio: OpenAI's `response_format`s onto omnivoice.audio.io's formats, whole or streamed.

    response_format  written as (audio.io)         media type   notes
    mp3              mp3: MPEG Layer III, CBR       audio/mpeg
    opus             opus: Ogg/Opus                 audio/ogg
    ogg              ogg: Ogg/Vorbis                audio/ogg    an extension (the tts CLI's --format ogg)
    flac             flac: 16-bit FLAC              audio/flac   the samples of wav and pcm, losslessly
    wav              wav16: 16-bit PCM WAV          audio/wav
    pcm              raw s16le, 24 kHz, mono        audio/pcm    wav's samples without the header
    aac              refused: libsndfile has no AAC encoder (none is added)

A stream (`encoder(...).write` per sentence, then `finish`) is audio.io's AudioEncoder: see its notes on
the header fields a stream cannot know.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..audio.io import AudioEncoder, encode_audio, encode_samples, format_unavailable

__all__ = ["FORMATS", "MEDIA_TYPES", "unavailable", "usable", "encode", "encoder"]

FORMATS = {"mp3": "mp3", "opus": "opus", "ogg": "ogg", "flac": "flac", "wav": "wav16", "pcm": None, "aac": None}
MEDIA_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "ogg": "audio/ogg", "flac": "audio/flac", "wav": "audio/wav",
               "pcm": "audio/pcm", "aac": "audio/aac"}


def unavailable(name: str) -> Optional[str]:
    """Why `name` cannot be answered by this install (a sentence for the client, naming the formats that can),
    or None when it can."""
    if name not in FORMATS:
        return f"unknown response_format {name!r}; this server answers {', '.join(usable())}"
    if name == "aac":
        return (f"response_format 'aac' cannot be encoded by this server (libsndfile has no AAC encoder); use "
                f"{', '.join(usable())}")
    why = _unencodable(name)
    return f"response_format {name!r} cannot be encoded by this server: {why}" if why else None


def usable() -> list[str]:
    """The response formats this install can answer, in FORMATS' order."""
    return [n for n in FORMATS if n != "aac" and not _unencodable(n)]


def _unencodable(name: str) -> Optional[str]:
    return format_unavailable(FORMATS[name]) if FORMATS[name] else None


def encode(audio: np.ndarray, sample_rate: int, name: str) -> bytes:
    """The whole response body."""
    return encode_samples(audio, "wav16") if name == "pcm" else encode_audio(audio, sample_rate, FORMATS[name])


class _Pcm:
    """pcm, streamed: each piece's wav16 samples as they are."""

    def write(self, audio: np.ndarray) -> bytes:
        return encode_samples(audio, "wav16")

    def finish(self) -> bytes:
        return b""


def encoder(name: str, sample_rate: int):
    """A streaming encoder for `name`: write(audio) -> bytes ready to send, finish() -> the last bytes."""
    why = unavailable(name)
    if why:
        raise ValueError(why)
    return _Pcm() if name == "pcm" else AudioEncoder(FORMATS[name], sample_rate)
