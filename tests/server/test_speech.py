"""POST /v1/audio/speech through the official openai client and httpx: formats, streaming, SSE, extensions."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from omnivoice.audio.io import encode_samples
from omnivoice.server.routes import tokens_sha256
from omnivoice.server.voices import BUILTIN_VOICES

from tests.audio_decode import CONTAINER, RATE, container, decode, decode_flac_stream

FAST = {"num_step": 2}
FORMATS = ["mp3", "opus", "ogg", "flac", "wav", "pcm"]
THREE = "The first one. A second sentence here! And the third?"
TWO = "Hi there. Bye now."


def _speech(server, fmt="pcm", **kw):
    """One whole response by the openai client -> (body, headers)."""
    extra = {**FAST, "stream_format": None, **kw.pop("extra", {})}  # null: whole (the default streams)
    r = server.openai().audio.speech.with_raw_response.create(
        model="tts-1", input=kw.pop("input", "Hello there."), voice=kw.pop("voice", "alloy"),
        response_format=fmt, extra_body=extra, **kw)
    return r.content, r.headers


@pytest.fixture(scope="module")
def pcm_reference(server):
    body, headers = _speech(server, "pcm", extra={"seed": 5})
    return decode(body, "pcm"), headers


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_decodes_to_the_expected_duration(server, pcm_reference, fmt):
    reference, ref_headers = pcm_reference
    body, headers = _speech(server, fmt, extra={"seed": 5})
    if fmt != "pcm":
        assert container(body) == CONTAINER[fmt]
    audio = decode(body, fmt)
    seconds = float(headers["x-omnivoice-audio-seconds"])
    assert len(audio) == len(reference) == round(seconds * RATE)
    assert headers["x-omnivoice-tokens-sha256"] == ref_headers["x-omnivoice-tokens-sha256"]
    if fmt in ("flac", "wav"):
        np.testing.assert_array_equal(audio, reference)


def test_the_openai_client_default_call(server):
    """client.audio.speech.create as its documentation shows it (mp3, no extensions)."""
    r = server.openai().audio.speech.create(model="gpt-4o-mini-tts", voice="coral", input="Hi.",
                                            instructions="female, low pitch", extra_body=FAST)
    assert container(r.content) == "MP3" and len(decode(r.content, "mp3")) > RATE // 10


def _stream(server, fmt, stream_format="audio", text=TWO, **extra):
    """A streamed response by the openai client -> (bytes in the order they came, content type)."""
    with server.openai().audio.speech.with_streaming_response.create(
            model="tts-1", input=text, voice="ash", response_format=fmt, stream_format=stream_format,
            extra_body={**FAST, "seed": 9, **extra}) as r:
        assert r.status_code == 200
        return list(r.iter_bytes()), r.headers["content-type"]


@pytest.fixture(scope="module")
def pcm_stream(server):
    pieces, _ = _stream(server, "pcm")
    return decode(b"".join(pieces), "pcm")


@pytest.mark.parametrize("fmt", FORMATS)
def test_streamed_formats_decode_to_the_expected_duration(server, pcm_stream, fmt):
    pieces, content_type = _stream(server, fmt)
    data = b"".join(pieces)
    audio = decode_flac_stream(data, len(pcm_stream)) if fmt == "flac" else decode(data, fmt)
    if fmt == "mp3":  # a stream has no Info tag to take the encoder's delay (1105 samples) and padding off
        assert len(pcm_stream) <= len(audio) <= len(pcm_stream) + 1105 + 576
    else:
        assert len(audio) == len(pcm_stream)
    if fmt in ("flac", "wav"):
        np.testing.assert_array_equal(audio, pcm_stream)
    assert content_type.startswith({"pcm": "audio/pcm", "wav": "audio/wav", "flac": "audio/flac",
                                    "mp3": "audio/mpeg"}.get(fmt, "audio/ogg"))


@pytest.fixture(scope="module")
def three_sentences(server):
    """httpx reads the chunked body as it arrives: pcm, a piece per sentence at least."""
    with server.client() as c, c.stream("POST", "/v1/audio/speech", json={
            "model": "tts-1", "input": THREE, "voice": "ash", "response_format": "pcm", "stream_format": "audio",
            "seed": 9, **FAST}) as r:
        assert r.status_code == 200 and r.headers.get("transfer-encoding") == "chunked"
        return [p for p in r.iter_raw() if p]


def test_stream_sends_each_sentence_as_it_finishes(three_sentences):
    assert len(three_sentences) >= 3  # HTTP chunks may be split on the way, never merged


def test_a_request_without_stream_format_is_streamed(server, three_sentences, ov):
    """As OpenAI's API does: no stream_format is `audio`. httpx sees the chunked body a piece per sentence, the
    openai client reads the same bytes, and they are OmniVoice.stream's audio; null asks for a whole answer."""
    body = {"model": "tts-1", "input": THREE, "voice": "ash", "response_format": "pcm", "seed": 9, **FAST}
    with server.client() as c, c.stream("POST", "/v1/audio/speech", json=body) as r:
        assert r.status_code == 200 and r.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.headers and "x-omnivoice-tokens-sha256" not in r.headers
        pieces = [p for p in r.iter_raw() if p]
    assert len(pieces) >= 3 and b"".join(pieces) == b"".join(three_sentences)
    with server.openai().audio.speech.with_streaming_response.create(
            model="tts-1", input=THREE, voice="ash", response_format="pcm", extra_body={**FAST, "seed": 9}) as r:
        assert r.headers.get("transfer-encoding") == "chunked"
        assert b"".join(r.iter_bytes()) == b"".join(three_sentences)
    streamed = ov.stream(THREE, instruct=BUILTIN_VOICES["ash"], seed=9, **FAST)
    assert b"".join(pieces) == b"".join(encode_samples(a, "wav16") for a in streamed)
    with server.client() as c:
        whole = c.post("/v1/audio/speech", json={**body, "stream_format": None})
    assert whole.status_code == 200 and "x-omnivoice-tokens-sha256" in whole.headers
    assert int(whole.headers["content-length"]) == len(whole.content)


def test_a_long_sentence_streamed_by_default_speaks_as_the_whole_answer(server):
    """The server does not cut a long first sentence at a clause unless --short-first-piece asks (the cut changes
    its tokens): one long sentence streamed is the whole answer's audio, byte for byte."""
    text = "When the long first sentence goes on, and on, past several clauses, with commas between them, it ends."
    body = {"model": "tts-1", "input": text, "voice": "ash", "response_format": "pcm", "seed": 9, **FAST}
    with server.client() as c:
        streamed = c.post("/v1/audio/speech", json=body)
        whole = c.post("/v1/audio/speech", json={**body, "stream_format": None})
    assert streamed.headers.get("transfer-encoding") == "chunked" and "content-length" in whole.headers
    assert streamed.content == whole.content


def test_sse_events_parse(server, three_sentences):
    pieces, content_type = _stream(server, "pcm", stream_format="sse", text=THREE)
    assert content_type.startswith("text/event-stream")
    events = []
    for block in b"".join(pieces).decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(json.loads(block[len("data: "):]))
    kinds = [e["type"] for e in events]
    assert kinds == ["speech.audio.delta"] * 3 + ["speech.audio.done"]  # one delta per sentence
    audio = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert audio == b"".join(three_sentences)
    usage = events[-1]["usage"]
    assert usage["output_tokens"] == round(len(audio) // 2 * 25 / RATE)
    assert usage["input_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


def test_builtin_voice_is_its_design_attributes(server, ov):
    """`onyx` is voice design with the attributes BUILTIN_VOICES gives it: the tokens of the Python API's."""
    _, headers = _speech(server, input="Deep voice.", voice="onyx", extra={"seed": 3})
    r = ov.synthesize("Deep voice.", instruct=BUILTIN_VOICES["onyx"], seed=3, **FAST)
    assert headers["x-omnivoice-tokens-sha256"] == tokens_sha256(r.tokens)
    _, same = _speech(server, input="Deep voice.", voice=None, instructions=BUILTIN_VOICES["onyx"],
                      extra={"seed": 3})
    assert same["x-omnivoice-tokens-sha256"] == headers["x-omnivoice-tokens-sha256"]


def test_extensions_reach_the_synthesis(server, ov):
    """language, seed, num_step, duration, guidance_scale and speed give the Python API's tokens."""
    opts = dict(language="English", seed=11, num_step=3, duration=1.2, guidance_scale=1.5)
    _, headers = _speech(server, input="Settings.", voice=None, speed=1.25, extra=opts)
    r = ov.synthesize("Settings.", speed=1.25, **opts)
    assert headers["x-omnivoice-tokens-sha256"] == tokens_sha256(r.tokens)
    assert r.tokens[0].shape[1] == round(1.2 * 25)
