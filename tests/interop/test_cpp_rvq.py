"""omnivoice.cpp's .rvq through the surfaces: the codec CLI writes and decodes it, and a voice read from it
clones as the same codes in our container do."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from omnivoice.codec import read_rvq, save_rvq
from omnivoice.codec.__main__ import main as codec_main
from omnivoice.codec.rvq_format import FORMAT_CPP, FORMAT_OMNIVOICE
from omnivoice.codec.rvq_packed import pack_codes

from tests.golden_paths import GOLDEN


def _codec(capsys, *argv) -> str:
    rc = codec_main(list(argv))
    err = capsys.readouterr().err
    assert rc == 0, err
    return err


def test_their_file_decodes_to_the_audio_of_the_same_codes_in_ours(tmp_path, capsys, tiny_gguf, rng):
    codes = rng.integers(0, 1024, (8, 23))
    (tmp_path / "theirs.rvq").write_bytes(pack_codes(codes))
    save_rvq(tmp_path / "ours.rvq", codes, ref_rms=0.05)
    model = str(tiny_gguf["codec"])
    for name in ("theirs", "ours"):
        _codec(capsys, "--model", model, "-i", str(tmp_path / f"{name}.rvq"), "--format", "wav32", "-q")
    theirs, rate = sf.read(tmp_path / "theirs.wav", dtype="float32")
    ours, _ = sf.read(tmp_path / "ours.wav", dtype="float32")
    assert rate == 24000 and theirs.shape == (23 * 960,)
    np.testing.assert_array_equal(theirs, ours)


def test_encode_writes_their_layout(tmp_path, capsys, tiny_gguf):
    clip = np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"][:48000]
    sf.write(tmp_path / "clip.wav", clip, 24000, subtype="FLOAT")
    model = str(tiny_gguf["codec"])
    _codec(capsys, "--model", model, "-i", str(tmp_path / "clip.wav"), "-o", str(tmp_path / "ours.rvq"), "-q")
    _codec(capsys, "--model", model, "-i", str(tmp_path / "clip.wav"), "-o", str(tmp_path / "theirs.rvq"),
           "--rvq-format", "omnivoice-cpp", "-q")
    ours, theirs = read_rvq(tmp_path / "ours.rvq"), read_rvq(tmp_path / "theirs.rvq")
    assert (ours.fmt, theirs.fmt) == (FORMAT_OMNIVOICE, FORMAT_CPP)
    np.testing.assert_array_equal(theirs.codes, ours.codes)
    assert (tmp_path / "theirs.rvq").read_bytes() == pack_codes(ours.codes)


def test_a_damaged_file_of_theirs_is_a_clear_error(tmp_path, capsys, tiny_gguf):
    (tmp_path / "cut.rvq").write_bytes(pack_codes(np.ones((8, 5), np.int64))[:-3])
    rc = codec_main(["--model", str(tiny_gguf["codec"]), "-i", str(tmp_path / "cut.rvq")])
    err = capsys.readouterr().err
    assert rc != 0 and "cut.rvq" in err and "whole number of frames" in err
    assert not (tmp_path / "cut.wav").exists()


@pytest.fixture(scope="module")
def ov(tiny_gguf):
    import omnivoice

    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend="cpu") as ov:
        yield ov


def test_a_voice_from_their_file_clones_like_ours(tmp_path, ov):
    from omnivoice.pipeline import VoicePrompt

    clip = np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"][:48000]
    voice = ov.create_voice((clip, 24000), "Hello world, this is me")
    (tmp_path / "theirs.rvq").write_bytes(pack_codes(voice.codes))
    theirs = VoicePrompt.load(tmp_path / "theirs.rvq", voice.text)
    assert theirs.rms is None
    a = ov.synthesize("Nice to meet you.", voice=voice, num_step=8, seed=3)
    b = ov.synthesize("Nice to meet you.", voice=theirs, num_step=8, seed=3)
    np.testing.assert_array_equal(a.tokens[0], b.tokens[0])
