"""Output formats: by extension or by name, WAV through our encoder, FLAC/Ogg/Opus/MP3 through libsndfile."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from omnivoice.audio.io import check_rate, output_format, write_audio


@pytest.mark.parametrize("name, fmt, expected", [
    ("a.wav", None, "wav16"), ("a.WAV", "wav24", "wav24"), ("a.flac", None, "flac"), ("a.ogg", None, "ogg"),
    ("a.oga", None, "ogg"), ("a.opus", None, "opus"), ("a.mp3", None, "mp3"), ("-", None, "wav16"),
    ("noext", None, "wav16"), ("noext", "mp3", "mp3"), ("a.mp3", "mp3", "mp3"),
])
def test_format_from_the_name_or_the_option(name, fmt, expected):
    assert output_format(name, fmt) == expected


@pytest.mark.parametrize("name, fmt, match", [
    ("a.xyz", None, "cannot tell the audio format"), ("a.wav", "mp3", "says WAV"),
    ("a.flac", "wav16", "says flac"), ("a.wav", "aiff", "unknown output format"),
])
def test_format_errors(name, fmt, match):
    with pytest.raises(ValueError, match=match):
        output_format(name, fmt)


def test_devices_take_wav():
    assert output_format("/dev/null") == "wav16"


@pytest.mark.parametrize("fmt, container, subtype", [
    ("wav16", "WAV", "PCM_16"), ("wav24", "WAV", "PCM_24"), ("wav32", "WAV", "FLOAT"), ("flac", "FLAC", "PCM_16"),
    ("ogg", "OGG", "VORBIS"), ("opus", "OGG", "OPUS"), ("mp3", "MP3", "MPEG_LAYER_III"),
])
def test_every_format_is_what_it_says(tmp_path, fmt, container, subtype):
    t = np.arange(24000) / 24000
    audio = (0.4 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    path = tmp_path / "out.bin"
    write_audio(path, audio, 24000, fmt)
    info = sf.info(path)
    assert (info.format, info.subtype, info.samplerate, info.channels) == (container, subtype, 24000, 1)
    back, _ = sf.read(path, dtype="float32")
    n = min(len(back), len(audio))
    assert abs(len(back) - len(audio)) < 2400  # lossy codecs pad a little
    if fmt.startswith("wav") or fmt == "flac":
        np.testing.assert_allclose(back[:n], audio[:n], atol=1e-4)
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]  # no temporary file left


def test_bad_audio_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="NaN"):
        write_audio(tmp_path / "x.flac", np.array([0.0, np.nan], np.float32), 24000, "flac")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("rate", [0, -1, 1.5, True, "24000", float("nan"), 2**40])
def test_one_rate_check(rate):
    with pytest.raises(ValueError, match="sample_rate must be a positive integer"):
        check_rate(rate)
    with pytest.raises(ValueError, match="orig_freq"):
        from omnivoice.audio.resample import resample

        resample(np.zeros(10, np.float32), rate, 24000)
