"""A second server with tight limits (one request at a time, one waiting) and no API key: a full queue answers
503 with Retry-After; a long request does not hold a short one behind it; bodies over the upload limit answer
413; without a key nothing asks for one."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from .conftest import start_server, stop_server

LONG = " ".join(f"Sentence number {i} is here." for i in range(40))


@pytest.fixture(scope="module")
def small(tiny_gguf, tmp_path_factory):
    srv = start_server(tiny_gguf, tmp_path_factory.mktemp("small"), "--max-batch", "1", "--max-queue", "1",
                       "--max-upload-mb", "0.2")
    yield srv
    assert stop_server(srv) == 143  # SIGTERM: a graceful shutdown, then the house's exit status


def _until(server, name: str, value: float) -> None:
    deadline = time.monotonic() + 120
    while server.metric(name) != value:
        assert time.monotonic() < deadline, f"{name} never reached {value}"
        time.sleep(0.05)


def test_a_full_queue_answers_503_with_retry_after(small):
    """One request runs (a long stream), one waits in the queue of 1: the third is refused at once."""
    with httpx.Client(base_url=small.url, timeout=120) as c, c.stream("POST", "/v1/audio/speech", json={
            "input": LONG, "response_format": "pcm", "stream_format": "audio", "num_step": 2}) as running:
        assert running.status_code == 200
        _until(small, "omnivoice_active_requests", 1)
        with ThreadPoolExecutor(1) as pool:
            # due after every piece of the running stream (a whole answer of 120 s is due as a real-time stream
            # of it would end), so the schedule does not put it before the stream: it waits in the queue
            waiting = pool.submit(c.post, "/v1/audio/speech", json={"input": "Waiting.", "response_format": "pcm",
                                                                   "num_step": 1, "duration": 120,
                                                                   "stream_format": None})
            _until(small, "omnivoice_queue_depth", 1)
            r = c.post("/v1/audio/speech", json={"input": "Refused.", "response_format": "pcm"})
            assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["code"] == "queue_full" and r.json()["error"]["type"] == "server_error"
            running.close()  # hang up: the long stream is cancelled and the waiting request runs
            assert waiting.result().status_code == 200


def test_a_long_request_does_not_hold_the_others(small):
    """One slot. A request for two minutes of audio is generated; a short request sent meanwhile is answered while
    the long one is still being generated (not after it): the schedule parks the long one, whose deadline is
    later, and resumes it."""
    import threading

    done = []

    def say(body: dict) -> None:
        with httpx.Client(base_url=small.url, timeout=300) as c:
            r = c.post("/v1/audio/speech", json={"response_format": "pcm", "stream_format": None, **body})
            assert r.status_code == 200 and len(r.content) > 0, r.text
        done.append(body["input"])

    long = threading.Thread(target=say, args=({"input": "Hallo.", "duration": 120, "num_step": 32},))
    long.start()
    _until(small, "omnivoice_active_requests", 1)
    say({"input": "Quick.", "num_step": 2})
    assert done == ["Quick."]
    _until(small, "omnivoice_active_requests", 1)  # the long one generates again (else it was done already)
    long.join()
    assert done == ["Quick.", "Hallo."]


def test_bodies_over_the_limit_are_413(small, ref_wav):
    big = b"\0" * 220_000
    r = httpx.post(f"{small.url}/v1/audio/voices", data={"name": "big", "transcript": "t"},
                   files={"file": ("big.wav", big, "audio/wav")})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunked():  # no Content-Length: refused while reading
        for _ in range(30):
            yield b"x" * 10_000

    r = httpx.post(f"{small.url}/v1/audio/speech", content=chunked(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert not list(small.voices.iterdir())
    with open(ref_wav, "rb") as f:  # a small upload still goes through
        r = httpx.post(f"{small.url}/v1/audio/voices", data={"name": "small", "transcript": "Hello."},
                       files={"file": ("ref.wav", f, "audio/wav")}, timeout=120)
    assert r.status_code == 201, r.text


def test_no_key_set_means_no_key_asked(small):
    r = httpx.post(f"{small.url}/v1/audio/speech", json={"input": "Open.", "response_format": "pcm",
                                                         "num_step": 1}, timeout=120)
    assert r.status_code == 200 and len(r.content) > 0
