"""Hostile clients against a real server (issue 56): JSON nested 5 000 deep, audio with absurd samples, two
Authorization headers, a shutdown with a whole response in flight, requests past --max-duration, request heads
and bodies that never end, and hundreds of idle sockets under a low open-file limit. Each answer is a clear 4xx or the
connection closed, never a 500, a traceback in the log or a server that stops answering its other clients."""

from __future__ import annotations

import io
import socket
import time

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.fixtures.servers import closed_by_server

from .conftest import API_KEY, start_server, stop_server


def _log_since(server, start: int) -> str:
    return server.log.read_text(errors="replace")[start:]


def _log_size(server) -> int:
    return len(server.log.read_text(errors="replace"))


# --------------------------------------------------------------------------------------- the session's server
def test_json_nested_5000_deep_is_400_without_a_traceback(server):
    start = _log_size(server)
    body = '{"input": "Hallo.", "voice": ' + "[" * 5000 + "]" * 5000 + "}"
    with server.client() as c:
        r = c.post("/v1/audio/speech", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json" and "nested too deeply" in r.json()["error"]["message"]
    log = _log_since(server, start)
    assert "Traceback" not in log and "RecursionError" not in log


@pytest.mark.parametrize("value", [1e30, np.inf, np.nan])
def test_a_voice_with_absurd_samples_is_400_naming_the_file(server, value):
    """A float WAV of 1e30 answered 500 (its RMS is inf, refused only when the voice was saved)."""
    samples = np.full(24000, 0.1, np.float32)
    samples[100] = value
    buf = io.BytesIO()
    sf.write(buf, samples, 24000, format="WAV", subtype="FLOAT")
    with server.client() as c:
        r = c.post("/v1/audio/voices", data={"name": "absurd", "transcript": "Hello."},
                   files={"file": ("absurd.wav", buf.getvalue(), "audio/wav")})
        assert r.status_code == 400, r.text
        assert "absurd.wav" in r.json()["error"]["message"] and r.json()["error"]["param"] == "file"
        assert c.get("/v1/audio/voices/absurd").status_code == 404


@pytest.mark.parametrize("first", ["Bearer wrong", f"Bearer {API_KEY}"])
def test_two_authorization_headers_are_400(server, first):
    """The last of two Authorization headers counted; now neither does."""
    headers = [("Authorization", first), ("Authorization", f"Bearer {API_KEY}" if "wrong" in first else "Bearer x")]
    r = httpx.get(f"{server.url}/v1/models", headers=headers, timeout=30)
    assert r.status_code == 400 and "2 Authorization headers" in r.json()["error"]["message"]
    assert r.json()["error"]["code"] == "duplicate_header"
    assert httpx.get(f"{server.url}/v1/models", headers=server.headers, timeout=30).status_code == 200


# --------------------------------------------------------------------------- a server under `ulimit -n 256`
@pytest.fixture(scope="module")
def crowded(tiny_gguf, tmp_path_factory):
    """Long header and body timeouts: what keeps it serving under the idle sockets is the connection limit."""
    srv = start_server(tiny_gguf, tmp_path_factory.mktemp("crowded"), "--max-duration", "5", "--header-timeout",
                       "600", "--body-timeout", "600", open_files=256)
    yield srv
    assert stop_server(srv) == 143


def test_a_duration_past_max_duration_is_400_naming_the_limit(crowded):
    with httpx.Client(base_url=crowded.url, timeout=120) as c:
        r = c.post("/v1/audio/speech", json={"input": "Hallo.", "duration": 10, "response_format": "pcm"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "duration_too_long"
        assert "at most 5 s" in r.json()["error"]["message"] and "--max-duration" in r.json()["error"]["message"]
        assert r.json()["error"]["param"] == "duration"
        r = c.post("/v1/audio/speech", json={"input": "Hallo.", "duration": 1, "num_step": 1, "response_format": "pcm"})
        assert r.status_code == 200 and len(r.content) > 0


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _idle_sockets(url: str, n: int) -> list[socket.socket]:
    """`n` connections that each send half a request head and nothing more."""
    socks = []
    for _ in range(n):
        s = _connect(url)
        s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    return socks


def test_idle_sockets_past_the_open_file_limit_do_not_stop_the_service(crowded):
    """400 half-open request heads against a server allowed 256 files: it closes the oldest idle ones to make
    room, keeps answering, and logs no "Too many open files"."""
    start = _log_size(crowded)
    socks = _idle_sockets(crowded.url, 400)
    try:
        with httpx.Client(base_url=crowded.url, timeout=60) as c:
            assert c.get("/health").status_code == 200
            r = c.post("/v1/audio/speech", json={"input": "Hi.", "num_step": 1, "response_format": "pcm"})
            assert r.status_code == 200 and len(r.content) > 0
        more = _idle_sockets(crowded.url, 100)  # and again, with the first ones still open on this side
        socks += more
        assert httpx.get(f"{crowded.url}/health", timeout=60).status_code == 200
    finally:
        for s in socks:
            s.close()
    assert "Too many open files" not in _log_since(crowded, start)


# --------------------------------------------------------------------------------- short header/body timeouts
@pytest.fixture(scope="module")
def strict(tiny_gguf, tmp_path_factory):
    srv = start_server(tiny_gguf, tmp_path_factory.mktemp("strict"), "--header-timeout", "2", "--body-timeout", "2")
    yield srv
    assert stop_server(srv) == 143


@pytest.mark.parametrize("sent", [
    b"GET /health HTTP/1.1\r\nHost: x\r\n",  # a head that never ends
    b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
])
def test_a_head_or_body_that_never_comes_is_closed(strict, sent):
    start = _log_size(strict)
    with _connect(strict.url) as s:
        s.sendall(sent)
        assert closed_by_server(s, 60)
    assert httpx.get(f"{strict.url}/health", timeout=30).status_code == 200
    log = _log_since(strict, start)  # a body that stalled is a client gone, not an internal error (tools/fuzz.py)
    assert "Traceback" not in log and "internal error" not in log, log


def test_a_slow_head_sent_a_byte_at_a_time_is_closed(strict):
    """A client trickling its head keeps the connection busy but never finishes: the head's deadline counts from
    the connection, not from the last byte."""
    with _connect(strict.url) as s:
        closed = False
        for byte in b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 200:
            try:
                s.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.1)
        assert closed or closed_by_server(s, 10)


def test_a_shutdown_with_a_whole_request_in_flight_logs_no_unretrieved_future(tiny_gguf, tmp_path):
    """SIGTERM while a whole (non-streamed) request runs past the graceful shutdown's 10 s: the engine fails it
    with Cancelled after its task was cancelled, and asyncio logged "Future exception was never retrieved"."""
    from concurrent.futures import ThreadPoolExecutor

    srv = start_server(tiny_gguf, tmp_path)
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, f"{srv.url}/v1/audio/speech", timeout=300, json={
                "input": "A sentence that keeps the engine busy for a good while. " * 30, "num_step": 256,
                "response_format": "pcm", "stream_format": None})  # null: one whole answer
            deadline = time.monotonic() + 120
            while srv.metric("omnivoice_active_requests") != 1:
                assert time.monotonic() < deadline and not pending.done(), "the request never started"
                time.sleep(0.05)
            assert stop_server(srv) == 143
            try:
                pending.result()
            except httpx.TransportError:
                pass  # the server went away under it
    finally:
        stop_server(srv)
    log = srv.log.read_text(errors="replace")
    # a graceful shutdown to its end (the CLI's signal watchdog leaves a server's own handler alone)
    assert "Finished server process" in log and "never retrieved" not in log, log
