"""Response audio: the OpenAI `response_format`s, whole or streamed, through soundfile/libsndfile.

    format   container / codec          media type    notes
    mp3      MPEG-1/2 Layer III         audio/mpeg    constant bit rate, so a stream's length follows from its size
    opus     Ogg / Opus                 audio/ogg
    vorbis   Ogg / Vorbis               audio/ogg     an extension (not an OpenAI format)
    flac     FLAC, 16 bit               audio/flac    the samples of wav and pcm, losslessly
    wav      RIFF WAVE, 16 bit PCM      audio/wav     omnivoice.audio.io's writer (bit-identical to soundfile's)
    pcm      raw s16le, 24 kHz, mono    audio/pcm     the same samples as wav, without a header
    aac      not writable by libsndfile: refused with a clear error (no encoder is added)

A format is usable when the installed libsndfile can write it (MP3 needs libsndfile 1.1, Opus 1.0.29);
`unavailable(fmt)` says why one is not. Streaming (`StreamEncoder`) feeds one libsndfile encoder sentence by
sentence and hands on the bytes it has written so far. At the end libsndfile rewrites a few header bytes it
has already handed on: FLAC's STREAMINFO totals, which a stream keeps as first written ("length unknown",
valid FLAC: decoders read to the end, though libsndfile 1.2 fails on such a stream's last frame), and LAME's
first MP3 frame, which a stream leaves out (without its Info tag an MP3 stream carries the encoder's delay,
about 50 ms of extra silence). A whole response (`encode`) carries the rewritten headers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import soundfile as sf

from ..audio.io import as_mono, encode_samples, wav_header

__all__ = ["FORMATS", "OPENAI_FORMATS", "AudioFormat", "unavailable", "encode", "StreamEncoder"]


@dataclass(frozen=True)
class AudioFormat:
    """How one response_format is written: libsndfile's major format and subtype (None: written here)."""

    name: str
    media_type: str
    container: Optional[str] = None
    subtype: Optional[str] = None
    options: tuple = ()


FORMATS: dict[str, AudioFormat] = {f.name: f for f in (
    # CBR (compression_level 0.5 is about 80 kbit/s at 24 kHz): a VBR stream without its Info frame would be
    # cut short by decoders that estimate the length from the first frame's bit rate (libmpg123 does).
    AudioFormat("mp3", "audio/mpeg", "MP3", "MPEG_LAYER_III", (("bitrate_mode", "CONSTANT"),
                                                                ("compression_level", 0.5))),
    AudioFormat("opus", "audio/ogg", "OGG", "OPUS"),
    AudioFormat("vorbis", "audio/ogg", "OGG", "VORBIS"),
    AudioFormat("aac", "audio/aac", "AAC"),
    AudioFormat("flac", "audio/flac", "FLAC", "PCM_16"),
    AudioFormat("wav", "audio/wav"),
    AudioFormat("pcm", "audio/pcm"),
)}
OPENAI_FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")


def unavailable(name: str) -> Optional[str]:
    """Why `name` cannot be written by this install (a sentence for the client), or None when it can."""
    fmt = FORMATS.get(name)
    if fmt is None:
        return f"unknown response_format {name!r}; expected one of {', '.join(FORMATS)}"
    if fmt.container is None:
        return None
    libsndfile = f"libsndfile {sf.__libsndfile_version__}"
    if fmt.subtype is None or fmt.container not in sf.available_formats():
        return (f"response_format {name!r} cannot be encoded by this server ({libsndfile} has no {name} "
                f"encoder); use one of {', '.join(n for n in FORMATS if n != name and not unavailable(n))}")
    if fmt.subtype not in sf.available_subtypes(fmt.container):
        return f"response_format {name!r} cannot be encoded by this server ({libsndfile} lacks {fmt.subtype})"
    return None


def encode(audio: np.ndarray, sample_rate: int, name: str) -> bytes:
    """The whole response body: mono float audio in [-1, 1] encoded as `name`."""
    enc = StreamEncoder(name, sample_rate)
    if enc.sink is None:
        data = encode_samples(as_mono(audio), "wav16")
        return data if name == "pcm" else wav_header(enc.sample_rate, "wav16", len(data) // 2) + data
    enc.write(audio)
    enc.finish()
    return enc.patched()


class _Sink:
    """A seekable write-only file for libsndfile that remembers how much of it was handed on already."""

    def __init__(self) -> None:
        self.buf, self.pos, self.sent = bytearray(), 0, 0

    def write(self, data) -> int:
        data = bytes(data)
        end = self.pos + len(data)
        if end > len(self.buf):
            self.buf.extend(bytes(end - len(self.buf)))
        self.buf[self.pos:end] = data
        self.pos = end
        return len(data)

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else len(self.buf) + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> bytes:  # libsndfile's virtual I/O wants one; a write-only file reads nothing
        return b""

    def take(self) -> bytes:
        """The bytes written past what was handed on before."""
        out = bytes(self.buf[self.sent:])
        self.sent = len(self.buf)
        return out


class StreamEncoder:
    """Encodes audio piece by piece: write(audio) -> the bytes ready to send, finish() -> the last ones."""

    def __init__(self, name: str, sample_rate: int) -> None:
        why = unavailable(name)
        if why:
            raise ValueError(why)
        self.format, self.sample_rate = FORMATS[name], int(sample_rate)
        self.sink: Optional[_Sink] = None
        self._file = None
        self._started = False
        if self.format.container is not None:
            self.sink = _Sink()
            self._file = sf.SoundFile(self.sink, "w", self.sample_rate, 1, self.format.subtype,
                                      format=self.format.container, **dict(self.format.options))

    def write(self, audio: np.ndarray) -> bytes:
        """Encode one piece of mono float audio; returns the bytes that are ready (maybe none yet)."""
        audio = as_mono(audio)
        if self._file is not None:
            if self.format.subtype == "PCM_16":  # lossless: the very samples of wav and pcm (our quantisation)
                audio = np.frombuffer(encode_samples(audio, "wav16"), "<i2")
            self._file.write(audio)
            return self._skip_placeholder(self.sink.take())
        head = b""
        if not self._started and self.format.name == "wav":
            head = wav_header(self.sample_rate, "wav16", None)  # sizes "unknown": read to the end
        self._started = True
        return head + encode_samples(audio, "wav16")

    def _skip_placeholder(self, data: bytes) -> bytes:
        """A stream leaves out LAME's first MP3 frame: zeros that become the Info tag only at the end, and that
        decoders would read as a broken audio frame (libmpg123 reports one)."""
        if self.format.name != "mp3" or self._started or len(data) < 4:
            return data
        self._started = True
        nxt = data.find(b"\xff", 4)  # the next frame's sync word: the placeholder in between is all zeros
        if nxt > 4 and not any(data[4:nxt]) and data[nxt + 1:nxt + 2] >= b"\xe0":
            return data[nxt:]
        return data

    def finish(self) -> bytes:
        """Flush the encoder; returns the last bytes of the stream."""
        if self._file is not None:
            self._file.close()
            self._file = None
            return self._skip_placeholder(self.sink.take())
        if not self._started and self.format.name == "wav":
            self._started = True
            return wav_header(self.sample_rate, "wav16", None)
        return b""

    def patched(self) -> bytes:
        """After finish(): the whole file as libsndfile left it, headers rewritten with the real totals."""
        return bytes(self.sink.buf)
