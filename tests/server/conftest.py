"""A real server: `python -m omnivoice.server` in a subprocess on a free port, serving the tiny F32 checkpoint."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.backend import BACKEND
from tests.fixtures.servers import free_port, stop_process
from tests.golden_paths import GOLDEN

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "test-key-0123"
REF_TEXT = "Hello world, this is me"
# One ggml thread everywhere: on a shared 2-core machine two spinning threads per process cost 10x the CPU time
# of one (measured under load: 1.8 s against 0.1 s of CPU per request).


@dataclass
class Server:
    url: str
    voices: Path
    proc: subprocess.Popen
    log: Path
    api_key: str | None

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=120, **kw)

    def openai(self):
        from openai import OpenAI

        return OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key or "none", max_retries=0, timeout=120)

    def metric(self, name: str, **labels) -> float:
        """One sample of /metrics, parsed by prometheus_client's own parser (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return 0.0


def start_server(tiny_gguf, folder: Path, *args: str, api_key: str | None = None, wait: bool = True,
                 open_files: int | None = None) -> Server:
    """`open_files`: the server's open-file limit (soft and hard), as `ulimit -n` sets it."""
    voices = folder / "voices"
    log = folder / "server.log"
    port = free_port()
    cmd = [sys.executable, "-m", "omnivoice.server", "--model", str(tiny_gguf["f32"]), "--codec",
           str(tiny_gguf["codec"]), "--backend", BACKEND,
           "--port", str(port), "--voices", str(voices), "--threads", "1", "--log-level", "info", *args]
    env = dict(os.environ, OMNIVOICE_API_KEY=api_key or "")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=None if open_files is None else lambda: resource.setrlimit(
                                    resource.RLIMIT_NOFILE, (open_files, open_files)))
    server = Server(f"http://127.0.0.1:{port}", voices, proc, log, api_key)
    if wait:
        wait_ready(server)
    return server


def wait_ready(server: Server, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"server exited with {server.proc.returncode}:\n{server.log.read_text()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    stop_server(server)
    raise RuntimeError(f"server not ready after {timeout} s:\n{server.log.read_text()}")


def stop_server(server: Server) -> int:
    return stop_process(server.proc)


@pytest.fixture(scope="session")
def ref_wav(tmp_path_factory) -> Path:
    """A 24 kHz reference clip (the clone golden's input audio) as a 16-bit WAV file."""
    path = tmp_path_factory.mktemp("ref") / "ref.wav"
    sf.write(path, np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"], 24000, subtype="PCM_16")
    return path


@pytest.fixture(scope="session")
def server(tiny_gguf, tmp_path_factory, ref_wav):
    """The session's server (with an API key). Its voices folder starts with `saved`, written by
    `python -m omnivoice.tts --save-voice` while the server loads."""
    folder = tmp_path_factory.mktemp("server")
    (folder / "voices").mkdir()
    cli = subprocess.Popen([sys.executable, "-m", "omnivoice.tts", "Hi.", "--model", str(tiny_gguf["f32"]),
                            "--codec", str(tiny_gguf["codec"]), "--backend", BACKEND, "--threads", "1",
                            "--steps", "1", "-q", "--ref-wav", str(ref_wav), "--ref-text", REF_TEXT,
                            "--save-voice", str(folder / "voices" / "saved.rvq"), "-o", str(folder / "cli.wav")],
                           cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    srv = start_server(tiny_gguf, folder, "--max-queue", "64", api_key=API_KEY, wait=False)
    try:
        out = cli.communicate(timeout=300)[0]
        assert cli.returncode == 0, out.decode()
        wait_ready(srv)
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture(scope="session")
def ov(tiny_gguf):
    """The Python API on the same model, for comparisons."""
    import omnivoice

    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend=BACKEND, n_threads=1) as ov:
        yield ov
