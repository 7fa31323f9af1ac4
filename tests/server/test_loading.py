"""Before the model is loaded: /health and the synthesis routes answer 503; a failed load says why."""

from __future__ import annotations

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


def test_a_model_that_cannot_be_loaded_exits_2(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "omnivoice.server", "--model", str(tmp_path / "missing.gguf"),
                        "--port", "0", "--voices", str(tmp_path / "v")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "missing.gguf" in r.stderr
