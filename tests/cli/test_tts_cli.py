"""`python -m omnivoice.tts` on the tiny checkpoint: outputs, streaming, SRT dubbing, debug dumps, and one clear
message (with the bad-input exit status, no partial file) per bad input. The command's `main(argv)` runs in this
process; streaming to stdout and the process's own exit status run it in a subprocess."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import soundfile as sf

from tests.golden_paths import GOLDEN

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--steps", "4", "--seed", "0", "--quiet", "--backend", "cpu"]


@pytest.fixture(scope="module")
def model(tiny_gguf):
    return ["--model", str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"])]


class Run(NamedTuple):
    returncode: int
    stdout: bytes
    stderr: bytes


def tts(*args, stdin: bytes | None = None) -> Run:
    """`python -m omnivoice.tts ARGS` in this process (omnivoice.tts.main, what the command runs) from the
    repository root: its exit status and what it printed."""
    from omnivoice.tts import main

    out, err = io.StringIO(), io.StringIO()
    old_stdin, old_cwd = sys.stdin, os.getcwd()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main([str(a) for a in args])
    finally:
        sys.stdin = old_stdin
        os.chdir(old_cwd)
    return Run(rc, out.getvalue().encode(), err.getvalue().encode())


def tts_process(*args, stdin: bytes | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """The command in a subprocess: for audio streamed to stdout and the process's exit status."""
    return subprocess.run([sys.executable, "-m", "omnivoice.tts", *map(str, args)], input=stdin, cwd=ROOT,
                          capture_output=True, timeout=timeout)


def test_text_argument_to_wav(model, tmp_path):
    out = tmp_path / "hello.wav"
    r = tts("Hello there. How are you?", *model, *FAST, "-o", out, "--format", "wav24")
    assert r.returncode == 0, r.stderr.decode()
    audio, rate = sf.read(out)
    info = sf.info(out)
    assert rate == 24000 and info.subtype == "PCM_24" and len(audio) > 2400
    assert 0.05 < np.abs(audio).max() <= 0.51  # auto voice is peak-normalised to 0.5


def test_stdin_text_and_dump(model, tmp_path):
    out, dump = tmp_path / "a.wav", tmp_path / "dump"
    r = tts(*model, *FAST, "-o", out, "--dump", dump, "--lang", "en", stdin=b"Good morning.\n")
    assert r.returncode == 0, r.stderr.decode()
    ids, logits, tokens = (np.load(dump / n) for n in ("prompt_ids.npy", "logits0.npy", "tokens_0.npy"))
    assert ids.dtype == np.int32 and ids.shape[0] == 8
    assert tokens.dtype == np.int32 and tokens.shape[0] == 8
    assert logits.dtype == np.float32 and logits.shape == (8, tokens.shape[1], 1025)


def test_maskgit_test_writes_tokens_only(model, tmp_path):
    dump = tmp_path / "mg"
    r = tts(*model, *FAST, "--maskgit-test", "--dump", dump, "--duration", "0.4", stdin=b"Hi.")
    assert r.returncode == 0, r.stderr.decode()
    assert np.load(dump / "tokens_0.npy").shape == (8, 10)
    assert not (ROOT / "output.wav").exists() or (ROOT / "output.wav").stat().st_mtime < (dump / "tokens_0.npy").stat().st_mtime


def test_stream_to_stdout(model):
    r = tts_process(*model, *FAST, "-o", "-", stdin=b"First sentence here. Second one follows!")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout[:4] == b"RIFF" and r.stdout[8:12] == b"WAVE"
    audio, rate = sf.read(io.BytesIO(r.stdout), dtype="float32")
    assert rate == 24000 and len(audio) > 4800


def test_stream_by_line_writes_one_wav_per_line(model):
    r = tts_process(*model, *FAST, "-o", "-", "--stream-by-line", stdin=b"One line.\nAnother line.\n")
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.count(b"RIFF") == 2


def test_stream_by_line_into_a_file_is_one_wav(model, tmp_path):
    out = tmp_path / "lines.wav"
    with open(out, "wb") as f:
        r = subprocess.run([sys.executable, "-m", "omnivoice.tts", *model, *FAST, "-o", "-", "--stream-by-line"],
                           input=b"One line.\nAnother line.\n", stdout=f, stderr=subprocess.PIPE, cwd=ROOT,
                           timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    blob = out.read_bytes()
    assert blob.count(b"RIFF") == 1
    audio, rate = sf.read(out)
    assert rate == 24000 and len(audio) == (len(blob) - 44) // 2


@pytest.mark.parametrize("name, extra, container, subtype", [
    ("out.flac", [], "FLAC", "PCM_16"),
    ("out.ogg", [], "OGG", "VORBIS"),
    ("out.audio", ["--format", "mp3"], "MP3", "MPEG_LAYER_III"),
])
def test_output_format_by_extension_or_option(model, tmp_path, name, extra, container, subtype):
    r = tts("Hello there.", *model, *FAST, "-o", tmp_path / name, *extra)
    assert r.returncode == 0, r.stderr.decode()
    info = sf.info(tmp_path / name)
    assert (info.format, info.subtype, info.samplerate) == (container, subtype, 24000)


def test_no_postprocess_gives_exactly_the_duration(model, tmp_path):
    r = tts("One second of speech.", *model, *FAST, "--duration", "1", "--no-postprocess", "-o", tmp_path / "a.wav")
    assert r.returncode == 0, r.stderr.decode()
    assert sf.info(tmp_path / "a.wav").frames == 24000


def test_srt_dubbing_timeline(model, tmp_path):
    srt = tmp_path / "subs.srt"
    srt.write_text("1\n00:00:00,000 --> 00:00:00,800\nHello there.\n\n"
                   "2\n00:00:01,500 --> 00:00:02,200\nGoodbye now.\n", encoding="utf-8")
    out = tmp_path / "dub.wav"
    r = tts(*model, *FAST, "--srt", srt, "-o", out)
    assert r.returncode == 0, r.stderr.decode()
    audio, rate = sf.read(out)
    assert rate == 24000 and abs(len(audio) / rate - 2.2) < 0.05
    assert np.abs(audio[int(0.85 * rate):int(1.45 * rate)]).max() == 0  # silence between the cues


def test_clone_from_wav_then_reuse_saved_voice(model, tmp_path):
    d = np.load(GOLDEN / "ref_clone.npz")
    ref = tmp_path / "ref.wav"
    sf.write(ref, np.stack([d["ref_wav_input"]] * 2, 1), 24000)  # stereo on purpose
    voice = tmp_path / "me.rvq"
    r = tts("Nice to see you.", *model, *FAST, "--ref-wav", ref, "--ref-text", "Hello world. This is a short "
            "synthetic reference clip", "--save-voice", voice, "-o", tmp_path / "c1.wav")
    assert r.returncode == 0, r.stderr.decode()
    assert voice.is_file() and Path(str(voice) + ".txt").is_file()
    r = tts("Nice to see you.", *model, *FAST, "--ref-rvq", voice, "-o", tmp_path / "c2.wav")
    assert r.returncode == 0, r.stderr.decode()
    a, _ = sf.read(tmp_path / "c1.wav")
    b, _ = sf.read(tmp_path / "c2.wav")
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------------- bad input
def bad(r: Run | subprocess.CompletedProcess, *words: str) -> str:
    err = r.stderr.decode()
    assert r.returncode == 2, err
    for w in words:
        assert w.lower() in err.lower(), err
    assert "Traceback" not in err
    return err


def test_empty_text(model, tmp_path):  # the process's exit status, once
    bad(tts_process(*model, *FAST, "-o", tmp_path / "x.wav", stdin=b"  \n\t "), "empty")
    assert not (tmp_path / "x.wav").exists()


def test_unknown_language_suggests(model, tmp_path):
    bad(tts("Hi.", *model, *FAST, "--lang", "Englsh", "-o", tmp_path / "x.wav"), "Englsh", "English")


def test_invalid_instruct(model, tmp_path):
    bad(tts("Hi.", *model, *FAST, "--instruct", "female, purple voice", "-o", tmp_path / "x.wav"), "purple")


def test_ref_wav_without_ref_text(model, tmp_path):
    bad(tts("Hi.", *model, *FAST, "--ref-wav", GOLDEN / "README.md", "-o", tmp_path / "x.wav"), "--ref-text")


@pytest.mark.parametrize("kind", ["silent", "1ms", "not_audio"])
def test_bad_reference_audio(model, tmp_path, kind):
    ref = tmp_path / "ref.wav"
    if kind == "silent":
        sf.write(ref, np.zeros(48000, np.float32), 24000)
    elif kind == "1ms":
        sf.write(ref, np.full(24, 0.3, np.float32), 24000)
    else:
        ref.write_bytes(b"this is not a wav file at all")
    out = tmp_path / "x.wav"
    bad(tts("Hi.", *model, *FAST, "--ref-wav", ref, "--ref-text", "Hello.", "-o", out), str(ref.name))
    assert not out.exists()


def test_reference_at_8khz_is_resampled(model, tmp_path):
    d = np.load(GOLDEN / "ref_clone.npz")
    from omnivoice.audio.resample import resample

    ref = tmp_path / "ref8k.wav"
    sf.write(ref, resample(d["ref_wav_input"], 24000, 8000), 8000)
    r = tts("Hi there.", *model, *FAST, "--ref-wav", ref, "--ref-text", "Hello world.", "-o", tmp_path / "o.wav")
    assert r.returncode == 0, r.stderr.decode()


def test_malformed_srt(model, tmp_path):
    srt = tmp_path / "bad.srt"
    srt.write_text("1\n00:00:00,000 -> 00:00:01,000\nHello\n", encoding="utf-8")
    bad(tts(*model, *FAST, "--srt", srt, "-o", tmp_path / "x.wav"), "bad.srt", "2")


def test_missing_and_wrong_architecture_gguf(tiny_gguf, tmp_path):
    bad(tts("Hi.", "--model", tmp_path / "nope.gguf", "--codec", tiny_gguf["codec"], *FAST,
            "-o", tmp_path / "x.wav"), "nope.gguf")
    bad(tts("Hi.", "--model", tiny_gguf["codec"], "--codec", tiny_gguf["codec"], *FAST, "-o", tmp_path / "x.wav"),
        "omnivoice-lm")


def test_output_path_is_a_directory(model, tmp_path):
    bad(tts("Hi.", *model, *FAST, "-o", tmp_path), "directory")


def test_output_into_missing_directory(model, tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "x.wav"
    bad(tts("Hi.", *model, *FAST, "-o", target), str(target))
    assert not target.parent.exists()


@pytest.mark.parametrize("args, words", [
    (["--steps", "0"], "--steps must be an integer >= 1, got 0"),
    (["--speed", "0"], "--speed must be a finite number > 0"),
    (["--speed", "nan"], "--speed must be a finite number > 0"),
    (["--duration", "1e9"], "--duration must be a number of seconds > 0 and <= 1638.4"),
    (["--duration", "86400"], "--duration must be a number of seconds > 0 and <= 1638.4"),
    (["--duration", "inf"], "--duration must be"),
    (["--chunk-duration", "nan"], "--chunk-duration must be a finite number"),
    (["--lang", "Englsh"], "Englsh"),
    (["--ref-wav", "missing.wav", "--ref-text", "Hello."], "missing.wav: no such file"),
    (["--ref-wav", "missing.wav"], "--ref-wav needs --ref-text"),
    (["--ref-rvq", "missing.rvq"], "missing.rvq"),
    (["--ref-wav", "x.wav", "--ref-text", "typo.txt"], "--ref-text typo.txt: no such file"),
    (["--ref-wav", "x.wav", "--ref-text", "notes/typo"], "--ref-text notes/typo: no such file"),
    (["-o", "/no/such/folder/x.wav"], "/no/such/folder"),
    (["-o", "/proc/x.wav"], "-o /proc/x.wav: cannot be written"),  # writable to os.access as root; no new file
    (["-o", "x.xyz"], "cannot tell the audio format"),
    (["-o", "-", "--format", "flac"], "-o - streams WAV"),
    (["--srt", "missing.srt"], "missing.srt"),
    (["--llm-test"], "--dump"),
])
def test_inputs_are_checked_before_the_model_loads(capsys, args, words):
    from omnivoice.tts import main

    # the model does not exist: an error about the input shows it was checked first
    rc = main(["Hello.", "--model", "/no/such/model.gguf", "-q", *args])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "model" not in err.replace(words, ""), err


@pytest.mark.parametrize("where", ["stdin", "--ref-text", "--srt"])
def test_text_that_is_not_utf8_is_one_error_before_the_model(capsys, monkeypatch, tmp_path, where):
    from omnivoice.tts import main

    blob = b"1\n00:00:00,000 --> 00:00:01,000\nHello \x89 world\n"  # an SRT cue, and text in any case
    args = ["--model", "/no/such/model.gguf", "-q", "-o", str(tmp_path / "x.wav")]
    if where == "stdin":
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(blob), encoding="utf-8",
                                                           errors="surrogateescape"))
    else:
        (tmp_path / "in.txt").write_bytes(blob)
        args += ["--srt", str(tmp_path / "in.txt")] if where == "--srt" else \
            ["Hi.", "--ref-rvq", "voice.rvq", "--ref-text", str(tmp_path / "in.txt")]
    assert main(args) == 2
    err = capsys.readouterr().err
    byte = blob.index(b"\x89")
    assert f":3: not UTF-8 text (byte {byte}: invalid start byte); save it as UTF-8" in err, err
    assert "model" not in err and "surrogate" not in err, err


def test_threads_must_be_positive(capsys):
    from omnivoice.tts import main

    with pytest.raises(SystemExit) as e:
        main(["Hi.", "--threads", "-1"])
    assert e.value.code == 2 and "--threads: must be a whole number >= 1" in capsys.readouterr().err


def test_bad_srt_is_found_before_the_model(capsys, tmp_path):
    from omnivoice.tts import main

    srt = tmp_path / "bad.srt"
    srt.write_text("1\n00:00:00,000 -> 00:00:01,000\nHello\n", encoding="utf-8")
    assert main(["--srt", str(srt), "--model", "/no/such/model.gguf", "-o", str(tmp_path / "x.wav")]) == 2
    assert "bad.srt:2" in capsys.readouterr().err


def test_ref_text_with_a_slash_in_a_sentence_is_the_transcript(model, tmp_path):
    d = np.load(GOLDEN / "ref_clone.npz")
    ref = tmp_path / "ref.wav"
    sf.write(ref, d["ref_wav_input"], 24000)
    r = tts("Hi.", *model, *FAST, "--ref-wav", ref, "--ref-text", "Yes/no questions are fine.", "-o",
            tmp_path / "o.wav")
    assert r.returncode == 0, r.stderr.decode()


def test_list_languages(capsys):
    from omnivoice.tts import main

    assert main(["--list-languages"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 646 and any(line.split() == ["en", "English"] for line in lines)


def test_help_documents_formats_threads_duration_and_exit_status(capsys):
    from omnivoice.tts import main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for words in (".flac", "opus", "mp3", "--threads", "load average", "143 terminated",
                  "With --no-postprocess it is exactly that long", "no silence trimming, fades or padding"):
        assert words in text, words


@pytest.mark.parametrize("command", ["tts", "codec", "batch", "server"])
def test_the_threads_help_says_what_the_default_does(capsys, command):
    """ggml.threads.busy_cores samples the CPUs' time for SAMPLE_S seconds, the load average only where that
    cannot be read."""
    import importlib

    from omnivoice.ggml.threads import SAMPLE_S

    module = importlib.import_module(f"omnivoice.{command}" + ("" if command == "tts" else ".__main__"))
    parse = getattr(module, "main")
    with pytest.raises(SystemExit):
        parse(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"from a {SAMPLE_S:g} s sample of the CPUs' time, or the load average where that cannot be read" in text


@pytest.mark.parametrize("listing", ["--list-languages", "--list-devices"])
def test_a_listing_into_a_closed_pipe_ends_quietly(listing):
    read, write = os.pipe()
    os.close(read)  # `| head -1` that has had its line: every write of the listing meets a closed pipe
    try:
        r = subprocess.run([sys.executable, "-m", "omnivoice.tts", listing], cwd=ROOT, stdout=write,
                           stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(write)
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()


def test_list_devices():
    r = tts("--list-devices")
    assert r.returncode == 0 and r.stdout.decode().startswith("cpu:0")


def test_llm_test_dumps_logits_matching_a_synthesis_dump(model, tmp_path):
    r = tts("Good morning.", *model, *FAST, "--llm-test", "--dump", tmp_path / "l", "--clamp-fp16")
    assert r.returncode == 0, r.stderr.decode()
    r = tts("Good morning.", *model, *FAST, "--dump", tmp_path / "s", "-o", tmp_path / "s.wav")
    assert r.returncode == 0, r.stderr.decode()
    np.testing.assert_array_equal(np.load(tmp_path / "l" / "prompt_ids.npy"), np.load(tmp_path / "s" / "prompt_ids.npy"))
    np.testing.assert_allclose(np.load(tmp_path / "l" / "llm_logits.npy"), np.load(tmp_path / "s" / "logits0.npy"),
                               atol=1e-5)


def test_stream_with_empty_stdin_is_bad_input(model):
    r = tts_process(*model, *FAST, "-o", "-", stdin=b"\n  \n")
    bad(r, "empty")
    assert r.stdout == b""


@pytest.mark.parametrize("where", ["option", "environment"])
def test_a_thread_count_past_the_bound_is_bad_input(model, tmp_path, where):
    """--threads 100000 (or OMNIVOICE_THREADS=100000) ended in SIGSEGV in ggml's thread launch: now exit 2, one
    error line naming where the count came from, and no output."""
    import os

    out = tmp_path / "o.wav"
    cmd = [sys.executable, "-m", "omnivoice.tts", "Hallo.", *model, *FAST, "-o", str(out)]
    env = dict(os.environ, OMNIVOICE_THREADS="100000")
    if where == "option":
        cmd += ["--threads", "100000"]
        env.pop("OMNIVOICE_THREADS")
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=300, env=env)
    err = bad(r, "100000: more than the", "threads this process may start")
    assert ("--threads" if where == "option" else "OMNIVOICE_THREADS") in err
    assert os.listdir(tmp_path) == []
