"""WS /v1/audio/speech/stream: text in pieces in, audio out as each sentence is ready (README, "WebSocket").

    client -> server (JSON text frames)
      {"type": "start", "voice": ..., "response_format": "pcm" | "wav", "api_key": ..., speech options}
      {"type": "text", "text": "..."}      any number, any split (even mid-word)
      {"type": "flush"}                    speak what is buffered now, without waiting for the sentence's end
      {"type": "end"}                      no more text; "done" follows the last audio, then "start" may come again
    server -> client
      binary frames: audio, pcm s16le 24 kHz mono (for wav, a WAV header of unknown length first, after start)
      {"type": "segment", "text": ..., "start_sample": ..., "end_sample": ...}   after each sentence's audio frame
      {"type": "done", "samples": N}
      {"type": "error", "code": ..., "message": ...}, then the close: code 4000 + the HTTP status the same failure
      gets on the HTTP routes (CLOSE_CODES), 1011 for an internal error

The speech options are the speech route's (schema.SpeechRequest) but input, stream_format and duration. The text
goes through server.textstream (sentences, the first-piece rule, one engine request per sentence). Auth: with an
API key set, the upgrade request's `Authorization: Bearer KEY`, or `api_key` in the first start message
(browsers cannot set headers). A client that closes cancels its sentences in the engine.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Literal, Optional

from fastapi import APIRouter, WebSocket
from pydantic import ConfigDict, ValidationError, create_model
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect, WebSocketState

from ..audio.io import encode_samples, wav_header
from ..pipeline import Cancelled
from .engine_adapter import EngineFull
from .errors import APIError, parse_json, validation_error
from .schema import SpeechRequest, synthesis_request
from .textstream import TextStream
from .voices import VoiceNameError, VoiceNotFound, resolve_voice

__all__ = ["router", "CLOSE_CODES", "StartMessage"]

log = logging.getLogger("omnivoice.server")
router = APIRouter()

PATH = "/v1/audio/speech/stream"
CLOSE_CODES = {
    4400: "a bad message: not JSON, an unknown type or field, a bad value, a message out of order",
    4401: "no API key, or a wrong one",
    4404: "an unknown voice",
    4408: "idle: no message for --ws-idle-timeout seconds while nothing was being spoken",
    4413: "more pending text (received, not yet spoken) than --max-input-chars",
    4503: "the model is still loading (or failed to), the engine's queue is full, or the server is shutting down",
    1011: "an internal error (the server's log has its traceback)",
}

# The start message: the speech route's fields but what a stream of text has no use for (input, stream_format,
# duration: one duration for every sentence), with response_format the two raw formats.
_NOT_IN_START = {"input", "stream_format", "response_format", "duration"}
StartMessage = create_model(
    "StartMessage", __config__=ConfigDict(extra="forbid"),
    type=(Literal["start"], ...), api_key=(Optional[str], None), response_format=(Literal["pcm", "wav"], "pcm"),
    **{name: (field.annotation, field) for name, field in SpeechRequest.model_fields.items()
       if name not in _NOT_IN_START})


class _Closed(Exception):
    """The connection is over (closed by either side): stop reading."""


@router.websocket(PATH)
async def speech_stream(ws: WebSocket) -> None:
    await _Connection(ws).run()


class _Connection:
    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.state = ws.app.state.server
        key = self.state.config.api_key
        self.expected = f"Bearer {key}".encode() if key else None
        self.header = ws.headers.get("authorization")
        self.authorized = self.expected is None
        self.stream: Optional[TextStream] = None
        self.speaker: Optional[asyncio.Task] = None   # sends the current utterance's audio
        self.last_active = time.monotonic()  # the last message, or the last moment something was being spoken
        self.closing = False
        self.send_lock = asyncio.Lock()

    async def run(self) -> None:
        await self.ws.accept()
        watchdog = asyncio.create_task(self._watch_idle())
        try:
            if self.header is not None and self.expected is not None:
                self._check_key(self.header.encode())
            while True:
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                self.last_active = time.monotonic()
                await self._handle(message)
        except APIError as e:
            await self._fail(e)
        except _Closed:
            pass
        except Exception as e:  # a bug: the client hears 1011, the log gets the traceback
            log.error("WebSocket speech stream failed", exc_info=e)
            await self._fail(APIError(500, f"internal server error ({type(e).__name__}); see the server log",
                                      "internal_error"))
        finally:
            watchdog.cancel()
            self._stop_speaking()

    # -------------------------------------------------------------------------------------------- messages
    async def _handle(self, message: dict) -> None:
        if message.get("text") is None:
            raise APIError(400, "binary frames are not accepted: send JSON text frames", "invalid_message")
        obj = parse_json(message["text"], "the message")
        kind = obj.get("type") if isinstance(obj, dict) else None
        if kind not in ("start", "text", "flush", "end"):
            raise APIError(400, f"unknown message type {kind!r}: expected a JSON object whose type is start, text, "
                                "flush or end", "invalid_message", "type")
        if kind == "start":
            return await self._start(obj)
        if not self.authorized:
            raise APIError(401, "no API key given: send 'Authorization: Bearer KEY' or api_key in the start "
                                "message", "invalid_api_key")
        if self.stream is None:
            raise APIError(400, f"{kind!r} before 'start': begin each utterance with a start message",
                           "invalid_message", "type")
        if self.stream.ended:
            raise APIError(400, f"{kind!r} after 'end': wait for 'done', then send start again", "invalid_message",
                           "type")
        extra = set(obj) - ({"type", "text"} if kind == "text" else {"type"})
        if extra:
            raise APIError(400, f"unrecognized field(s) {', '.join(sorted(extra))} in a {kind!r} message",
                           "unknown_parameter", sorted(extra)[0])
        if kind == "text":
            text = obj.get("text")
            if not isinstance(text, str):
                raise APIError(400, f"a text message needs 'text', a string (got {type(text).__name__})",
                               "invalid_value", "text")
            limit = self.state.config.max_input_chars
            if self.stream.pending_chars + len(text) > limit:
                raise APIError(413, f"{self.stream.pending_chars + len(text)} characters of text pending (received, "
                                    f"not yet spoken); this server holds at most {limit} per connection: send "
                                    "flush or end, or send text no faster than it is spoken",
                               "pending_text_too_long", "text")
            self.stream.feed(text)
        elif kind == "flush":
            self.stream.flush()
        else:
            self.stream.end()

    async def _start(self, obj: dict) -> None:
        if self.expected is not None and not self.authorized:
            given = obj.get("api_key")
            if not isinstance(given, str):
                raise APIError(401, "no API key given: send 'Authorization: Bearer KEY' or api_key in the start "
                                    "message", "invalid_api_key")
            self._check_key(f"Bearer {given}".encode())
        if self.stream is not None:
            raise APIError(400, "'start' while an utterance is under way: send end, wait for done, then start",
                           "invalid_message", "type")
        try:
            start = StartMessage.model_validate(obj)
        except ValidationError as e:
            raise validation_error(e) from None
        options = start.model_dump(exclude={"type", "api_key", "response_format"}, exclude_unset=True)
        body = SpeechRequest.model_validate({**options, "input": "-"})
        try:
            voice, design = await run_in_threadpool(resolve_voice, self.state.library, body.voice)
        except VoiceNameError as e:
            raise APIError(400, str(e), "invalid_voice_name", "voice") from None
        except VoiceNotFound as e:
            raise APIError(404, str(e), "voice_not_found", "voice") from None
        backend = self.state.require_backend()
        request = synthesis_request(body, voice, design)
        try:
            request.validate()
        except ValueError as e:
            raise APIError(400, str(e), "invalid_value") from None
        self.stream = TextStream(backend.start, request)
        if start.response_format == "wav":
            await self._send(bytes_=wav_header(backend.sample_rate, "wav16", None))
        self.speaker = asyncio.create_task(self._speak(self.stream, backend.sample_rate))

    def _check_key(self, given: bytes) -> None:
        if not hmac.compare_digest(given, self.expected):
            raise APIError(401, "invalid API key", "invalid_api_key")
        self.authorized = True

    # -------------------------------------------------------------------------------------------- audio
    async def _speak(self, stream: TextStream, sample_rate: int) -> None:
        """Send the utterance's audio as it comes, a segment event after each sentence, done at its end."""
        samples = 0
        try:
            async for segment in stream:
                pcm = encode_samples(segment.audio, "wav16")
                n = len(pcm) // 2
                await self._send(bytes_=pcm)
                await self._send(json_={"type": "segment", "text": segment.text, "start_sample": samples,
                                        "end_sample": samples + n})
                samples += n
                self.state.metrics.audio_seconds.inc(n / sample_rate)
            self.stream = None  # before done: the client may start again as soon as it reads it
            await self._send(json_={"type": "done", "samples": samples})
        except _Closed:
            pass
        except Exception as e:
            if not isinstance(e, (APIError, ValueError, EngineFull, Cancelled)):
                log.error("WebSocket speech stream failed", exc_info=e)
            await self._fail(_api_error(e))

    async def _send(self, bytes_: Optional[bytes] = None, json_: Optional[dict] = None) -> None:
        async with self.send_lock:
            if self.closing:
                raise _Closed()
            try:
                if bytes_ is not None:
                    await self.ws.send_bytes(bytes_)
                else:
                    await self.ws.send_text(json.dumps(json_))
            except (WebSocketDisconnect, RuntimeError, OSError):
                raise _Closed() from None

    async def _fail(self, error: APIError) -> None:
        """Say what went wrong, close with its code, and stop the utterance's work."""
        self._stop_speaking()
        async with self.send_lock:
            if self.closing:
                return
            self.closing = True
            close = 4000 + error.status if error.status < 500 or error.status == 503 else 1011
            try:
                if self.ws.application_state == WebSocketState.CONNECTED:
                    await self.ws.send_text(json.dumps({"type": "error", "code": error.code,
                                                        "message": error.message}))
                    await self.ws.close(close, (error.code or "")[:120])
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass  # the client is gone already

    def _stop_speaking(self) -> None:
        if self.stream is not None:
            for job in self.stream.jobs:
                self.state.metrics.watch_cancel(job)
            self.stream.cancel()
        if self.speaker is not None and self.speaker is not asyncio.current_task():
            self.speaker.cancel()

    async def _watch_idle(self) -> None:
        """Close the connection once nothing has come from the client and nothing was being spoken for
        --ws-idle-timeout seconds (checked twice a second)."""
        limit = self.state.config.ws_idle_timeout
        while True:
            if self.stream is not None and self.stream.busy:
                self.last_active = time.monotonic()
            left = limit - (time.monotonic() - self.last_active)
            if left <= 0:
                await self._fail(APIError(408, f"no message for {limit:g} s: closing the idle connection",
                                          "idle_timeout"))
                return
            await asyncio.sleep(min(left, 0.5))


def _api_error(e: BaseException) -> APIError:
    """The API error a failure of the engine's side is, as the HTTP routes answer it."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, EngineFull):
        return APIError(503, str(e), "queue_full")
    if isinstance(e, Cancelled):
        return APIError(503, "the synthesis was stopped: the server is shutting down", "shutting_down")
    if isinstance(e, ValueError):
        return APIError(400, str(e), "invalid_value")
    return APIError(500, f"internal server error ({type(e).__name__}); see the server log", "internal_error")
