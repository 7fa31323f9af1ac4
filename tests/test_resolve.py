"""Model resolution: a folder of converted GGUFs, the cache keyed by content, the cache CLI, and Hub failures
told apart (no such repository: bad input; no network: a failure)."""

from __future__ import annotations

import http.server
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from omnivoice.cache import main as cache_main
from omnivoice.convert import source
from omnivoice.resolve import ModelNotAvailable, list_cache, resolve_codec, resolve_model
from tests.golden_paths import GOLDEN

ROOT = Path(__file__).resolve().parents[1]
CODEC = "omnivoice-tokenizer-F32.gguf"


def folder_with(tmp_path: Path, tiny_gguf: dict, *keys: str) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    for k in keys:
        (folder / tiny_gguf[k].name).symlink_to(tiny_gguf[k])
    return folder


def test_folder_of_converted_ggufs_picks_and_says(tiny_gguf, tmp_path, caplog):
    folder = folder_with(tmp_path, tiny_gguf, "f32", "bf16", "q8_0", "codec")
    with caplog.at_level(logging.INFO, "omnivoice"):
        lm, codec = resolve_model(str(folder))
    assert (lm.name, codec.name) == ("omnivoice-base-F32.gguf", CODEC)
    assert "using omnivoice-base-F32.gguf (of BF16, F32, Q8_0) and " + CODEC in caplog.text
    assert resolve_model(str(folder), prefer="bf16")[0].name == "omnivoice-base-BF16.gguf"
    assert resolve_model(str(folder), prefer="f16")[0].name == "omnivoice-base-F32.gguf"  # f16 is not there
    assert resolve_model(str(folder), quant="q8_0")[0].name == "omnivoice-base-Q8_0.gguf"
    with pytest.raises(ModelNotAvailable, match="no omnivoice-base-F16.gguf .this folder has BF16, F32, Q8_0"):
        resolve_model(str(folder), quant="f16")
    assert resolve_codec(str(folder)).name == CODEC


def test_folder_errors_say_what_to_pass(tiny_gguf, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelNotAvailable, match="neither a folder of converted GGUFs .* nor an OmniVoice checkpoint"):
        resolve_model(str(empty))
    no_codec = folder_with(tmp_path, tiny_gguf, "f32")
    with pytest.raises(ModelNotAvailable, match="no codec GGUF"):
        resolve_model(str(no_codec))


def test_a_codec_tool_converts_only_the_codec_of_a_checkpoint(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    from omnivoice.codec.__main__ import main as codec_main
    from omnivoice.convert import convert_checkpoint

    monkeypatch.setenv("OMNIVOICE_CACHE", str(tmp_path / "cache"))
    clip = tmp_path / "clip.wav"
    sf.write(clip, np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"], 24000)
    args = ["--model", str(tiny_checkpoint), "-i", str(clip), "-o", str(tmp_path / "clip.rvq"), "--backend", "cpu"]
    assert codec_main(args + ["-q"]) == 0, capsys.readouterr().err
    (entry,) = list_cache()
    assert entry.files == (CODEC,) and entry.checkpoint == str(tiny_checkpoint.resolve())
    # the codec is the converter's, byte for byte; a later LM conversion into the entry keeps it
    _, reference = convert_checkpoint(tiny_checkpoint, tmp_path / "ref", "f32", progress=False)
    codec = entry.path / CODEC
    assert codec.read_bytes() == reference.read_bytes()
    before = codec.stat().st_mtime_ns
    lm, codec2 = resolve_model(str(tiny_checkpoint), quant="f32")
    assert lm.parent == entry.path and codec2 == codec and codec.stat().st_mtime_ns == before
    with pytest.raises(SystemExit):
        codec_main(["--help"])
    assert "checkpoint directory" in " ".join(capsys.readouterr().out.split())


def test_an_interrupted_first_conversion_leaves_no_empty_entry(tiny_checkpoint, tmp_path, monkeypatch):
    import omnivoice.convert as convert

    monkeypatch.setenv("OMNIVOICE_CACHE", str(tmp_path / "cache"))
    real = convert.write_gguf

    def interrupted(path, *args, **kwargs):  # Ctrl-C while the first file is written
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "write_gguf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        resolve_model(str(tiny_checkpoint), quant="f32")
    assert list_cache() == []

    calls = []

    def codec_interrupted(path, *args, **kwargs):  # the LM is written whole, Ctrl-C during the codec
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(path, *args, **kwargs)

    monkeypatch.setattr(convert, "write_gguf", codec_interrupted)
    with pytest.raises(KeyboardInterrupt):
        resolve_model(str(tiny_checkpoint), quant="f32")
    (entry,) = list_cache()  # the whole LM file stays, and the entry says which checkpoint it is from
    assert entry.files == ("omnivoice-base-F32.gguf",) and entry.checkpoint == str(tiny_checkpoint.resolve())
    monkeypatch.setattr(convert, "write_gguf", real)
    lm, codec = resolve_model(str(tiny_checkpoint), quant="f32")
    assert lm.parent == codec.parent == entry.path and [e.files for e in list_cache()] == \
        [("omnivoice-base-F32.gguf", CODEC)]


def tts(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omnivoice.tts", *map(str, args)], cwd=ROOT, capture_output=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_cache_follows_content_and_is_listed_and_cleaned(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("OMNIVOICE_CACHE", str(cache))
    ck = tmp_path / "ck"
    shutil.copytree(tiny_checkpoint, ck)

    # first run from the command line: -q keeps the conversion quiet too
    r = tts("Hi.", "--model", ck, "-q", "--steps", "2", "--backend", "cpu", "-o", tmp_path / "a.wav",
            env={"OMNIVOICE_CACHE": str(cache)})
    assert r.returncode == 0 and r.stderr == b"", r.stderr.decode()
    (entry,) = list_cache()
    assert not entry.stale and entry.checkpoint == str(ck.resolve()) and CODEC in entry.files

    # the second resolution reuses the entry and hashes nothing again (hashes are memoised by stat)
    hashed = []
    real = source.file_sha256
    monkeypatch.setattr(source, "file_sha256", lambda p: hashed.append(p) or real(p))
    lm, _ = resolve_model(str(ck))
    assert lm.parent == entry.path and hashed == []

    # other weights of the same size and the same mtime: a new entry, not the stale GGUF
    weights = ck / "model.safetensors"
    st = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-4] ^= 1  # the lowest mantissa bit of the last value
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    lm2, _ = resolve_model(str(ck))
    assert lm2.parent != entry.path and weights in hashed
    assert [e.stale for e in list_cache()] == [True, False]

    assert cache_main([]) == 0
    out = capsys.readouterr().out
    assert "2 entries" in out and "stale" in out and "current" in out and str(ck.resolve()) in out
    assert cache_main(["clean", "--dry-run"]) == 0 and len(list_cache()) == 2
    assert cache_main(["clean"]) == 0 and [e.path for e in list_cache()] == [lm2.parent]
    assert "removed " + entry.name in capsys.readouterr().out
    assert cache_main(["rm", "no-such-entry"]) == 2
    assert cache_main(["rm", lm2.parent.name]) == 0 and list_cache() == []


def test_a_folder_that_is_no_entry_is_neither_listed_nor_cleaned(tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("OMNIVOICE_CACHE", str(cache))
    reference = cache / "reference"  # tools/reference/run_reference.py's default results folder
    reference.mkdir(parents=True)
    (reference / "generate-0123.npz").write_bytes(b"kept")
    gone = cache / "OmniVoice-0123456789abcdef"  # an entry whose checkpoint is gone: stale
    gone.mkdir()
    (gone / "source.json").write_text('{"checkpoint": "%s"}' % (tmp_path / "no-such-checkpoint"))
    (gone / CODEC).write_bytes(b"GGUF")
    assert [(e.name, e.stale) for e in list_cache()] == [(gone.name, True)]
    assert cache_main(["clean", "--all"]) == 0
    assert "1 entry" in capsys.readouterr().out
    assert not gone.exists() and (reference / "generate-0123.npz").read_bytes() == b"kept"


class _NoSuchRepo(http.server.BaseHTTPRequestHandler):
    """Answers as the Hub does for a repository that does not exist."""

    def do_GET(self):
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "Repository not found"}')

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NoSuchRepo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_no_such_repository_is_bad_input(hub, tmp_path):
    r = tts("Hi.", "--model", "nobody/no-such-omnivoice", "-o", tmp_path / "x.wav",
            env={"HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf"), "OMNIVOICE_CACHE": str(tmp_path / "c")})
    err = r.stderr.decode()
    assert r.returncode == 2 and "nobody/no-such-omnivoice: no such model on the Hugging Face Hub" in err, err
    assert "Traceback" not in err and "HTTP Request" not in err


def test_network_failure_is_not_bad_input(tmp_path):
    r = tts("Hi.", "--model", "nobody/no-such-omnivoice", "-o", tmp_path / "x.wav",
            env={"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}", "HF_HOME": str(tmp_path / "hf"),
                 "OMNIVOICE_CACHE": str(tmp_path / "c")})
    err = r.stderr.decode()
    assert r.returncode == 1 and "could not download nobody/no-such-omnivoice" in err and "internal" not in err, err
    # one attempt, said once: huggingface_hub's retries of a dead network took 25 s, each warning printed twice
    lines = err.splitlines()
    assert "Retrying" not in err and len(lines) == len(set(lines)), err


def closed_port() -> int:
    """A local port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
