"""Before the model is loaded: /health and the synthesis routes answer 503; a failed load says why."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest
from fastapi.testclient import TestClient

from omnivoice.server import ServerConfig, create_app


@pytest.fixture
def blocked_app(tmp_path):
    release = threading.Event()
    failures = []

    def loader(config):
        release.wait(30)
        raise FileNotFoundError("model not found: /nowhere.gguf")

    app = create_app(ServerConfig(voices=tmp_path / "voices"), loader=loader, on_load_error=failures.append)
    return app, release, failures


def test_503_until_loaded_then_the_failure_is_reported(blocked_app):
    app, release, failures = blocked_app
    with TestClient(app) as client:
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = client.post("/v1/audio/speech", json={"input": "Too early."})
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["error"]["code"] == "model_loading"
        assert client.get("/v1/audio/voices").status_code == 200  # the library needs no model
        release.set()
        for _ in range(300):
            if failures:
                break
            threading.Event().wait(0.01)
        assert isinstance(failures[0], FileNotFoundError)
        r = client.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "failed" and "/nowhere.gguf" in r.text
        assert client.post("/v1/audio/speech", json={"input": "x"}).json()["error"]["code"] == "model_load_failed"


def _server(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omnivoice.server", *args], capture_output=True, text=True,
                          timeout=120)


def test_a_model_that_cannot_be_loaded_exits_2(tmp_path):
    r = _server("--model", str(tmp_path / "missing.gguf"), "--port", "0", "--voices", str(tmp_path / "v"))
    assert r.returncode == 2 and "missing.gguf" in r.stderr


@pytest.mark.parametrize("make", ["missing", "not GGUF"])
def test_a_bad_model_is_one_error_before_the_server_starts(tmp_path, make):
    model = tmp_path / "model.gguf"
    if make == "not GGUF":
        model.write_bytes(b"junk" * 16)
        (tmp_path / "omnivoice-tokenizer-F32.gguf").write_bytes(b"GGUF")
    with socket.socket() as taken:  # the port is in use too: the model is checked first, so that is not reached
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = _server("--model", str(model), "--port", str(taken.getsockname()[1]), "--voices", str(tmp_path / "v"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count(str(model)) == 1 and r.stderr.startswith("error: "), r.stderr
    assert "Started server process" not in r.stderr and "address" not in r.stderr.lower()


def test_a_port_in_use_is_one_error_naming_it(tiny_gguf, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _server("--model", str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--port", str(port),
                    "--voices", str(tmp_path / "v"))
    assert r.returncode == 1, r.stderr  # not the input's fault, and not uvicorn's own status 3 ("out of memory")
    lines = r.stderr.splitlines()
    assert lines == [f"error: cannot listen on 127.0.0.1:{port}: Address already in use (--host, --port)"], lines


@pytest.mark.parametrize("flag, value", [("--first-audio-ms", "-5"), ("--max-step-positions", "0")])
def test_a_bad_schedule_knob_is_one_error(tiny_gguf, tmp_path, flag, value):
    r = _server("--model", str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--port", "0",
                "--voices", str(tmp_path / "v"), flag, value)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"error: {flag} must be") and value in r.stderr, r.stderr
