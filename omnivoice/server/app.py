"""The ASGI app: configuration, model loading in the background, and the gates every request passes.

    request -> CountRequests (omnivoice_requests_total) -> SingleHeaders -> RequireKey (Bearer, /v1/ only)
            -> LimitBody -> FastAPI routes (routes.py), errors in OpenAI's shape (errors.py)

The model loads in a thread started at startup: until it is loaded /health answers 503 and so do the
synthesis routes (with Retry-After); a load that fails is reported by /health and to `on_load_error`.
"""

from __future__ import annotations

import hmac
import logging
import threading
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import anyio.to_thread
from fastapi import FastAPI
from starlette.routing import Match

from . import errors
from .metrics import Metrics
from .voices import VoiceLibrary

log = logging.getLogger("omnivoice.server")

__all__ = ["ServerConfig", "ServerState", "create_app"]


@dataclass
class ServerConfig:
    """Everything `python -m omnivoice.server` can set."""

    model: Optional[str] = None
    codec: Optional[str] = None
    backend: str = "auto"
    quant: str = "auto"
    cpu_products: Optional[str] = None
    threads: Optional[int] = None
    voices: Path = field(default_factory=lambda: Path("voices"))
    api_key: Optional[str] = None
    max_batch: Union[str, int] = "auto"
    max_wait_ms: float = 10.0
    max_queue: int = 64
    first_audio_ms: float = 300.0               # the schedule's first-audio deadline (engine.schedule)
    max_step_positions: Optional[int] = None    # the step cap (None: the memory budget's)
    short_first_piece: bool = False             # a streamed answer's long first sentence cut at a clause
    max_upload_bytes: int = 20 * 2**20
    max_input_chars: int = 4096
    max_duration: float = 600.0  # seconds of audio one request may ask for (its `duration`)
    max_reference_seconds: float = 60.0
    ws_idle_timeout: float = 60.0
    model_id: str = "omnivoice"


class ServerState:
    """What the routes share: the config, the voice library, the metrics, and the backend once loaded."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.backend = None
        self.load_error: Optional[BaseException] = None
        self.library = VoiceLibrary(config.voices)
        self.metrics = Metrics(lambda: self.backend.engines() if self.backend else [],
                               lambda: self.backend.more_metrics() if self.backend else b"")

    def require_backend(self):
        """The loaded backend, or a 503 saying why there is none yet."""
        if self.backend is not None:
            return self.backend
        if self.load_error is not None:
            raise errors.APIError(503, f"the model failed to load: {self.load_error}", "model_load_failed")
        raise errors.APIError(503, "the model is still loading", "model_loading", headers={"Retry-After": "5"})


def default_loader(config: ServerConfig):
    from .engine_adapter import load_backend

    return load_backend(config.model, config.codec, backend=config.backend, quant=config.quant,
                        threads=config.threads, max_batch=config.max_batch, max_wait_ms=config.max_wait_ms,
                        max_queue=config.max_queue, cpu_products=config.cpu_products,
                        first_audio_ms=config.first_audio_ms, max_step_positions=config.max_step_positions,
                        short_first_piece=config.short_first_piece)


def create_app(config: ServerConfig, loader: Optional[Callable] = None,
               on_load_error: Optional[Callable[[BaseException], None]] = None) -> FastAPI:
    """The app for `config`. `loader(config)` returns the backend (default: load the model and start the engine);
    it runs in a thread at startup. `on_load_error(exc)` is told when it fails (the CLI then shuts down)."""
    from .routes import router
    from .ws import router as ws_router

    state = ServerState(config)
    loader = loader or default_loader

    def load() -> None:
        try:
            backend = loader(config)
        except BaseException as e:  # reported by /health and the caller; the server itself stays up to say so
            state.load_error = e
            plain = isinstance(e, (ValueError, OSError))  # the message says it all; else the traceback helps
            if on_load_error is None or not plain:  # a caller told of it reports it (the CLI: one error line)
                log.error("loading the model failed: %s", e, exc_info=not plain)
            if on_load_error is not None:
                on_load_error(e)
            return
        state.backend = backend
        log.info("model %s loaded on %s", backend.model_name, backend.device)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # streamed responses wait for audio in worker threads: one per client, so more than anyio's 40
        anyio.to_thread.current_default_thread_limiter().total_tokens = max(64, 2 * config.max_queue)
        threading.Thread(target=load, name="omnivoice-load", daemon=True).start()
        yield
        if state.backend is not None:
            await anyio.to_thread.run_sync(state.backend.close)

    app = FastAPI(title="OmniVoice speech server", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.server = state
    errors.install(app)
    app.include_router(router)
    app.include_router(ws_router)
    app.add_middleware(LimitBody, limit=config.max_upload_bytes)
    app.add_middleware(RequireKey, api_key=config.api_key)
    app.add_middleware(SingleHeaders)
    app.add_middleware(CountRequests, metrics=state.metrics, routes=router.routes)
    return app


# ----------------------------------------------------------------------------------------------- gates
async def _send_error(send, status: int, message: str, code: str, headers: Optional[dict] = None) -> None:
    start, body = errors.error_response(status, message, code, headers)
    await send(start)
    await send({"type": "http.response.body", "body": body})


class CountRequests:
    """Counts every answered request by route template and status (500 when the app raised). `routes` (the
    app's) name the route of a request a gate answered before routing (RequireKey's 401, LimitBody's 413)."""

    def __init__(self, app, metrics: Metrics, routes: Sequence = ()) -> None:
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = [None]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.requests.labels(self._route_of(scope), str(status[0] or 500)).inc()

    def _route_of(self, scope) -> str:
        """The template of the route a request called ("other" for none): the one routing chose, else the one
        that matches the request."""
        route = scope.get("route")
        if route is None:
            route = next((r for r in self.routes if r.matches(scope)[0] == Match.FULL), None)
        return getattr(route, "path", None) or "other"


class SingleHeaders:
    """Answers 400 to a request that gives a header meant to be given once (Authorization, Host, Content-Type,
    Content-Length) twice: which one counts differs between servers and proxies (with two Authorization headers
    the last one counted here), so neither does."""

    ONCE = (b"authorization", b"host", b"content-type", b"content-length")

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            names = [k for k, _ in scope["headers"] if k in self.ONCE]
            twice = next((n for n in self.ONCE if names.count(n) > 1), None)
            if twice is not None:
                name = twice.decode().title()
                return await _send_error(send, 400, f"{names.count(twice)} {name} headers; send one",
                                         "duplicate_header")
        await self.app(scope, receive, send)


class RequireKey:
    """With an API key set, /v1/ answers 401 unless the request carries `Authorization: Bearer KEY` (once:
    SingleHeaders runs first)."""

    def __init__(self, app, api_key: Optional[str]) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode() if api_key else None

    async def __call__(self, scope, receive, send) -> None:
        if self.expected is not None and scope["type"] == "http" and scope["path"].startswith("/v1/"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                what = "no API key given" if not given else "invalid API key"
                return await _send_error(send, 401, f"{what}: send 'Authorization: Bearer KEY'", "invalid_api_key",
                                         {"WWW-Authenticate": "Bearer"})
        await self.app(scope, receive, send)


class LimitBody:
    """Refuses request bodies over `limit` bytes with 413: by Content-Length before reading, else while reading
    (a chunked body is read into memory up to the limit, then handed on)."""

    def __init__(self, app, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        too_big = f"request body over the upload limit of {self.limit} bytes"
        if length is not None:
            if not length.isdigit() or int(length) > self.limit:
                return await _send_error(send, 413, too_big, "request_too_large")
            return await self.app(scope, receive, send)
        body, more = [], True
        size = 0
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was in
            body.append(message.get("body", b""))
            size += len(body[-1])
            more = message.get("more_body", False)
            if size > self.limit:
                return await _send_error(send, 413, too_big, "request_too_large")
        replay = [{"type": "http.request", "body": b"".join(body), "more_body": False}]

        async def receive_again():
            return replay.pop() if replay else await receive()

        await self.app(scope, receive_again, send)
