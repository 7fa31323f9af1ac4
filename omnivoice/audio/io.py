"""Reading and writing audio files: soundfile in, our own WAV encoder out (FLAC, Ogg and MP3 through soundfile).

Reading follows the reference's ``load_waveform``/``load_audio``: ``soundfile.read`` as float32,
channels averaged (float32 ``mean`` over the channel axis). The reference falls back to librosa for
formats libsndfile cannot read (MP3 on old libsndfile, M4A); we do not, and say so in the error.

Writing is done here rather than by soundfile so that a file and a stream get the same bytes:

- ``wav16`` / ``wav24``: PCM, quantised exactly as libsndfile 1.2 does it for ``soundfile.write``
  (the reference CLI's writer): ``lrint(x * 2**31)`` clipped to int32, then an arithmetic shift
  down to 16 or 24 bits (a floor). So -1.0 maps to the minimum, +1.0 clips to the maximum, and a
  wav16 file is bit-identical to ``soundfile.write(path, audio, rate)``.
- ``wav32``: IEEE float32 (format tag 3, 18-byte ``fmt `` chunk with a ``fact`` chunk).

``write_audio`` picks the format from ``--format`` or the file name (``output_format``): WAV through our
encoder, FLAC (16-bit: the wav16 samples, losslessly), Ogg/Vorbis, Ogg/Opus and MP3 (constant bit rate, about
80 kbit/s at 24 kHz) through soundfile's libsndfile, encoded in memory (``encode_audio``) and written the same
atomic way. ``AudioEncoder`` makes the same files piece by piece, handing on the bytes as they are ready (the
speech server streams them). At the end libsndfile rewrites header bytes it has already handed on: FLAC's
STREAMINFO totals, which a stream keeps as first written ("length unknown", valid FLAC: decoders read to the
end, though libsndfile 1.2 itself fails on such a stream's last frame), and LAME's first MP3 frame (the Info
tag, zeros until then), which a stream leaves out (the stream then keeps the encoder's delay: about 50 ms more
at the start). Constant bit rate lets decoders that estimate an MP3's length from its size (libmpg123) read a
stream without its Info tag to the end; a variable-rate one they would cut short.

``write_wav`` and ``write_audio`` go through ``omnivoice.files.atomic_write``, so a failure never
leaves a partial file. ``WavStreamWriter`` writes to a pipe: its header declares the RIFF and data
sizes (and the float ``fact`` sample count) as ``0xFFFFFFFF``, the "unknown length" that ffmpeg,
sox and libsndfile read as "until end of stream"; if the stream turns out to be seekable,
``close()`` patches the real sizes in.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO, Union

import numpy as np
import soundfile as sf

from ..files import atomic_write, atomic_write_bytes

__all__ = [
    "AudioFileError",
    "WAV_FORMATS",
    "OUTPUT_FORMATS",
    "check_rate",
    "output_format",
    "format_extension",
    "write_audio",
    "encode_audio",
    "format_unavailable",
    "AudioEncoder",
    "load_audio",
    "check_samples",
    "encode_samples",
    "wav_header",
    "max_wav_samples",
    "write_wav",
    "WavStreamWriter",
]

PathOrFile = Union[str, "os.PathLike[str]", BinaryIO]

# name -> (format tag, bits per sample)
WAV_FORMATS = {"wav16": (1, 16), "wav24": (1, 24), "wav32": (3, 32)}
# every output format: name -> (soundfile format, subtype), None for our own WAV encoder
OUTPUT_FORMATS = {**{name: None for name in WAV_FORMATS}, "flac": ("FLAC", "PCM_16"), "ogg": ("OGG", "VORBIS"),
                  "opus": ("OGG", "OPUS"), "mp3": ("MP3", "MPEG_LAYER_III")}
# soundfile options by format (see the module docstring for why MP3 is written at a constant bit rate)
_SOUNDFILE_OPTIONS = {"mp3": {"bitrate_mode": "CONSTANT", "compression_level": 0.5}}
# file name extension -> the format it implies (.wav: wav16 unless a WAV format is asked for)
_EXTENSIONS = {".wav": "wav16", ".flac": "flac", ".ogg": "ogg", ".oga": "ogg", ".opus": "opus", ".mp3": "mp3"}

_UNKNOWN_SIZE = 0xFFFFFFFF
_BLOCK_SAMPLES = 1 << 20  # samples encoded at a time by write_wav (encoding works in float64: 8 MiB)


class AudioFileError(ValueError):
    """An audio file that cannot be read as audio (the message names the file and the problem)."""


def _describe(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return str(os.fspath(source))
    return getattr(source, "name", None) or "<file object>"


def load_audio(source: PathOrFile, max_seconds: float | None = None) -> tuple[np.ndarray, int]:
    """Read any file soundfile can decode; return ``(mono float32 samples, sample_rate)``.

    Multi-channel audio is averaged to mono in float32, as the reference does. Raises
    ``AudioFileError`` (a ValueError) naming the file when it does not exist, is not audio, holds
    no samples, or (with ``max_seconds``) is longer than that: the length comes from the header, so
    a long file (or one whose header claims a tiny sample rate) is refused before it is read.
    """
    name = _describe(source)
    if isinstance(source, (str, os.PathLike)):
        path = Path(os.fspath(source))
        if not path.exists():
            raise AudioFileError(f"{name}: no such file")
        if path.is_dir():
            raise AudioFileError(f"{name}: is a directory, not an audio file")
        if path.is_file() and path.stat().st_size == 0:
            raise AudioFileError(f"{name}: is empty (0 bytes), not an audio file")
    try:
        with sf.SoundFile(source) as f:
            rate, frames = f.samplerate, f.frames
            if max_seconds is not None and rate > 0 and frames / rate > max_seconds:
                raise AudioFileError(f"{name}: {frames / rate:.1f} s of audio ({frames} samples at {rate} Hz) "
                                     f"is over the {max_seconds:g} s limit")
            data = f.read(dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as exc:
        # libsndfile's own words without soundfile's "Error opening <repr of the source>: " (an object address
        # for a file object; the name once more for a path)
        why = getattr(exc, "error_string", None) or str(exc)
        raise AudioFileError(
            f"{name}: not a readable audio file (soundfile/libsndfile: {why}); "
            "convert it to WAV or FLAC first"
        ) from exc
    except OSError as exc:
        raise AudioFileError(f"{name}: cannot be read: {exc.strerror or exc}") from exc
    if data.shape[0] == 0:
        raise AudioFileError(f"{name}: contains no audio samples")
    try:
        check_samples(data, name)
    except ValueError as e:
        raise AudioFileError(str(e)) from None
    channels_first = data.T
    if channels_first.shape[0] > 1:
        mono = np.mean(channels_first, axis=0)
    else:
        mono = channels_first[0]
    return np.ascontiguousarray(mono, dtype=np.float32), int(rate)


def _check_format(fmt: str) -> tuple[int, int]:
    try:
        return WAV_FORMATS[fmt]
    except (KeyError, TypeError):
        raise ValueError(f"unknown WAV format {fmt!r}; expected one of {', '.join(WAV_FORMATS)}") from None


def check_rate(sample_rate: int, name: str = "sample_rate") -> int:
    """``sample_rate`` as an int, or ValueError naming ``name`` unless it is a positive whole number of Hz below
    2**28 (what a WAV header's byte rate can hold for every format)."""
    try:
        whole = not isinstance(sample_rate, bool) and int(sample_rate) == sample_rate
    except (TypeError, ValueError, OverflowError):
        whole = False
    if not whole or not 0 < sample_rate < 2**28:
        raise ValueError(f"{name} must be a positive integer number of Hz, got {sample_rate!r}")
    return int(sample_rate)


# Float audio lies in [-1, 1]; a float file may go past it (a mix that clips), but not 60 dB past: a peak of 1e30
# is no recording, and its RMS overflows float32 (a voice saved with an infinite ref_rms: a 500 on the server).
MAX_PEAK = 1000.0


def check_samples(samples: np.ndarray, name: str) -> None:
    """Refuse audio with NaN or infinite samples or a peak past MAX_PEAK (ValueError naming `name`)."""
    a = np.asarray(samples)
    if a.size == 0:
        return
    finite = np.isfinite(a)
    if not finite.all():
        raise ValueError(f"{name}: {int(a.size - finite.sum())} of its {a.size} samples are NaN or infinite")
    peak = float(np.abs(a).max())
    if peak > MAX_PEAK:
        raise ValueError(f"{name}: its peak sample is {peak:.3g}; audio samples lie in [-1, 1] (at most {MAX_PEAK:g} "
                         "is taken)")


def as_mono(audio: np.ndarray, name: str = "audio") -> np.ndarray:
    """``audio`` as float32 [samples]; a [1, samples] array is accepted, anything else is a clear error."""
    a = np.asarray(audio)
    if a.ndim == 2 and a.shape[0] == 1:
        a = a[0]
    if a.ndim != 1:
        raise ValueError(f"{name} must be mono, shape [samples] or [1, samples]; got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"{name} must be floating point audio in [-1, 1]; got dtype {a.dtype}")
    return a.astype(np.float32, copy=False)


def encode_samples(audio: np.ndarray, fmt: str = "wav16") -> bytes:
    """Encode mono float audio as little-endian WAV sample data in format ``fmt``.

    PCM formats are quantised as libsndfile does (see the module docstring); NaN or infinite
    samples raise ValueError rather than being written as noise.
    """
    _, bits = _check_format(fmt)
    a = as_mono(audio)
    if not np.all(np.isfinite(a)):
        raise ValueError("audio contains NaN or infinite samples; refusing to write them")
    if fmt == "wav32":
        return a.astype("<f4").tobytes()
    # x * 2**31 is exact in float64; rint is lrint's round-half-even.
    wide = np.clip(np.rint(a.astype(np.float64) * 2.0**31), -(2.0**31), 2.0**31 - 1).astype(np.int64)
    if bits == 16:
        return (wide >> 16).astype("<i2").tobytes()
    v = (wide >> 8).astype("<i4")
    # 24-bit little-endian: the three low bytes of each int32.
    return v.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()


def wav_header(sample_rate: int, fmt: str = "wav16", n_samples: int | None = None) -> bytes:
    """The RIFF/WAVE header for mono audio; ``n_samples=None`` writes the 0xFFFFFFFF
    "unknown length" sizes used for streaming."""
    tag, bits = _check_format(fmt)
    rate = check_rate(sample_rate)
    block = bits // 8
    fmt_body = struct.pack("<HHIIHH", tag, 1, rate, rate * block, block, bits)
    if tag == 3:
        fmt_body += struct.pack("<H", 0)  # cbSize: non-PCM formats carry it
    chunks = b"fmt " + struct.pack("<I", len(fmt_body)) + fmt_body
    if tag == 3:
        count = _UNKNOWN_SIZE if n_samples is None else n_samples
        chunks += b"fact" + struct.pack("<II", 4, count)
    if n_samples is None:
        riff_size = data_size = _UNKNOWN_SIZE
    else:
        data_size = n_samples * block
        if data_size > 0xFFFFFFFF - 4 - len(chunks) - 9:
            raise ValueError(f"{n_samples} samples do not fit in a WAV file (4 GiB limit)")
        riff_size = 4 + len(chunks) + 8 + data_size + (data_size & 1)
    return b"RIFF" + struct.pack("<I", riff_size) + b"WAVE" + chunks + b"data" + struct.pack("<I", data_size)


def max_wav_samples(fmt: str = "wav16") -> int:
    """The most mono samples one WAV file in ``fmt`` can hold (its RIFF sizes are 32-bit: 4 GiB)."""
    _, bits = _check_format(fmt)
    header = len(wav_header(1, fmt, 0))  # RIFF size = header - 8 + data + pad byte
    return (0xFFFFFFFF - (header - 8) - 1) // (bits // 8)


def write_wav(path: Union[str, "os.PathLike[str]"], audio: np.ndarray, sample_rate: int, fmt: str = "wav16") -> None:
    """Write mono ``audio`` to ``path`` as a WAV file in ``fmt`` (wav16, wav24 or wav32), atomically.

    The file is written whole or not at all (omnivoice.files.atomic_write): a failure leaves ``path`` as it
    was, and a ``path`` that is a device or named pipe is written in place. Samples are encoded a block at a
    time, so a long output (hours of SRT timeline, mostly silence) costs a few MiB beyond the audio itself. An
    unwritable path raises ``FileWriteError`` (a ValueError) naming it; NaN or infinite samples raise
    ValueError.
    """
    a = as_mono(audio)
    header = wav_header(sample_rate, fmt, len(a))
    block = WAV_FORMATS[fmt][1] // 8
    with atomic_write(path, "the WAV output") as f:
        f.write(header)
        for i in range(0, len(a), _BLOCK_SAMPLES):
            f.write(encode_samples(a[i:i + _BLOCK_SAMPLES], fmt))  # checks its block for NaN and infinities
        if len(a) * block & 1:
            f.write(b"\0")


def output_format(path: Union[str, "os.PathLike[str]"], fmt: str | None = None) -> str:
    """The output format for ``path``: ``fmt`` if given (it must agree with a known extension), else the one
    the extension names (.wav, .flac, .ogg/.oga, .opus, .mp3); "-", a device and a name without an extension
    get wav16. ValueError for an unknown extension or a disagreement."""
    if fmt is not None and fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
    name = os.fspath(path)
    ext = "" if name == "-" else Path(name).suffix.lower()
    implied = _EXTENSIONS.get(ext)
    if fmt is None:
        special = os.path.exists(name) and not os.path.isfile(name)  # /dev/null, a named pipe
        if ext and implied is None and not special:
            raise ValueError(f"{name}: cannot tell the audio format from {ext!r} (known: "
                             f"{', '.join(_EXTENSIONS)}); rename it or give --format")
        return implied or "wav16"
    if implied is not None and implied != fmt and not (implied == "wav16" and fmt in WAV_FORMATS):
        named = "WAV" if implied == "wav16" else implied
        raise ValueError(f"{name}: the name says {named}, but the format asked for is {fmt}")
    return fmt


def format_extension(fmt: str) -> str:
    """The file name extension (no dot) of an output format: wav for wav16/24/32, else the format's name."""
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
    return "wav" if fmt in WAV_FORMATS else fmt


def write_audio(path: Union[str, "os.PathLike[str]"], audio: np.ndarray, sample_rate: int,
                fmt: str = "wav16") -> None:
    """Write mono ``audio`` to ``path`` in ``fmt`` (OUTPUT_FORMATS), atomically, as write_wav does."""
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}")
    if OUTPUT_FORMATS[fmt] is None:
        return write_wav(path, audio, sample_rate, fmt)
    atomic_write_bytes(path, encode_audio(audio, sample_rate, fmt), what=f"the {fmt} output")


def format_unavailable(fmt: str) -> str | None:
    """Why ``fmt`` cannot be written with the installed libsndfile (a sentence naming it), or None if it can."""
    if fmt not in OUTPUT_FORMATS:
        return f"unknown output format {fmt!r}; expected one of {', '.join(OUTPUT_FORMATS)}"
    if OUTPUT_FORMATS[fmt] is None:
        return None
    container, subtype = OUTPUT_FORMATS[fmt]
    if container not in sf.available_formats() or subtype not in sf.available_subtypes(container):
        return f"libsndfile {sf.__libsndfile_version__} here cannot write {fmt} ({container}/{subtype})"
    return None


def encode_audio(audio: np.ndarray, sample_rate: int, fmt: str = "wav16") -> bytes:
    """The whole ``fmt`` file of mono ``audio``, in memory (the bytes write_audio writes)."""
    enc = AudioEncoder(fmt, sample_rate)
    enc.write(audio)
    enc.finish()
    return enc.whole()


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

    def read(self, n: int = -1) -> bytes:  # libsndfile's virtual I/O wants one; nothing is read back
        return b""

    def take(self) -> bytes:
        """The bytes written past what was handed on before."""
        out = bytes(self.buf[self.sent:])
        self.sent = len(self.buf)
        return out


class AudioEncoder:
    """One ``fmt`` file (OUTPUT_FORMATS) of mono audio made piece by piece in memory: ``write(audio)`` returns
    the bytes ready to hand on (maybe none yet), ``finish()`` the last ones; together they are a stream that
    decodes to every sample written (see the module docstring for the two header fields a stream cannot
    know). ``whole()``, after finish, is the complete file with those headers filled in. A WAV stream's header
    declares "unknown length", as WavStreamWriter's does.
    """

    def __init__(self, fmt: str, sample_rate: int) -> None:
        why = format_unavailable(fmt)
        if why:
            raise ValueError(why)
        self.fmt, self.sample_rate = fmt, check_rate(sample_rate)
        self._samples = 0
        self._started = False
        self._held = b""  # MP3: the start of the stream until the Info placeholder's end is seen
        self._sink = self._file = None
        if OUTPUT_FORMATS[fmt] is not None:
            container, subtype = OUTPUT_FORMATS[fmt]
            self._sink = _Sink()
            self._file = sf.SoundFile(self._sink, "w", self.sample_rate, 1, subtype, format=container,
                                      **_SOUNDFILE_OPTIONS.get(fmt, {}))
        else:
            self._data = []

    def write(self, audio: np.ndarray) -> bytes:
        a = as_mono(audio)
        if not np.all(np.isfinite(a)):
            raise ValueError("audio contains NaN or infinite samples; refusing to write them")
        self._samples += len(a)
        if self._file is None:
            data = encode_samples(a, self.fmt)
            self._data.append(data)
            head = b"" if self._started else wav_header(self.sample_rate, self.fmt, None)
            self._started = True
            return head + data
        if OUTPUT_FORMATS[self.fmt][1] == "PCM_16":  # FLAC: the very samples of wav16, losslessly
            a = np.frombuffer(encode_samples(a, "wav16"), "<i2")
        self._file.write(a)
        return self._handed_on()

    def finish(self) -> bytes:
        if self._file is None:
            head = b"" if self._started else wav_header(self.sample_rate, self.fmt, None)
            self._started = True
            return head
        if not self._file.closed:
            self._file.close()
        return self._handed_on()

    def whole(self) -> bytes:
        """After finish(): the complete file, its headers holding the real totals."""
        if self._file is None:
            data = b"".join(self._data)
            return wav_header(self.sample_rate, self.fmt, self._samples) + data + (b"\0" if len(data) & 1 else b"")
        if not self._file.closed:
            raise ValueError("whole() is only known after finish()")
        return bytes(self._sink.buf)

    def _handed_on(self) -> bytes:
        data = self._sink.take()
        if self.fmt != "mp3" or self._started:
            return data
        # LAME's first frame is zeros that become the Info tag only at the end: a stream leaves it out, rather
        # than hand decoders a frame they read as broken (libmpg123 reports one). It is held back until the
        # next frame's sync word shows where it ends.
        self._held = data = self._held + data
        nxt = data.find(b"\xff", 4)
        if nxt < 0 and not any(data[4:]):
            return b""  # only the placeholder so far
        self._started = True
        if nxt > 4 and not any(data[4:nxt]) and data[nxt + 1:nxt + 2] >= b"\xe0":
            return data[nxt:]
        return data


class WavStreamWriter:
    """Write a WAV stream (for ``-o -``) whose length is not known in advance.

    The header goes out on construction with RIFF and data sizes of 0xFFFFFFFF; each ``write``
    encodes and flushes its samples at once, so a consumer can play them as they come. ``close``
    flushes, and if the stream is seekable (a regular file) rewrites the header with the real
    sizes (plus the RIFF pad byte for an odd data size). It does not close the stream itself.
    For one WAV per line (``--stream-by-line``), make a new writer on the same stream per line.
    """

    def __init__(self, stream: BinaryIO, sample_rate: int, fmt: str = "wav16") -> None:
        self._stream = stream
        self._fmt = fmt
        self._rate = check_rate(sample_rate)
        self._block = _check_format(fmt)[1] // 8
        self._n_samples = 0
        self._closed = False
        try:
            self._start = stream.tell() if stream.seekable() else None
        except (OSError, AttributeError, ValueError):
            self._start = None
        self._emit(wav_header(self._rate, fmt, None))

    @property
    def samples_written(self) -> int:
        """Number of samples written so far."""
        return self._n_samples

    def _emit(self, data: bytes) -> None:
        self._stream.write(data)
        self._stream.flush()

    def write(self, audio: np.ndarray) -> None:
        """Encode and write a block of mono float samples, then flush."""
        if self._closed:
            raise ValueError("write to a closed WavStreamWriter")
        data = encode_samples(audio, self._fmt)
        if data:
            self._emit(data)
            self._n_samples += len(data) // self._block

    def close(self) -> None:
        """Finish the stream (patching the header when the stream is seekable). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._start is None:
            self._stream.flush()
            return
        data_size = self._n_samples * self._block
        if data_size & 1:
            self._stream.write(b"\0")
        end = self._stream.tell()
        self._stream.seek(self._start)
        self._stream.write(wav_header(self._rate, self._fmt, self._n_samples))
        self._stream.seek(end)
        self._stream.flush()

    def __enter__(self) -> "WavStreamWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
