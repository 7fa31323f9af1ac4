"""python -m omnivoice.codec: WAV -> .rvq -> WAV round trips on the tiny checkpoint, and clear errors."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from omnivoice.codec import load_codec, read_rvq, save_rvq
from omnivoice.codec.__main__ import main

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "codec_tiny.npz"


@pytest.fixture(scope="module")
def model(tiny_gguf) -> str:
    return str(tiny_gguf["codec"])


@pytest.fixture(scope="module")
def golden(tiny_checkpoint) -> dict:
    g = dict(np.load(GOLDEN))
    sha = hashlib.sha256((tiny_checkpoint / "audio_tokenizer" / "model.safetensors").read_bytes()).hexdigest()
    assert json.loads(str(g["meta_json"]))["audio_tokenizer_sha256"] == sha, \
        "codec_tiny.npz is stale: see tools/reference/goldens.py codec"
    return g


def run(capsys, *argv) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def test_wav_round_trip_matches_the_reference_prompt(tmp_path, capsys, model, golden, backend_spec):
    """Encoding a WAV gives the reference's voice-clone prompt codes; decoding gives the codec's audio.

    The encoder runs on the CPU (float32; a GPU's TF32 products may flip codes), the decoder on the test backend.
    """
    wav = tmp_path / "clip.wav"
    sf.write(wav, golden["clip_c"], 24000, subtype="FLOAT")
    rc, err = run(capsys, "--model", model, "-i", str(wav), "--backend", backend_spec, "--encode-backend", "cpu")
    assert rc == 0, err
    rvq = read_rvq(tmp_path / "clip.rvq")
    np.testing.assert_array_equal(rvq.codes, golden["prompt_codes_c"])
    assert rvq.ref_rms == pytest.approx(float(golden["prompt_rms_c"]), rel=1e-6)
    assert (rvq.sample_rate, rvq.frame_rate) == (24000, 25.0)

    out = tmp_path / "decoded.wav"
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "clip.rvq"), "-o", str(out), "--format", "wav32",
                  "--backend", backend_spec)
    assert rc == 0, err
    audio, rate = sf.read(out, dtype="float32")
    assert rate == 24000 and audio.shape == (960 * rvq.codes.shape[1],)
    with load_codec(model, backend_spec, parts=("decode",)) as codec:
        np.testing.assert_array_equal(audio, codec.decode(rvq.codes))


@pytest.mark.parametrize("fmt, subtype", [("wav16", "PCM_16"), ("wav24", "PCM_24"), ("wav32", "FLOAT")])
def test_decode_formats_and_default_name(tmp_path, capsys, model, rng, fmt, subtype):
    src = tmp_path / "codes.rvq"
    save_rvq(src, rng.integers(0, 1024, (8, 6)))
    rc, err = run(capsys, "--model", model, "-i", str(src), "--format", fmt)
    assert rc == 0, err
    info = sf.info(tmp_path / "codes.wav")
    assert (info.samplerate, info.channels, info.frames, info.subtype) == (24000, 1, 6 * 960, subtype)


def test_stereo_and_other_rates_are_accepted(tmp_path, capsys, model, golden):
    mono = golden["clip_a"]
    sf.write(tmp_path / "mono.wav", mono, 24000, subtype="FLOAT")
    sf.write(tmp_path / "stereo.wav", np.stack([mono, mono], axis=1), 24000, subtype="FLOAT")
    assert run(capsys, "--model", model, "-i", str(tmp_path / "mono.wav"))[0] == 0
    assert run(capsys, "--model", model, "-i", str(tmp_path / "stereo.wav"))[0] == 0
    np.testing.assert_array_equal(read_rvq(tmp_path / "stereo.rvq").codes, read_rvq(tmp_path / "mono.rvq").codes)

    from omnivoice.audio import resample
    sf.write(tmp_path / "r44.flac", resample(mono, 24000, 44100), 44100)
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "r44.flac"))
    assert rc == 0, err
    # about the same frames as the 24 kHz clip (silence trimming and rounding may drop one)
    assert abs(read_rvq(tmp_path / "r44.rvq").codes.shape[1] - read_rvq(tmp_path / "mono.rvq").codes.shape[1]) <= 1


def test_bad_inputs_give_clear_errors(tmp_path, capsys, model):
    text = tmp_path / "notes.wav"
    text.write_text("this is not audio\n")
    rc, err = run(capsys, "--model", model, "-i", str(text))
    assert rc == 2 and "not a readable audio file" in err and str(text) in err

    bad = tmp_path / "bad.rvq"
    bad.write_bytes(b"ORVQ" + b"\0" * 10)
    rc, err = run(capsys, "--model", model, "-i", str(bad))
    assert rc == 2 and "too short" in err

    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "missing.wav"))
    assert rc == 2 and "no such input file" in err

    save_rvq(tmp_path / "ok.rvq", np.zeros((8, 3), np.int32))
    rc, err = run(capsys, "--model", str(tmp_path / "nope.gguf"), "-i", str(tmp_path / "ok.rvq"))
    assert rc == 2 and "nope.gguf" in err

    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "ok.rvq"), "-o", str(tmp_path / "ok.rvq"))
    assert rc == 2 and "overwrite the input" in err

    # an output that takes no new file (/proc passes os.access as root) is refused before the model is looked at
    rc, err = run(capsys, "--model", str(tmp_path / "nope.gguf"), "-i", str(tmp_path / "ok.rvq"), "-o", "/proc/x.wav")
    assert rc == 2 and "/proc/x.wav: cannot write here" in err and "nope" not in err, err

    save_rvq(tmp_path / "sr.rvq", np.zeros((8, 3), np.int32), sample_rate=16000, frame_rate=50.0)
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "sr.rvq"))
    assert rc == 2 and "16000 Hz" in err

    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(24000, np.float32), 24000)
    rc, err = run(capsys, "--model", model, "-i", str(silent))
    assert rc == 2 and "silence" in err


def test_module_entry_point(tmp_path, model):
    save_rvq(tmp_path / "c.rvq", np.ones((8, 2), np.int32))
    proc = subprocess.run([sys.executable, "-m", "omnivoice.codec", "--model", model, "-i", str(tmp_path / "c.rvq"),
                           "--backend", "cpu", "-q"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and sf.info(tmp_path / "c.wav").frames == 2 * 960


def test_decoding_never_replaces_a_file_it_was_not_told_to(tmp_path, capsys, model):
    save_rvq(tmp_path / "orig.rvq", np.ones((8, 2), np.int32))
    (tmp_path / "orig.wav").write_bytes(b"the user's own recording")
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "orig.rvq"))
    assert rc == 0, err
    assert (tmp_path / "orig.wav").read_bytes() == b"the user's own recording"
    assert sf.info(tmp_path / "orig.decoded.wav").frames == 2 * 960
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "orig.rvq"))  # both names taken now
    assert rc == 2 and "orig.decoded.wav exists" in err and "-o" in err
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "orig.rvq"), "-o", str(tmp_path / "orig.wav"))
    assert rc == 0, err  # named with -o: replaced
    assert sf.info(tmp_path / "orig.wav").frames == 2 * 960


def test_encoding_does_not_replace_an_existing_rvq(tmp_path, capsys, model, golden):
    sf.write(tmp_path / "clip.wav", golden["clip_a"], 24000, subtype="FLOAT")
    save_rvq(tmp_path / "clip.rvq", np.ones((8, 2), np.int32))
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "clip.wav"))
    assert rc == 2 and "clip.rvq exists" in err
    assert read_rvq(tmp_path / "clip.rvq").codes.shape == (8, 2)


@pytest.mark.parametrize("name, extra, container", [("a.flac", [], "FLAC"), ("a.bin", ["--format", "opus"], "OGG")])
def test_decoded_audio_format(tmp_path, capsys, model, name, extra, container):
    save_rvq(tmp_path / "c.rvq", np.ones((8, 4), np.int32))
    rc, err = run(capsys, "--model", model, "-i", str(tmp_path / "c.rvq"), "-o", str(tmp_path / name), *extra)
    assert rc == 0, err
    assert sf.info(tmp_path / name).format == container


def test_model_folder_and_its_errors(tmp_path, capsys, model, tiny_gguf):
    save_rvq(tmp_path / "c.rvq", np.ones((8, 2), np.int32))
    rc, err = run(capsys, "--model", str(Path(model).parent), "-i", str(tmp_path / "c.rvq"))
    assert rc == 0, err
    empty = tmp_path / "empty"
    empty.mkdir()
    rc, err = run(capsys, "--model", str(empty), "-i", str(tmp_path / "c.rvq"), "-o", str(tmp_path / "x.wav"))
    assert rc == 2 and "holds no codec GGUF" in err
