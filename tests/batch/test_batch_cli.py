"""`python -m omnivoice.batch`: manifest checks, outputs, resuming, failures, formats, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from omnivoice.batch.__main__ import main
from tests.golden_paths import GOLDEN

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("batch")
    ref = np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"].astype(np.float32)
    (d / "refs").mkdir()
    sf.write(d / "refs" / "me.wav", ref, 24000, subtype="FLOAT")
    (d / "refs" / "broken.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" * 4)
    return d


def write_manifest(path: Path, lines: list) -> Path:
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x, ensure_ascii=False) for x in lines) + "\n",
                    encoding="utf-8")
    return path


def model_args(tiny_gguf) -> list[str]:
    return ["--model", str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--backend", "cpu"]


GOOD = [
    {"id": "auto", "text": "Hello world, this is the first line.", "language_id": "en", "seed": 1},
    {"id": "clone", "text": "Bonjour, une voix clonée.", "ref_audio": "refs/me.wav", "ref_text": "Hello world, this is me",
     "language": "French", "seed": 2},
    {"id": "design", "text": "A designed voice.", "instruct": "female, low pitch", "duration": 1.5, "seed": 3},
]
BAD = [
    "this line is not JSON",
    {"text": "no id"},
    {"id": "auto", "text": "a duplicate id"},
    {"id": "notext"},
    {"id": "missing", "text": "x", "ref_audio": "refs/none.wav", "ref_text": "x"},
    {"id": "broken", "text": "x", "ref_audio": "refs/broken.wav", "ref_text": "x"},
    {"id": "klingon", "text": "x", "language_id": "Klingonese"},
    {"id": "../escape", "text": "x"},
]


def test_bad_items_are_failure_records_and_the_rest_is_written(workdir, tiny_gguf, capsys):
    manifest = write_manifest(workdir / "mixed.jsonl", GOOD[:1] + BAD + GOOD[1:])
    out = workdir / "out-mixed"
    argv = [str(manifest), "-o", str(out), "--num-step", "4", "--save-tokens", *model_args(tiny_gguf)]
    assert main(argv) == 2  # some items were bad input
    names = sorted(p.name for p in out.iterdir())
    assert names == ["auto.npy", "auto.wav", "clone.npy", "clone.wav", "design.npy", "design.wav", "failures.jsonl"]
    records = [json.loads(x) for x in (out / "failures.jsonl").read_text().splitlines()]
    by_line = {r["line"]: r for r in records}
    assert sorted(by_line) == list(range(2, 10))
    reasons = {n: by_line[n]["reason"] for n in by_line}
    assert "line 2: not JSON" in reasons[2]
    assert "no 'id'" in reasons[3] and by_line[3]["id"] is None
    assert "duplicate id 'auto' (first on line 1)" in reasons[4]
    assert "no 'text'" in reasons[5] and by_line[5]["id"] == "notext"
    assert "refs/none.wav: no such file" in reasons[6]
    assert "not a readable audio file" in reasons[7]
    assert "unknown language 'Klingonese'" in reasons[8]
    assert "cannot be a file name" in reasons[9]
    err = capsys.readouterr().err
    assert "3 written" in err and "8 failed" in err and "audio s/s" in err

    # the written items are what synthesize() gives, tokens saved as int32 [8, T]
    import omnivoice

    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend="cpu") as ov:
        r = ov.synthesize(GOOD[1]["text"], language="French", ref_audio=str(workdir / "refs" / "me.wav"),
                          ref_text=GOOD[1]["ref_text"], seed=2, num_step=4)
    tokens = np.load(out / "clone.npy")
    assert tokens.dtype == np.int32 and tokens.shape[0] == 8
    np.testing.assert_array_equal(tokens, np.concatenate(r.tokens, axis=1))
    audio, rate = sf.read(out / "clone.wav", dtype="int16")
    assert rate == 24000 and len(audio) == len(r.audio)

    # a rerun resumes: nothing left to do but the bad lines
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.suffix == ".wav"}
    assert main(argv) == 2
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.suffix == ".wav"} == before
    assert "0 to do, 3 already done, 8 bad" in capsys.readouterr().err
    # --overwrite does them again; a clean manifest exits 0 and leaves no failures file
    clean = write_manifest(workdir / "clean.jsonl", GOOD)
    assert main([str(clean), "-o", str(out), "--num-step", "4", "--overwrite", *model_args(tiny_gguf)]) == 0
    assert not (out / "failures.jsonl").exists()
    assert all(p.stat().st_mtime_ns > before[p.name] for p in out.iterdir() if p.suffix == ".wav")


@pytest.mark.parametrize("fmt,ext", [("wav24", "wav"), ("flac", "flac"), ("mp3", "mp3"), ("ogg", "ogg")])
def test_formats(workdir, tiny_gguf, fmt, ext):
    manifest = write_manifest(workdir / f"fmt-{fmt}.jsonl", [{"id": "one", "text": "Format test.", "seed": 4}])
    out = workdir / f"out-{fmt}"
    assert main([str(manifest), "-o", str(out), "--num-step", "3", "--format", fmt, "-q", *model_args(tiny_gguf)]) == 0
    info = sf.info(out / f"one.{ext}")
    assert info.samplerate == 24000 and info.frames > 0


def test_unwritable_output_folder_exits_2_before_loading_anything(workdir, capsys):
    manifest = write_manifest(workdir / "one.jsonl", GOOD[:1])
    blocker = workdir / "a-file"
    blocker.write_text("x")
    # --model names nothing: had the model been loaded first, the error would be about it
    assert main([str(manifest), "-o", str(blocker / "out"), "--model", str(workdir / "no-model.gguf")]) == 2
    err = capsys.readouterr().err
    assert "output folder" in err and "cannot be written" in err and "model" not in err.replace("--model", "")


def test_bad_options_and_manifests_exit_2(workdir, tiny_gguf, capsys):
    manifest = write_manifest(workdir / "ok.jsonl", GOOD[:1])
    assert main([str(manifest), "-o", str(workdir / "o1"), "--batch-size", "zero"]) == 2
    assert main([str(manifest), "-o", str(workdir / "o1"), "--cpu-actors", "2"]) == 2
    assert main([str(workdir / "none.jsonl"), "-o", str(workdir / "o1")]) == 2
    (workdir / "latin1.jsonl").write_bytes(b'{"id": "x", "text": "caf\xe9"}\n')
    assert main([str(workdir / "latin1.jsonl"), "-o", str(workdir / "o1")]) == 2
    assert "--batch-size must be" in capsys.readouterr().err
    # the command line's options get synthesize's checks, named by their flags, before any line is read
    for flags, said in ((["--num-step", "0"], "--num-step must be an integer >= 1"),
                        (["--guidance-scale", "-1"], "--guidance-scale must be a finite number >= 0"),
                        (["--layer-penalty", "nan"], "--layer-penalty must be a finite number"),
                        (["--language", "Klingonese"], "--language: unknown language 'Klingonese'")):
        assert main([str(manifest), "-o", str(workdir / "o2"), *flags]) == 2
        assert said in capsys.readouterr().err
    assert not (workdir / "o2").exists()


def test_unknown_fields_and_unusable_ids_are_failure_records_as_the_line_said(tmp_path, capsys):
    manifest = write_manifest(tmp_path / "typos.jsonl", [
        {"id": "typo", "text": "Faster.", "speeed": 1.2},
        {"id": "other", "text": "x", "colour": "red", "Seed": 3},
        {"id": "../escape", "text": "x"},
        {"id": 7.5, "text": "x"},
        '{"id": "\\ud800/", "text": "x"}',  # a lone surrogate from a JSON escape, kept as the escape
    ])
    out = tmp_path / "out"
    # every line is bad, so no model is loaded (--model names nothing)
    assert main([str(manifest), "-o", str(out), "--model", str(tmp_path / "no-model.gguf")]) == 2
    text = (out / "failures.jsonl").read_text(encoding="utf-8")
    records = {r["line"]: r for r in map(json.loads, text.splitlines())}
    assert records[1]["id"] == "typo" and records[1]["reason"] == \
        "line 1: unknown field 'speeed' (did you mean 'speed'?)"
    assert records[2]["id"] == "other" and "unknown field 'colour' (the fields are id, text, " in records[2]["reason"]
    assert "unknown field 'Seed' (did you mean 'seed'?)" in records[2]["reason"]
    assert [records[n]["id"] for n in (3, 4, 5)] == ["../escape", 7.5, "\ud800/"]
    assert "model" not in capsys.readouterr().err.replace("--model", "")


def test_a_missing_manifest_is_worded_as_other_errors(tmp_path, capsys):
    missing = tmp_path / "missing.jsonl"
    assert main([str(missing), "-o", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"error: {missing}: no such file or directory\n"


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_interrupt_keeps_finished_items_and_a_rerun_resumes(workdir, tiny_gguf, sig, code):
    lines = [{"id": f"item{i:02d}", "text": f"Sentence number {i} of the interrupted run.", "seed": i}
             for i in range(8)]
    manifest = write_manifest(workdir / f"many-{code}.jsonl", lines)
    out = workdir / f"out-int-{code}"
    cmd = [sys.executable, "-m", "omnivoice.batch", str(manifest), "-o", str(out), "--num-step", "4",
           "--batch-size", "2", "--threads", "1", *model_args(tiny_gguf)]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not list(out.glob("*.wav")):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1].decode()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err.decode()
    assert "resume" in err.decode()
    done = sorted(p.name for p in out.iterdir())
    assert done and all(n.endswith(".wav") for n in done), done  # no temporary or partial files
    assert 0 < len(done) < len(lines)
    for name in done:
        assert sf.info(out / name).frames > 0
    rerun = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert f"{len(lines) - len(done)} to do, {len(done)} already done" in rerun.stderr.decode()
    assert len(list(out.glob("*.wav"))) == len(lines)
