"""Audio file I/O: reading through soundfile, our WAV writer against libsndfile's, atomic writes,
and the streaming writer used for ``-o -``."""

from __future__ import annotations

import io
import os
import struct

import numpy as np
import pytest
import soundfile as sf

from omnivoice import files
from omnivoice.audio.io import AudioFileError, WavStreamWriter, load_audio, write_wav
from omnivoice.files import FileWriteError


# ---------------------------------------------------------------------------
# load_audio
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("subtype, fmt, ext", [("PCM_16", "WAV", "wav"), ("PCM_24", "WAV", "wav"),
                                               ("FLOAT", "WAV", "wav"), ("PCM_16", "FLAC", "flac")])
def test_load_mono_files(tmp_path, rng, subtype, fmt, ext):
    pcm = rng.integers(-32768, 32768, 4001).astype(np.int16)
    path = tmp_path / f"clip.{ext}"
    sf.write(path, pcm.astype(np.float32) / 32768, 8000, subtype=subtype, format=fmt)
    audio, rate = load_audio(path)
    assert rate == 8000
    assert audio.dtype == np.float32 and audio.shape == (4001,)
    # int16-exact samples survive every container exactly.
    np.testing.assert_array_equal(audio, pcm.astype(np.float32) / 32768)


def test_stereo_is_averaged_in_float32(tmp_path, rng):
    pcm = rng.integers(-32768, 32768, (2400, 2)).astype(np.int16)
    path = tmp_path / "stereo.wav"
    sf.write(path, pcm, 44100, subtype="PCM_16")
    audio, rate = load_audio(str(path))
    left, right = (pcm.astype(np.float32) / 32768).T
    assert rate == 44100
    np.testing.assert_array_equal(audio, (left + right) / np.float32(2))


def test_reads_file_objects(rng):
    pcm = rng.integers(-32768, 32768, 100).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, 24000, subtype="PCM_16", format="WAV")
    buf.seek(0)
    audio, rate = load_audio(buf)
    assert rate == 24000
    np.testing.assert_array_equal(audio, pcm / np.float32(32768))


def _no_frames(path):
    sf.write(path, np.zeros(0, np.int16), 24000, subtype="PCM_16", format="WAV")


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_bytes(b""), "empty"),
        (lambda p: p.write_text("this is a transcript, not audio\n" * 20), "not a readable audio file"),
        (lambda p: p.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt "), "not a readable audio file"),
        (_no_frames, "no audio samples"),
        (lambda p: p.mkdir(), "directory"),
    ],
    ids=["missing", "zero_bytes", "text", "truncated_header", "no_frames", "directory"],
)
def test_bad_inputs_name_the_file(tmp_path, make, message):
    path = tmp_path / "ref.wav"
    make(path)
    with pytest.raises(AudioFileError, match=message) as info:
        load_audio(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------------------
# write_wav
# ---------------------------------------------------------------------------


def _signal(rng, n):
    # Uniform over a bit more than full scale: exercises clipping and every rounding branch.
    x = rng.uniform(-1.1, 1.1, n).astype(np.float32)
    edges = np.array([1.0, -1.0, 0.0, 0.5 / 32768, -0.5 / 32768, 1.5 / 32768], np.float32)
    x[: min(n, 6)] = edges[: min(n, 6)]
    return x


@pytest.mark.parametrize("fmt, subtype", [("wav16", "PCM_16"), ("wav24", "PCM_24")])
def test_pcm_files_are_byte_identical_to_libsndfile(tmp_path, rng, fmt, subtype):
    x = _signal(rng, 5001)  # odd length: wav24 data needs the RIFF pad byte
    ours, theirs = tmp_path / "ours.wav", tmp_path / "theirs.wav"
    write_wav(ours, x, 24000, fmt)
    sf.write(theirs, x, 24000, subtype=subtype)
    assert ours.read_bytes() == theirs.read_bytes()


def test_float_files_hold_the_exact_samples(tmp_path, rng):
    x = _signal(rng, 1001)
    path = tmp_path / "f.wav"
    write_wav(path, x, 16000, "wav32")
    info = sf.info(path)
    assert (info.samplerate, info.channels, info.subtype) == (16000, 1, "FLOAT")
    y, _ = sf.read(path, dtype="float32")
    np.testing.assert_array_equal(y, x)


def test_overwrite_is_atomic(tmp_path, rng, monkeypatch):
    path = tmp_path / "out.wav"
    path.write_bytes(b"previous content")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(FileWriteError, match="No space left"):
        write_wav(path, _signal(rng, 100), 24000)
    assert path.read_bytes() == b"previous content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.wav"]


def test_written_file_has_normal_permissions(tmp_path, rng):
    path = tmp_path / "out.wav"
    write_wav(path, _signal(rng, 10), 24000)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_a_named_pipe_is_written_into_not_replaced(tmp_path, rng):
    import threading

    fifo = tmp_path / "pipe.wav"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    x = _signal(rng, 100)
    write_wav(fifo, x, 24000)
    reader.join(timeout=10)
    assert fifo.is_fifo()
    y, _ = sf.read(io.BytesIO(received[0]), dtype="float32")
    assert len(y) == 100


@pytest.mark.parametrize("where", ["missing_dir", "parent_is_file", "is_dir"])
def test_unwritable_paths_fail_clearly(tmp_path, rng, where):
    if where == "missing_dir":
        path = tmp_path / "no" / "such" / "out.wav"
    elif where == "parent_is_file":
        (tmp_path / "file").write_text("x")
        path = tmp_path / "file" / "out.wav"
    else:
        path = tmp_path
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(FileWriteError) as info:
        write_wav(path, _signal(rng, 10), 24000)
    assert str(path) in str(info.value)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    "audio, rate, fmt, error, message",
    [
        (np.array([0.0, np.nan], np.float32), 24000, "wav16", ValueError, "NaN"),
        (np.zeros((2, 10), np.float32), 24000, "wav16", ValueError, "mono"),
        (np.zeros(10, np.int16), 24000, "wav16", TypeError, "floating point"),
        (np.zeros(10, np.float32), 0, "wav16", ValueError, "sample_rate"),
        (np.zeros(10, np.float32), 24000, "mp3", ValueError, "wav16, wav24, wav32"),
    ],
)
def test_bad_audio_is_refused_before_touching_the_disk(tmp_path, audio, rate, fmt, error, message):
    path = tmp_path / "out.wav"
    with pytest.raises(error, match=message):
        write_wav(path, audio, rate, fmt)
    assert not path.exists() and not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------
# WavStreamWriter
# ---------------------------------------------------------------------------


class Pipe(io.RawIOBase):
    """A write-only, non-seekable stream like stdout into a pipe; records flushes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.flushed_at: list[int] = []

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        self.data += bytes(b)
        return len(b)

    def flush(self) -> None:
        self.flushed_at.append(len(self.data))


@pytest.mark.parametrize("fmt", ["wav16", "wav24", "wav32"])
def test_stream_to_a_pipe(rng, fmt):
    blocks = [_signal(rng, n) for n in (1, 2400, 777)]
    pipe = Pipe()
    with WavStreamWriter(pipe, 24000, fmt) as writer:
        for b in blocks:
            writer.write(b)
    assert writer.samples_written == 3178
    raw = bytes(pipe.data)
    # Unknown length: RIFF size and data size are 0xFFFFFFFF.
    assert struct.unpack("<I", raw[4:8])[0] == 0xFFFFFFFF
    data_at = raw.index(b"data")
    assert struct.unpack("<I", raw[data_at + 4 : data_at + 8])[0] == 0xFFFFFFFF
    # Every block reaches the consumer at once: a flush after the header and after each block.
    block = {"wav16": 2, "wav24": 3, "wav32": 4}[fmt]
    header = data_at + 8
    assert pipe.flushed_at[:4] == [header, header + block, header + 2401 * block, header + 3178 * block]
    # Readers take the unknown length as "until the end"; the samples are what write_wav writes.
    got, rate = sf.read(io.BytesIO(raw), dtype="float32")
    assert rate == 24000
    np.testing.assert_array_equal(got, sf.read(_wav_bytes(np.concatenate(blocks), fmt), dtype="float32")[0])


def _wav_bytes(x, fmt, tmp=None):
    buf = io.BytesIO()
    writer = WavStreamWriter(buf, 24000, fmt)
    writer.write(x)
    writer.close()
    buf.seek(0)
    return buf


@pytest.mark.parametrize("fmt", ["wav16", "wav24", "wav32"])
def test_stream_to_a_file_gets_real_sizes(tmp_path, rng, fmt):
    x = _signal(rng, 1001)
    path = tmp_path / "a.wav"
    with open(path, "wb") as f:
        with WavStreamWriter(f, 24000, fmt) as writer:
            writer.write(x[:500])
            writer.write(x[500:])
    write_wav(tmp_path / "b.wav", x, 24000, fmt)
    assert path.read_bytes() == (tmp_path / "b.wav").read_bytes()


def test_one_wav_per_line_on_one_stream(rng):
    lines = [_signal(rng, 300), _signal(rng, 451)]
    buf = io.BytesIO()
    ends = []
    for x in lines:
        with WavStreamWriter(buf, 24000, "wav16") as writer:
            writer.write(x)
        ends.append(buf.tell())
    raw = buf.getvalue()
    first, _ = sf.read(io.BytesIO(raw[: ends[0]]), dtype="float32")
    second, _ = sf.read(io.BytesIO(raw[ends[0] :]), dtype="float32")
    assert (len(first), len(second)) == (300, 451)


def test_stream_writer_refuses_writes_after_close():
    writer = WavStreamWriter(io.BytesIO(), 24000)
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        writer.write(np.zeros(3, np.float32))
