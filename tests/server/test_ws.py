"""WS /v1/audio/speech/stream through the `websockets` client against the server subprocess: text in any split
gives the same audio, the events' offsets add up, bad messages and auth failures close with their codes."""

from __future__ import annotations

import json
import struct

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from omnivoice.text.streaming import stream_sentences
from omnivoice.server.ws import CLOSE_CODES

from tests.server.conftest import start_server, stop_server

FAST = {"num_step": 2}
# a first sentence over the engine's 80 characters: its first clause is spoken alone
TEXT = ("Well, this first sentence is rather long, because it keeps going with clauses and more clauses here. "
        "Short one. It costs 3.14 dollars, e.g. a lot. And the end?")


def _ws(server, path="/v1/audio/speech/stream", key: str | None = "header"):
    headers = {"Authorization": f"Bearer {server.api_key if key == 'header' else key}"} if key else {}
    return connect(server.url.replace("http://", "ws://") + path, additional_headers=headers, open_timeout=30,
                   max_size=None)


def _utterance(ws, start: dict, pieces, flush_after: set = frozenset()) -> tuple[list, bytes, dict]:
    """One start ... end exchange -> (events and audio frames in order, the audio, the done event)."""
    ws.send(json.dumps({"type": "start", **FAST, **start}))
    for i, piece in enumerate(pieces):
        ws.send(json.dumps({"type": "text", "text": piece}))
        if i in flush_after:
            ws.send(json.dumps({"type": "flush"}))
    ws.send(json.dumps({"type": "end"}))
    received = []
    while True:
        message = ws.recv(timeout=300)
        received.append(json.loads(message) if isinstance(message, str) else message)
        if isinstance(received[-1], dict) and received[-1]["type"] in ("done", "error"):
            break
    assert received[-1]["type"] == "done", received[-1]
    audio = b"".join(m for m in received if isinstance(m, bytes))
    return received, audio, received[-1]


def _check_offsets(received: list, header: bool = False) -> list[str]:
    """Each audio frame is followed by its segment event; the events' samples run on from 0 to done's count
    and cover exactly the audio frames. Returns the segments' texts."""
    frames = [m for m in received if isinstance(m, bytes)]
    if header:
        frames = frames[1:]
    events = [m for m in received if isinstance(m, dict)]
    segments = [e for e in events if e["type"] == "segment"]
    assert len(segments) == len(frames) > 0
    at = 0
    for frame, seg in zip(frames, segments):
        assert seg["start_sample"] == at and seg["end_sample"] - seg["start_sample"] == len(frame) // 2
        at = seg["end_sample"]
    assert events[-1] == {"type": "done", "samples": at}
    return [s["text"] for s in segments]


def test_text_split_at_every_character_speaks_as_the_whole_text(server):
    start = {"seed": 7, "language": "English"}
    with _ws(server) as ws:
        whole, audio, _ = _utterance(ws, start, [TEXT])
    with _ws(server) as ws:
        split, audio_split, _ = _utterance(ws, start, list(TEXT))
    texts = _check_offsets(whole)
    assert _check_offsets(split) == texts == stream_sentences(TEXT)
    assert texts[0] == "Well, this first sentence is rather long,"  # the engine's first-piece rule
    assert audio_split == audio


def test_wav_header_first_then_the_same_samples_and_a_new_start_after_done(server):
    """A library voice in wav: a WAV header of unknown length, then the pcm utterance's very samples; the same
    connection starts again after done."""
    start = {"voice": "saved", "seed": 3}
    with _ws(server) as ws:
        received, wav, _ = _utterance(ws, {**start, "response_format": "wav"}, ["Hi there. ", "Bye now."])
        _, pcm, done = _utterance(ws, start, ["Hi there. Bye now."])
    header = received[0]
    assert isinstance(header, bytes) and len(header) == 44
    assert header[:4] == b"RIFF" and header[8:16] == b"WAVEfmt "
    channels, rate, _, _, bits = struct.unpack("<HIIHH", header[22:36])
    assert (channels, rate, bits) == (1, 24000, 16)
    assert _check_offsets(received, header=True) == ["Hi there.", "Bye now."]
    assert wav[44:] == pcm and done["samples"] == len(pcm) // 2


def test_flush_speaks_what_is_buffered(server):
    with _ws(server) as ws:
        received, _, _ = _utterance(ws, {"voice": "alloy", "seed": 1}, ["Half a sen", "tence and the rest."],
                                    flush_after={0})
    assert _check_offsets(received) == ["Half a sen", "tence and the rest."]


def _refused(server, messages: list, key="header") -> tuple[dict, int]:
    """Send `messages` (JSON-encoded unless bytes or str); -> (the error event, the close code)."""
    with _ws(server, key=key) as ws:
        events = []
        try:
            for m in messages:
                ws.send(m if isinstance(m, (bytes, str)) else json.dumps(m))
        except ConnectionClosed:
            pass  # a wrong header is refused at once: the error event is read below all the same
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                message = ws.recv(timeout=60)
                if isinstance(message, str):
                    events.append(json.loads(message))
    errors = [e for e in events if e["type"] == "error"]
    assert len(errors) == 1, events
    return errors[0], closed.value.rcvd.code


START = {"type": "start", **FAST}


@pytest.mark.parametrize("messages, close, code", [
    (["{not json"], 4400, "invalid_json"),
    (['{"type": "start", "voice": ' + "[" * 5000 + "]" * 5000 + "}"], 4400, "invalid_json"),  # a 500 before
    ([b"\x00\x01"], 4400, "invalid_message"),
    ([{"type": "speak"}], 4400, "invalid_message"),
    ([["start"]], 4400, "invalid_message"),
    ([{"type": "text", "text": "Hi."}], 4400, "invalid_message"),
    ([{**START, "colour": "red"}], 4400, "unknown_parameter"),
    ([{**START, "speed": 9}], 4400, "invalid_value"),
    ([{**START, "response_format": "mp3"}], 4400, "invalid_value"),
    ([{**START, "language": "Klingonese"}], 4400, "invalid_value"),
    ([{**START, "voice": "nobody"}], 4404, "voice_not_found"),
    ([{**START, "voice": "../x"}], 4400, "invalid_voice_name"),
    ([START, {"type": "text", "text": 5}], 4400, "invalid_value"),
    ([START, {"type": "end"}, {"type": "text", "text": "late"}], 4400, "invalid_message"),
    ([START, START], 4400, "invalid_message"),
    ([START, {"type": "text", "text": "x" * 5000}], 4413, "pending_text_too_long"),
])
def test_bad_messages_close_with_the_documented_code(server, messages, close, code):
    error, got = _refused(server, messages)
    assert (got, error["code"]) == (close, code), error
    assert close in CLOSE_CODES and error["message"]
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200


@pytest.mark.parametrize("key, start", [
    (None, {}),                                  # no key at all
    (None, {"api_key": "wrong"}),
    ("wrong", {"api_key": "test-key-0123"}),     # a wrong header is refused whatever the start says
])
def test_auth_failures_close_with_4401(server, key, start):
    error, close = _refused(server, [{**START, **start}], key=key)
    assert (close, error["code"]) == (4401, "invalid_api_key")


def test_a_browser_authenticates_in_the_start_message(server):
    with _ws(server, key=None) as ws:
        received, audio, _ = _utterance(ws, {"api_key": server.api_key, "seed": 2}, ["Hello."])
    assert _check_offsets(received) == ["Hello."] and audio


@pytest.fixture(scope="module")
def idle_server(tiny_gguf, tmp_path_factory):
    srv = start_server(tiny_gguf, tmp_path_factory.mktemp("idle"), "--ws-idle-timeout", "1")
    yield srv
    stop_server(srv)


def test_an_idle_connection_is_closed_with_4408(idle_server):
    error, close = _refused(idle_server, [], key=None)
    assert (close, error["code"]) == (4408, "idle_timeout")
    error, close = _refused(idle_server, [START], key=None)  # an utterance that waits for text is idle too
    assert (close, error["code"]) == (4408, "idle_timeout")


def test_a_client_that_closes_cancels_its_sentences(server):
    from tests.server.test_concurrency import _wait_for, _wait_idle

    _wait_idle(server)
    before = server.metric("omnivoice_cancelled_requests_total")
    with _ws(server) as ws:
        ws.send(json.dumps({**START, "num_step": 64}))
        ws.send(json.dumps({"type": "text", "text": " ".join(f"Sentence number {i} is here." for i in range(40))}))
        ws.send(json.dumps({"type": "end"}))
        assert isinstance(ws.recv(timeout=300), bytes)
    _wait_for(server, "omnivoice_cancelled_requests_total", before)
    _wait_idle(server)


def test_connections_at_once_each_get_their_solo_audio(server):
    """Three streams at once (text arriving in pieces on each) share the engine: each gets the audio it gets
    alone."""
    from concurrent.futures import ThreadPoolExecutor

    starts = [{"seed": 11, "voice": "ash"}, {"seed": 12}, {"seed": 13, "voice": "saved", "language": "English"}]
    texts = ["One stream here. It goes on.", "Another one, elsewhere. Then more!", "A third voice. Done."]

    def speak(i: int) -> bytes:
        with _ws(server) as ws:
            return _utterance(ws, starts[i], [texts[i][j:j + 4] for j in range(0, len(texts[i]), 4)])[1]

    solo = [speak(i) for i in range(3)]
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(speak, range(3))) == solo
