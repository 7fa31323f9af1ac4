"""Many clients at once, and clients that leave: every request equals its solo result; leaving stops the work."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

LONG = " ".join(f"Sentence number {i} is here." for i in range(40))
SLOW = {"input": LONG, "response_format": "pcm", "num_step": 64}  # seconds of work even when batched on a GPU


def _requests() -> list[dict]:
    """16 different requests: voices (auto, built-in, library, design), texts, seeds, step counts, speeds."""
    voices = [None, "alloy", "saved", "onyx"]
    texts = ["Hi.", "Hello there.", "Good morning to you.", "One more."]
    out = []
    for i in range(16):
        body = {"model": "tts-1", "input": texts[i % 4], "response_format": "pcm", "seed": 100 + i,
                "num_step": 1 + i % 3, "speed": 1.0 + 0.1 * (i % 2)}
        if voices[i // 4]:
            body["voice"] = voices[i // 4]
        if i % 5 == 0:
            body["instructions"] = "female, high pitch"
        out.append(body)
    return out


def _say(server, body: dict) -> tuple[str, bytes]:
    body = dict(body)
    r = server.openai().audio.speech.with_raw_response.create(
        model=body.pop("model"), input=body.pop("input"), voice=body.pop("voice", None),
        response_format=body.pop("response_format"), speed=body.pop("speed"),
        **({"instructions": body.pop("instructions")} if "instructions" in body else {}),
        extra_body={**body, "stream_format": None})  # whole, with its tokens' hash
    return r.headers["x-omnivoice-tokens-sha256"], r.content


def test_16_concurrent_requests_each_equal_their_solo_result(server):
    requests = _requests()
    solo = [_say(server, body) for body in requests]
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(lambda body: _say(server, body), requests))
    assert len({sha for sha, _ in solo}) == 16  # 16 different results ...
    for i, ((sha, audio), (sha1, audio1)) in enumerate(zip(solo, together)):
        assert sha1 == sha, f"request {i}: tokens differ when run with 15 others"
        assert audio1 == audio, f"request {i}: audio differs when run with 15 others"


def _wait_for(server, name: str, above: float, timeout: float = 120) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = server.metric(name)
        if value > above:
            return value
        time.sleep(0.1)
    pytest.fail(f"{name} stayed at {above} for {timeout} s:\n{server.log.read_text()[-3000:]}")


def _wait_idle(server, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.metric("omnivoice_active_requests") == 0 and server.metric("omnivoice_queue_depth") == 0:
            return
        time.sleep(0.1)
    pytest.fail("the engine did not go idle")


def test_a_client_that_leaves_a_stream_cancels_its_work(server):
    """40 sentences streamed; the client reads the first audio and hangs up: the synthesis stops early."""
    _wait_idle(server)
    before = server.metric("omnivoice_cancelled_requests_total")
    with server.client() as c, c.stream("POST", "/v1/audio/speech", json={**SLOW, "stream_format": "audio"}) as r:
        assert r.status_code == 200
        assert next(r.iter_raw())
    _wait_for(server, "omnivoice_cancelled_requests_total", before)
    _wait_idle(server)


def test_a_client_that_hangs_up_before_its_whole_response_cancels_its_work(server):
    """The request is written on a raw socket, which is closed once the engine works on it."""
    _wait_idle(server)
    before = server.metric("omnivoice_cancelled_requests_total")
    body = json.dumps(SLOW).encode()
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Authorization: Bearer {server.api_key}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                  + body)
        _wait_for(server, "omnivoice_active_requests", 0)
    _wait_for(server, "omnivoice_cancelled_requests_total", before)
    _wait_idle(server)


def _packed(server) -> tuple[float, float]:
    """The engine's LM steps so far, and the requests in them summed: equal while it runs one at a time."""
    return server.metric("omnivoice_engine_steps_total"), server.metric("omnivoice_engine_packed_requests_total")


def test_requests_in_flight_together_share_the_engine(server):
    """Four requests sent at once: the engine's steps hold more requests than there are steps, so some step
    packed two or more of them (a server that runs one at a time adds as many requests as steps)."""
    _wait_idle(server)
    steps0, packed0 = _packed(server)
    bodies = [{"model": "tts-1", "input": " ".join(f"Request {k} says sentence {i}." for i in range(3)),
               "response_format": "pcm", "speed": 1.0, "seed": k, "num_step": 16} for k in range(4)]
    with ThreadPoolExecutor(4) as pool:
        audio = [a for _, a in pool.map(lambda body: _say(server, body), bodies)]
    assert all(audio)
    steps, packed = _packed(server)
    assert steps > steps0 and packed - packed0 > steps - steps0, "no two requests were ever generated together"


def test_a_short_request_finishes_during_a_long_stream(server):
    """A short request sent once a long stream has begun is answered while the stream still runs: it joins
    the running batch rather than waiting for the long one to end."""
    _wait_idle(server)
    short = {"model": "tts-1", "input": "Hi.", "response_format": "pcm", "speed": 1.0, "num_step": 4}

    def say_short() -> float:
        assert _say(server, short)[1]
        return time.monotonic()

    # 8 sentences of 32 steps: after the first audio, about 50 times the short request's 4 steps are left
    body = {"model": "tts-1", "input": " ".join(f"Sentence number {i} is here." for i in range(8)),
            "response_format": "pcm", "num_step": 32, "stream_format": "audio"}
    with ThreadPoolExecutor(1) as pool, server.client() as c, \
            c.stream("POST", "/v1/audio/speech", json=body) as r:
        assert r.status_code == 200
        chunks = r.iter_raw()
        assert next(chunks)  # the long one is under way
        short_done = pool.submit(say_short)
        n = sum(1 for _ in chunks)
        long_done = time.monotonic()
        assert n > 0
        assert short_done.result() < long_done, "the short request waited for the long stream to end"
