"""The endpoints.

    POST   /v1/audio/speech          OpenAI's speech request (schema.py) -> audio, or a stream of it
    POST   /v1/audio/speech/clone    multipart: file (reference audio), transcript, input, other speech fields
    GET    /v1/audio/voices          the library's voices and the built-in names
    POST   /v1/audio/voices          multipart: name, transcript, file (or audio_sample) -> encoded once, saved
    GET    /v1/audio/voices/{name}   one library voice
    DELETE /v1/audio/voices/{name}
    GET    /v1/models, /v1/models/{id}
    GET    /health                   200 once the model is loaded, 503 before
    GET    /metrics                  Prometheus text format (metrics.py)

Responses are streamed by default, as OpenAI's speech API does (`stream_format` absent is `audio`): the audio
goes out as the engine makes it, sentence by sentence (a long first sentence cut at a clause with
--short-first-piece, which changes its tokens), in every response format this server answers (aac is refused
whole or streamed; a streamed WAV's header says "unknown length" and an MP3 stream has no Info frame:
audio.io.AudioEncoder); `audio` sends chunked bytes of the response format, `sse` `speech.audio.delta` events
(base64 audio) and a closing `speech.audio.done`. `"stream_format": null` (in a form, an empty field) asks for
one whole response, spoken as `OmniVoice.synthesize` speaks the text; it carries `X-OmniVoice-Tokens-SHA256`:
the SHA-256 of the generated tokens, each chunk's int32 [8, T] array as little-endian C-order bytes, chunk after
chunk; equal hashes mean equal tokens (how the tests compare the server with the Python API). A client that
goes away cancels its request.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import hashlib
import io
import json
import logging
import time
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import AsyncIterator

import numpy as np
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ..audio.io import AudioFileError, load_audio
from ..pipeline import Cancelled
from . import encoding
from .engine_adapter import EngineFull
from .errors import CLIENT_GONE, APIError, parse_json
from .metrics import CONTENT_TYPE_LATEST
from .schema import SpeechRequest, synthesis_request
from .voices import BUILTIN_VOICES, VoiceExists, VoiceNameError, VoiceNotFound, check_name, resolve_voice

log = logging.getLogger("omnivoice.server")
router = APIRouter()



def _state(request: Request):
    return request.app.state.server


# ----------------------------------------------------------------------------------------------- health
@router.get("/health")
async def health(request: Request):
    state = _state(request)
    if state.backend is None:
        status = "failed" if state.load_error is not None else "loading"
        message = f"the model failed to load: {state.load_error}" if state.load_error else "the model is loading"
        return JSONResponse({"status": status, "error": {"message": message, "type": "server_error",
                                                         "param": None, "code": f"model_{status}"}}, 503)
    b = state.backend
    return {"status": "ok", "model": b.model_name, "device": b.device, "queue_depth": b.queue_depth,
            "active": b.active}


@router.get("/metrics")
async def metrics(request: Request):
    return Response(await run_in_threadpool(_state(request).metrics.render), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/models")
async def models(request: Request):
    return {"object": "list", "data": [_model_card(request)]}


@router.get("/v1/models/{model_id}")
async def model(model_id: str, request: Request):
    card = _model_card(request)
    if model_id != card["id"]:
        raise APIError(404, f"model {model_id!r} not found; this server has {card['id']!r}", "model_not_found",
                       "model")
    return card


def _model_card(request: Request) -> dict:
    state = _state(request)
    return {"id": state.config.model_id, "object": "model", "created": 0, "owned_by": "omnivoice",
            "ready": state.backend is not None}


# ----------------------------------------------------------------------------------------------- voices
@router.get("/v1/audio/voices")
async def list_voices(request: Request):
    library = _state(request).library
    voices = [v.as_json() for v in await run_in_threadpool(library.list)]
    builtin = [{"id": name, "object": "audio.voice", "type": "builtin", "name": name, "instructions": attrs}
               for name, attrs in BUILTIN_VOICES.items()]
    return {"object": "list", "data": voices + builtin}


@router.get("/v1/audio/voices/{name}")
async def get_voice(name: str, request: Request):
    with _voice_errors():
        return (await run_in_threadpool(_state(request).library.info, name)).as_json()


@router.delete("/v1/audio/voices/{name}")
async def delete_voice(name: str, request: Request):
    with _voice_errors():
        await run_in_threadpool(_state(request).library.delete, name)
    return {"id": name, "object": "audio.voice.deleted", "deleted": True}


@router.post("/v1/audio/voices", status_code=201)
async def upload_voice(request: Request):
    state = _state(request)
    # consent and type are what the openai client's audio.voices.create sends besides name and audio_sample
    fields, (samples, rate) = await _read_form(request, {"name", "transcript", "consent", "type"})
    if fields.get("type", "audio_sample") != "audio_sample":
        raise APIError(400, f"type {fields['type']!r}: this server makes voices from audio samples only",
                       "invalid_value", "type")
    with _voice_errors():
        name = check_name(fields.get("name"))
        transcript = _transcript(fields)
        if state.library.has(name):
            raise VoiceExists(f"voice {name!r} already exists; delete it first to replace it")
        backend = state.require_backend()
        voice = await run_in_threadpool(_encode_voice, backend, samples, rate, transcript)
        info = await run_in_threadpool(state.library.save, name, voice)
    return JSONResponse(info.as_json(), 201)


def _encode_voice(backend, samples, rate, transcript):
    try:
        return backend.create_voice(samples, rate, transcript)
    except ValueError as e:
        raise APIError(400, f"file: {e}", "invalid_audio", "file") from None


class _voice_errors:
    """Library errors -> 400 (bad name), 404 (unknown), 409 (taken)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, VoiceNameError):
            raise APIError(400, str(exc), "invalid_voice_name", "voice") from None
        if isinstance(exc, VoiceNotFound):
            raise APIError(404, str(exc), "voice_not_found", "voice") from None
        if isinstance(exc, VoiceExists):
            raise APIError(409, str(exc), "voice_exists", "name") from None
        return False


# ----------------------------------------------------------------------------------------------- speech
@router.post("/v1/audio/speech")
async def speech(request: Request):
    state = _state(request)
    # read here rather than by FastAPI, so any content type is taken as JSON, as OpenAI's API does
    obj = parse_json(await request.body(), "the request body")
    if not isinstance(obj, dict):
        raise APIError(400, f"the request body must be a JSON object, not {type(obj).__name__}", "invalid_json")
    body = _validated(obj)
    with _voice_errors():
        voice, design = await run_in_threadpool(resolve_voice, state.library, body.voice)
    return await _speak(request, body, synthesis_request(body, voice, design))


@router.post("/v1/audio/speech/clone")
async def speech_clone(request: Request):
    fields, ref_audio = await _read_form(request, set(SpeechRequest.model_fields) - {"voice"} | {"transcript"})
    transcript = _transcript(fields)
    if fields.get("stream_format") == "":  # a form cannot say null: an empty field asks for a whole response
        fields["stream_format"] = None
    body = _validated(fields)
    return await _speak(request, body, synthesis_request(body, ref_audio=ref_audio, ref_text=transcript))


def _validated(fields: dict) -> SpeechRequest:
    try:
        return SpeechRequest.model_validate(fields)
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None


async def _speak(request: Request, body: SpeechRequest, synth) -> Response:
    """Submit one synthesis and answer with its audio: whole, or streamed as sentences finish."""
    state = _state(request)
    if len(body.input) > state.config.max_input_chars:
        raise APIError(400, f"input is {len(body.input)} characters; this server takes at most "
                            f"{state.config.max_input_chars}", "input_too_long", "input")
    if body.duration is not None and body.duration > state.config.max_duration:
        raise APIError(400, f"duration is {body.duration:g} s; this server makes at most "
                            f"{state.config.max_duration:g} s of audio a request (--max-duration)", "duration_too_long",
                       "duration")
    why = encoding.unavailable(body.response_format)
    if why:
        code = "unsupported_response_format" if body.response_format in encoding.FORMATS else "invalid_value"
        raise APIError(400, why, code, "response_format")
    backend = state.require_backend()
    t0 = time.perf_counter()
    try:
        job = await backend.start(synth, stream=body.stream_format is not None)
    except EngineFull as e:
        raise APIError(503, str(e), "queue_full", headers={"Retry-After": str(int(np.ceil(e.retry_after)))})
    except ValueError as e:
        raise APIError(400, str(e), "invalid_value") from None
    fmt = body.response_format
    if body.stream_format is None:
        return await _whole(request, job, fmt, backend.sample_rate, t0)
    pieces = _pieces(request, job, fmt, backend.sample_rate, t0)
    if body.stream_format == "sse":
        frames_per_sample = backend.frame_rate / backend.sample_rate
        return StreamingResponse(_sse(pieces, lambda: backend.count_tokens(body.input), frames_per_sample),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
    return StreamingResponse(_bytes_only(pieces), media_type=encoding.MEDIA_TYPES[fmt])


async def _whole(request: Request, job, fmt: str, sample_rate: int, t0: float) -> Response:
    done = asyncio.wrap_future(job.future)
    # its exception retrieved however this ends (a client gone, or this task cancelled while the engine fails the
    # job with Cancelled, as at shutdown): else asyncio logs "Future exception was never retrieved"
    done.add_done_callback(lambda f: f.cancelled() or f.exception())
    try:
        async with _cancel_on_disconnect(request, job) as client:
            await asyncio.wait({done})
    except asyncio.CancelledError:  # the request's task was cancelled (Ray Serve: its client went away)
        if not job.done:
            _state(request).metrics.watch_cancel(job)
            job.cancel()
        raise
    if client.gone:
        return Response(status_code=CLIENT_GONE)
    if job.future.cancelled() or isinstance(job.future.exception(), Cancelled):
        raise APIError(503, "the synthesis was stopped: the server is shutting down", "shutting_down")
    if isinstance(job.future.exception(), ValueError):
        raise APIError(400, str(job.future.exception()), "invalid_value")
    result = job.future.result()
    wall = time.perf_counter() - t0
    _state(request).metrics.produced(result.duration, wall)
    blob = await run_in_threadpool(encoding.encode, result.audio, sample_rate, fmt)
    headers = {"X-OmniVoice-Audio-Seconds": f"{result.duration:.3f}"}
    if result.tokens:
        headers["X-OmniVoice-Tokens-SHA256"] = tokens_sha256(result.tokens)
    return Response(blob, media_type=encoding.MEDIA_TYPES[fmt], headers=headers)


def tokens_sha256(tokens: list) -> str:
    """SHA-256 of every chunk's int32 tokens, little-endian C order, chunk after chunk."""
    h = hashlib.sha256()
    for t in tokens:
        h.update(np.ascontiguousarray(t, dtype="<i4").tobytes())
    return h.hexdigest()


async def _pieces(request: Request, job, fmt: str, sample_rate: int, t0: float) -> AsyncIterator[tuple[bytes, int]]:
    """(encoded bytes, samples) as each sentence finishes; the job is cancelled when the stream ends early."""
    metrics = _state(request).metrics
    encoder = encoding.encoder(fmt, sample_rate)
    chunks = job.chunks()
    samples, first, complete = 0, True, False
    try:
        async with _cancel_on_disconnect(request, job) as client:
            while True:
                try:
                    audio = await run_in_threadpool(next, chunks, None)
                except (Cancelled, concurrent.futures.CancelledError):
                    if client.gone:
                        return  # nobody is listening
                    raise
                if audio is None:
                    break
                if first:
                    metrics.first_audio.observe(time.perf_counter() - t0)
                    first = False
                samples += len(audio)
                data = await run_in_threadpool(encoder.write, audio)
                if data:
                    yield data, len(audio)
        yield encoder.finish(), 0
        metrics.produced(samples / sample_rate, time.perf_counter() - t0)
        complete = True
    finally:
        if not complete:  # the client went away (or the stream failed): stop the work, count it if it stops
            metrics.watch_cancel(job)  # (on Ray Serve the job may be cancelled already, with its request)
            if not job.done:
                job.cancel()


async def _bytes_only(pieces) -> AsyncIterator[bytes]:
    async for data, _ in pieces:
        if data:
            yield data


async def _sse(pieces, count_input_tokens, frames_per_sample: float) -> AsyncIterator[bytes]:
    """speech.audio.delta events (base64 audio), then speech.audio.done with usage (input tokens:
    `count_input_tokens()`, counted off the event loop once the audio is out; output tokens: the codec's frames);
    an error event on failure."""
    samples = 0
    try:
        async for data, n in pieces:
            samples += n
            if data:
                yield _event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
    except Exception as e:  # headers are gone: say it in the stream
        log.error("streamed synthesis failed", exc_info=e)
        kind = "invalid_request_error" if isinstance(e, ValueError) else "server_error"
        yield _event({"type": "error", "error": {"message": str(e), "type": kind, "param": None, "code": None}})
        return
    frames = round(samples * frames_per_sample)
    n_input_tokens = await run_in_threadpool(count_input_tokens)
    yield _event({"type": "speech.audio.done", "usage": {
        "input_tokens": n_input_tokens, "output_tokens": frames, "total_tokens": n_input_tokens + frames}})


def _event(payload: dict) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


@asynccontextmanager
async def _cancel_on_disconnect(request: Request, job):
    """Cancel `job` when the client disconnects while the block runs; yields a record whose `gone` says so."""
    client = SimpleNamespace(gone=False)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                if not job.done:
                    log.info("client went away: request cancelled")
                    client.gone = True
                    _state(request).metrics.watch_cancel(job)
                    job.cancel()
                return

    watcher = asyncio.create_task(watch())
    try:
        yield client
    finally:
        watcher.cancel()


# ----------------------------------------------------------------------------------------------- uploads
async def _read_form(request: Request, allowed: set) -> tuple[dict, tuple[np.ndarray, int]]:
    """A multipart form's text fields (only `allowed` ones) and its `file`, decoded as audio."""
    state = _state(request)
    form = await request.form(max_files=1, max_fields=len(allowed) + 1)
    fields, upload = {}, None
    for key, value in form.multi_items():
        if key in ("file", "audio_sample"):  # audio_sample: the openai client's name for it
            upload = value
        elif key not in allowed:
            raise APIError(400, f"unrecognized form field {key!r}; expected file, {', '.join(sorted(allowed))}",
                           "unknown_parameter", key)
        elif isinstance(value, str):
            fields[key] = value
        else:
            raise APIError(400, f"form field {key!r} must be text, not a file", "invalid_value", key)
    if upload is None or isinstance(upload, str):
        raise APIError(400, "missing the audio: send it as the multipart file field 'file'",
                       "missing_required_parameter", "file")
    data = await upload.read()
    try:
        samples, rate = await run_in_threadpool(load_audio, io.BytesIO(data))
    except AudioFileError as e:
        raise APIError(400, str(e).replace("<file object>", f"file {upload.filename!r}"), "invalid_audio",
                       "file") from None
    seconds = len(samples) / rate
    if seconds > state.config.max_reference_seconds:
        raise APIError(400, f"file {upload.filename!r} is {seconds:.1f} s long; reference audio may be at most "
                            f"{state.config.max_reference_seconds:g} s", "reference_too_long", "file")
    return fields, (samples, rate)


def _transcript(fields: dict) -> str:
    text = fields.pop("transcript", None)
    if not text or not text.strip():
        raise APIError(400, "missing 'transcript': the text spoken in the reference audio",
                       "missing_required_parameter", "transcript")
    return text

