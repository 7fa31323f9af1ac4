"""The speech server on Ray Serve: one OpenAI-compatible endpoint over many model replicas (extra [ray]).

    python -m omnivoice.server --ray --replicas 2 --model ./OmniVoice --voices /shared/voices
    serve run omnivoice.server.ray:app model=./OmniVoice voices=/shared/voices replicas=1..4
    serve deploy docs/serve.yaml                      # the same app from a config file (docs/SERVING.md)

    the command:  client -> the command's uvicorn (the plain server's app, connection guards and all)
    serve run:    client -> Serve's HTTP proxy -> SpeechIngress (FastAPI: the plain server's app and gates)
                                      | DeploymentHandle, routed by LeastQueuedAudio
                                      v
                                    SpeechModel replicas: one OmniVoice and its batched engine each, one device

`python -m omnivoice.server --ray` deploys the model replicas alone (`model_app`) and serves HTTP in its own
process, as the plain server does, over a `RemoteBackend` of the deployment's handle: Serve's proxy would add a
hop each way and a call back for the request body (about 8 of the 14 ms Serve added to a request on a 2-core
CPU) and has none of the plain server's connection guards (docs/SERVING.md). `serve run` and a Serve config
deploy `build`'s application: the same replicas behind the SpeechIngress deployment and Serve's proxies.

Either way the HTTP side is `create_app` of omnivoice.server.app, the plain server's app, whole: every route,
format, streaming mode, error, gate and metric is the same code; only its backend differs. There it is a
`RemoteBackend` (this module), which hands each synthesis to a `SpeechModel` replica and relays its answer:
the replica's `speak` is a streaming call whose first message says whether its engine took the request (so a
full queue or a bad request is answered before any audio, as by the plain server), then the audio (a piece
per sentence when streamed: relayed as it comes, never gathered), then the tokens. A request the client
abandons is cancelled through Serve (`DeploymentResponseGenerator.cancel`), which cancels the replica's
generator, which cancels the engine's job.

Routing: `LeastQueuedAudio`, a Serve request router, sends each synthesis to the replica with the least audio
still to make: the seconds of the requests this process sent it that have not finished, or the replica's own
figure (its routing stats: audio promised by unfinished jobs, less what they made) when that is larger (other
ingress replicas' work). Serve itself keeps each replica under `max_ongoing_requests`.

Voices: the library is the plain server's folder (`--voices`), read and written by the ingress only; a
synthesis carries its voice prompt (a few KB of codes) to the model replica, so model replicas on any host
need no shared files and see an upload at once. Several ingress replicas on several hosts need the folder on
a shared filesystem (the default is one ingress replica, beside Serve's proxy).

Metrics: GET /metrics is the plain server's, with the engine figures (queue depth, active requests, model
loaded, omnivoice_engine_*) once per model replica, labelled `replica`: the replicas report them to Serve
with their routing stats (every ROUTING_STATS_PERIOD_S); then Serve's own metrics (the ray_serve_* families),
read from the metrics agent of each node at scrape time.

Faults: a replica that dies takes its requests with it: each is answered 503 `replica_failed` (a stream that
had started ends with an SSE error event, or is cut short); a request whose replica died before taking it
is sent to another. Serve starts a replacement replica.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
from collections import defaultdict
from typing import Any, Iterator, Optional

import numpy as np

from .app import ServerConfig, create_app, default_loader
from .errors import APIError

try:
    from ray import serve
    from ray.exceptions import RayActorError
    from ray.serve.config import RequestRouterConfig
    from ray.serve.exceptions import RequestCancelledError

    from .ray_router import LeastQueuedAudio, router_of
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError(f"the Ray Serve app needs its extra: pip install 'omnivoice-ggml[ray]' ({e})") from None

log = logging.getLogger("omnivoice.server")

__all__ = ["SpeechModel", "SpeechIngress", "LeastQueuedAudio", "RemoteBackend", "build", "model_app", "app",
           "parse_replicas", "APP_NAME"]

APP_NAME = "omnivoice"
ROUTING_STATS_PERIOD_S = 1.0  # how often each replica reports its queued audio and engine figures
START_ATTEMPTS = 3            # replicas tried for a request whose replica died before taking it
INGRESS_MAX_ONGOING = 1024    # HTTP requests one ingress replica holds at once (streams wait in it for audio)
# A Ray worker returns an object of up to max_direct_call_object_size bytes (default 100 KiB) inline, in the
# reply of the call, and puts a larger one in the object store, which its caller fetches: a few ms more per
# message. A second of audio is 94 KiB of float32 samples, so every sentence a replica streams and every whole
# answer took that path, as did the ingress's response bodies to Serve's proxy (CPU, tiny model: 3 ms more to first
# audio, 5.5 ms more to a whole answer; docs/SERVING.md). Both deployments' workers return up to this inline.
INLINE_BYTES = 8 * 2**20
WORKER_ENV = {"RAY_max_direct_call_object_size": str(INLINE_BYTES)}


def parse_replicas(text: str) -> tuple[int, int]:
    """`--replicas N` or `MIN..MAX` -> (min, max); ValueError naming the flag."""
    lo, sep, hi = str(text).partition("..")
    try:
        bounds = (int(lo), int(hi if sep else lo))
    except ValueError:
        raise ValueError(f"--replicas must be N or MIN..MAX (integers), got {text!r}") from None
    if bounds[0] < 1 or bounds[1] < bounds[0]:
        raise ValueError(f"--replicas {text}: need 1 <= MIN <= MAX")
    return bounds


def expected_audio_s(request, frame_rate: float) -> float:
    """The seconds of audio a request will make, as the engine plans them (its duration, else the text's
    estimate): what the router balances."""
    from ..text.duration import estimate_target_tokens

    if request.duration:
        return float(request.duration)
    return estimate_target_tokens(request.text, speed=request.speed or 1.0) / frame_rate


# ----------------------------------------------------------------------------------------------- model replicas
class SpeechModel:
    """A model replica: one OmniVoice and its batched engine (omnivoice.server.engine_adapter) on one device."""

    def __init__(self, config: ServerConfig) -> None:
        self.backend = default_loader(config)
        try:
            self.replica = serve.get_replica_context().replica_id.unique_id
        except Exception:  # outside Serve (a plain object): no id
            self.replica = "local"
        # a thread per job waiting for its next piece of audio: as many as the engine may hold
        self._waiters = concurrent.futures.ThreadPoolExecutor(config.max_queue + 64, "omnivoice-wait")
        self._promised: dict[int, float] = {}  # job -> audio seconds still to come (the routing stats)
        log.info("replica %s: model %s on %s", self.replica, self.backend.model_name, self.backend.device)

    def describe(self) -> dict:
        b = self.backend
        return {"model": b.model_name, "device": b.device, "sample_rate": b.sample_rate,
                "frame_rate": b.frame_rate, "replica": self.replica}

    async def speak(self, request, stream: bool = False, audio_s: float = 0.0):
        """Synthesize one request, as messages: first ("accepted",), ("full", retry_after, message) or
        ("invalid", message); then ("audio", float32 samples) per sentence when streamed; then
        ("done", whole audio or None when streamed, tokens), or ("invalid", message) / ("cancelled",)."""
        from ..engine import EngineFull
        from ..pipeline import Cancelled

        try:
            job = self.backend.submit(request, stream)
        except EngineFull as e:
            yield ("full", e.retry_after, str(e))
            return
        except ValueError as e:
            yield ("invalid", str(e))
            return
        key = id(job)
        self._promised[key] = audio_s
        loop = asyncio.get_running_loop()
        try:
            yield ("accepted",)
            if stream:
                chunks = job.chunks()
                while True:
                    piece = await loop.run_in_executor(self._waiters, next, chunks, None)
                    if piece is None:
                        break
                    self._promised[key] = max(0.0, self._promised[key] - len(piece) / self.backend.sample_rate)
                    yield ("audio", piece)
            result = await asyncio.wrap_future(job.future)
            yield ("done", None if stream else result.audio, result.tokens)
        except Cancelled:  # the engine is closing
            yield ("cancelled",)
        except ValueError as e:
            yield ("invalid", str(e))
        finally:  # also when Serve cancels the call (the client went away): stop the work
            self._promised.pop(key, None)
            if not job.done:
                job.cancel()

    async def create_voice(self, samples: np.ndarray, sample_rate: int, transcript: str):
        """The voice prompt of a reference clip (ValueError for unusable audio comes back as ("invalid", ...))."""
        try:
            return ("ok", await asyncio.to_thread(self.backend.create_voice, samples, sample_rate, transcript))
        except ValueError as e:
            return ("invalid", str(e))

    def count_tokens(self, text: str) -> int:
        return self.backend.count_tokens(text)

    def record_routing_stats(self) -> dict:
        """Serve polls this every ROUTING_STATS_PERIOD_S: what LeastQueuedAudio and /metrics read."""
        b = self.backend
        return {"queued_audio_s": float(sum(self._promised.values())), "queue_depth": b.queue_depth,
                "active": b.active, "loaded": 1, "counters": b.counters()}

    def __del__(self) -> None:  # Serve's graceful shutdown of the replica
        backend = getattr(self, "backend", None)
        if backend is not None:
            self.backend = None
            backend.close()


# ----------------------------------------------------------------------------------------------- the ingress side
_END = object()


class RemoteJob:
    """A synthesis sent to a model replica, as the routes see a local engine Job: `future` (its SynthesisResult),
    `chunks()` (blocking, from a worker thread), `cancel()`, `done`; and `accepted()`, which waits for the
    replica's engine to take it. Made on the event loop, whose task relays the replica's messages."""

    def __init__(self, replies, stream: bool, sample_rate: int) -> None:
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self.stream, self.sample_rate = stream, sample_rate
        self._replies = replies
        self._pieces: queue.Queue = queue.Queue()
        self._answered = asyncio.Event()            # the replica took the request, refused it, or died
        self._refusal: Optional[BaseException] = None
        self._relay = asyncio.ensure_future(self._run())

    @property
    def done(self) -> bool:
        return self.future.done()

    async def accepted(self) -> None:
        """Return once the replica's engine has taken the request; else raise why not: EngineFull, ValueError,
        or _DiedFirst (the replica died before taking it: nothing was done)."""
        await self._answered.wait()
        if self._refusal is not None:
            raise self._refusal

    def chunks(self) -> Iterator[np.ndarray]:
        """Float32 audio: a piece per sentence as the replica makes it (stream), else the whole once; then the
        request's error, if any."""
        while (piece := self._pieces.get()) is not _END:
            yield piece
        exc = self.future.exception()
        if exc is not None:
            raise exc

    def cancel(self) -> None:
        """Cancel the call on the replica (which cancels the engine's job)."""
        if not self.future.done():
            self._replies.cancel()

    async def _run(self) -> None:
        from ..engine import EngineFull
        from ..pipeline import Cancelled, SynthesisResult

        pieces: list[np.ndarray] = []
        outcome: Any = RuntimeError("the model replica ended the request without an answer")
        try:
            async for message in self._replies:
                kind = message[0]
                if kind == "accepted":
                    self._answered.set()
                elif kind == "audio":
                    pieces.append(message[1])
                    self._pieces.put(message[1])
                elif kind == "done":
                    audio = message[1] if message[1] is not None else (
                        np.concatenate(pieces) if pieces else np.zeros(0, np.float32))
                    if not self.stream:
                        self._pieces.put(audio)
                    outcome = SynthesisResult(audio, self.sample_rate, list(message[2]), [])
                elif kind == "full":
                    outcome = self._refusal = EngineFull(message[1], 0)
                elif kind == "invalid":
                    outcome = ValueError(message[1])
                    if not self._answered.is_set():
                        self._refusal = outcome
                elif kind == "cancelled":
                    outcome = Cancelled("the model replica is shutting down")
        except (asyncio.CancelledError, RequestCancelledError):
            outcome = Cancelled("cancelled")
        except RayActorError as e:
            outcome = replica_failed(e)
            if not self._answered.is_set():
                self._refusal = _DiedFirst(e)
        except Exception as e:  # the replica raised: an internal error (500), as the plain server's
            outcome = e
        finally:
            if not self._answered.is_set() and self._refusal is None:
                self._refusal = outcome if isinstance(outcome, BaseException) else RuntimeError("no answer")
            self._answered.set()
            if isinstance(outcome, BaseException):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)
            self._pieces.put(_END)


class _DiedFirst(Exception):
    """The replica died before taking the request."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def replica_failed(e: BaseException) -> APIError:
    log.error("a model replica failed during a request: %s", e)
    return APIError(503, "the model replica serving this request failed; retry the request", "replica_failed",
                    headers={"Retry-After": "1"})


class RemoteBackend:
    """The routes' backend (engine_adapter.SpeechBackend's interface) over the SpeechModel replicas."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self._speak = handle.options(stream=True).speak
        info = handle.describe.remote().result()
        self.sample_rate, self.frame_rate = int(info["sample_rate"]), float(info["frame_rate"])
        self.model_name, self.device = info["model"], f"Ray Serve replicas: {info['device']}"

    def submit(self, request, stream: bool = False) -> RemoteJob:
        """Send `request` to the replica with the least queued audio (from the event loop); the replica's
        refusal (EngineFull, ValueError) comes out of the job's future, as its failures do."""
        return RemoteJob(self._speak.remote(request, stream, audio_s=expected_audio_s(request, self.frame_rate)),
                         stream, self.sample_rate)

    async def start(self, request, stream: bool = False) -> RemoteJob:
        """`submit`, once the replica's engine took the request: EngineFull or ValueError at once, as the local
        engine's submit; a request whose replica died before taking it goes to another."""
        for attempt in range(START_ATTEMPTS):
            job = self.submit(request, stream)
            try:
                await job.accepted()
                return job
            except _DiedFirst as e:
                if attempt + 1 == START_ATTEMPTS:
                    raise replica_failed(e.cause) from None
                log.warning("a model replica failed before taking a request (%s); sending it to another", e)
        raise AssertionError("unreachable")

    def create_voice(self, samples: np.ndarray, sample_rate: int, transcript: str):
        """Blocking (the routes call it from a worker thread): a replica encodes the clip."""
        kind, value = self.handle.create_voice.remote(samples, sample_rate, transcript).result()
        if kind == "invalid":
            raise ValueError(value)
        return value

    def count_tokens(self, text: str) -> int:
        """Blocking (from a worker thread)."""
        return int(self.handle.count_tokens.remote(text).result())

    def engines(self) -> list[tuple[dict, dict]]:
        """Each live replica's engine figures (its last routing stats), labelled by replica id."""
        router = router_of(self.handle.deployment_id)
        if router is None:
            return []
        return [({"replica": rid}, stats) for rid, stats in router.replica_stats() if stats]

    def more_metrics(self) -> bytes:
        """Serve's own metrics (the ray_serve_* families) from the metrics agent of every live node."""
        return serve_metrics()

    def counters(self) -> dict:
        """The replicas' engine counters, summed."""
        total: dict = {"seconds": defaultdict(float)}
        for _, stats in self.engines():
            for k, v in stats["counters"].items():
                if k == "seconds":
                    for phase, s in v.items():
                        total["seconds"][phase] += s
                else:
                    total[k] = total.get(k, 0) + v
        total["seconds"] = dict(total["seconds"])
        return total

    @property
    def queue_depth(self) -> int:
        return int(sum(s.get("queue_depth", 0) for _, s in self.engines()))

    @property
    def active(self) -> int:
        return int(sum(s.get("active", 0) for _, s in self.engines()))

    def close(self) -> None:
        """The replicas are Serve's to stop."""


def serve_metrics(timeout: float = 2.0) -> bytes:
    """The ray_serve_* families of every live node's metrics agent (Ray's Prometheus export), each family's
    samples from all nodes under one HELP / TYPE header. A node that does not answer is left out."""
    import urllib.request

    import ray

    families: dict[str, list[str]] = {}
    for node in ray.nodes():
        port = node.get("MetricsExportPort")
        if not node.get("Alive") or not port:
            continue
        try:
            url = f"http://{node['NodeManagerAddress']}:{port}/metrics"
            with urllib.request.urlopen(url, timeout=timeout) as r:
                text = r.read().decode()
        except OSError as e:
            log.debug("metrics of node %s: %s", node.get("NodeManagerAddress"), e)
            continue
        family = None
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                name = line.split(" ", 3)[2]
                family = name if name.startswith("ray_serve_") else None
                if family is not None:
                    lines = families.setdefault(family, [])
                    if not any(x.startswith(line[:7]) for x in lines):  # one HELP and one TYPE a family
                        lines.insert(len([x for x in lines if x.startswith("#")]), line)
            elif family is not None and line and not line.startswith("#"):
                families[family].append(line)
    return "".join(line + "\n" for lines in families.values() for line in lines).encode()


@serve.ingress()
class SpeechIngress:
    """The HTTP side: the plain server's FastAPI app (create_app) over a RemoteBackend."""

    def __init__(self, model, config: ServerConfig) -> None:
        self.model, self.config = model, config
        config.voices.mkdir(parents=True, exist_ok=True)

    def __serve_build_asgi_app__(self):
        return create_app(self.config, loader=lambda config: RemoteBackend(self.model))


# ----------------------------------------------------------------------------------------------- the application
def build(config: ServerConfig, replicas: tuple[int, int] = (1, 1), gpus_per_replica: float = 1.0,
          cpus_per_replica: Optional[float] = None, target_ongoing: float = 16.0):
    """The Serve application behind Serve's HTTP proxy (`serve run`, a Serve config): the SpeechIngress
    deployment over the model deployment of `model_app` (the same arguments)."""
    model = model_app(config, replicas, gpus_per_replica, cpus_per_replica, target_ongoing)
    ingress = serve.deployment(SpeechIngress).options(
        name="SpeechIngress", max_ongoing_requests=INGRESS_MAX_ONGOING,
        # I/O and encoding: it takes no CPU from the replicas
        ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": dict(WORKER_ENV)}})
    return ingress.bind(model, config)


def model_app(config: ServerConfig, replicas: tuple[int, int] = (1, 1), gpus_per_replica: float = 1.0,
              cpus_per_replica: Optional[float] = None, target_ongoing: float = 16.0):
    """The model deployment, bound: `replicas` (min, max) SpeechModel replicas, autoscaled by ongoing requests
    per replica (`target_ongoing`) when min < max; each takes `gpus_per_replica` GPUs (0: a CPU replica, running
    on `cpus_per_replica` CPUs, default config.threads or 1) and loads the model on the device Ray gives it. An
    application of its own for `python -m omnivoice.server --ray`, whose own HTTP server calls it through a
    handle (RemoteBackend); the model side of `build`'s."""
    lo, hi = replicas
    cpus = cpus_per_replica if cpus_per_replica is not None else (
        1.0 if gpus_per_replica else float(config.threads or 1))
    options: dict = {
        "ray_actor_options": {"num_cpus": cpus, "num_gpus": gpus_per_replica,
                              "runtime_env": {"env_vars": dict(WORKER_ENV)}},
        # Serve's own cap per replica; the engine's queue (max_queue, 503 beyond) is the real limit
        "max_ongoing_requests": config.max_queue + 64,
        "request_router_config": RequestRouterConfig(request_router_class=LeastQueuedAudio,
                                                     request_routing_stats_period_s=ROUTING_STATS_PERIOD_S),
        "max_constructor_retry_count": 2,  # a model that cannot load fails the deployment, not 20 retries
        "graceful_shutdown_timeout_s": 10,
    }
    if lo == hi:
        options["num_replicas"] = lo
    else:
        options["autoscaling_config"] = {"min_replicas": lo, "max_replicas": hi,
                                         "target_ongoing_requests": target_ongoing}
    if gpus_per_replica and config.backend == "auto":
        config = _replace(config, backend="cuda")  # the GPU Ray assigns (CUDA_VISIBLE_DEVICES) is device 0
    return serve.deployment(SpeechModel).options(name="SpeechModel", **options).bind(config)


def _replace(config: ServerConfig, **changes) -> ServerConfig:
    import dataclasses

    return dataclasses.replace(config, **changes)


def ray_options_of(args) -> dict:
    """build()'s keyword arguments from the CLI's parsed arguments."""
    return {"replicas": parse_replicas(args.replicas), "gpus_per_replica": float(args.gpus_per_replica),
            "cpus_per_replica": args.cpus_per_replica, "target_ongoing": float(args.target_ongoing)}


RAY_ARGS = {"replicas": str, "gpus_per_replica": float, "cpus_per_replica": float, "target_ongoing": float}


def app(args: dict):
    """`serve run omnivoice.server.ray:app model=... voices=... replicas=1..4` (or a Serve config's
    import_path with `args:`): an application builder. Its arguments: ServerConfig's fields (the command's
    flags without the dashes, but max_upload_bytes for --max-upload-mb; api_key defaults to $OMNIVOICE_API_KEY)
    and build()'s replicas (N or "MIN..MAX"), gpus_per_replica, cpus_per_replica, target_ongoing."""
    import dataclasses
    import typing

    from ..config import current

    hints = typing.get_type_hints(ServerConfig)
    fields = {f.name for f in dataclasses.fields(ServerConfig)}
    config_kw: dict = {"api_key": current().api_key}
    ray_kw: dict = {}
    for key, value in (args or {}).items():
        if key in RAY_ARGS:
            ray_kw[key] = RAY_ARGS[key](value)
        elif key in fields:
            config_kw[key] = _typed(key, hints[key], value)
        else:
            raise ValueError(f"omnivoice.server.ray:app: unknown argument {key!r}; expected one of "
                             f"{', '.join(sorted(fields | set(RAY_ARGS)))}")
    config = ServerConfig(**config_kw)
    return build(absolute_paths(config), replicas=parse_replicas(ray_kw.pop("replicas", "1")), **ray_kw)


def _typed(name: str, hint, value):
    """`value` (a Serve arg: often a string) as the ServerConfig field's type; ValueError naming the field."""
    import typing

    if value is None:
        return None
    if hint is bool:  # bool("false") is True: a Serve arg says a flag as text
        words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
        if isinstance(value, bool) or str(value).strip().lower() in words:
            return value if isinstance(value, bool) else words[str(value).strip().lower()]
        raise ValueError(f"omnivoice.server.ray:app: {name}={value!r} is not true or false")
    kinds = [t for t in (typing.get_args(hint) or (hint,)) if t is not type(None)]
    for kind in sorted(kinds, key=lambda t: t is str):  # numbers before text: max_batch=8 is 8, "auto" stays
        try:
            return kind(value)
        except (TypeError, ValueError):
            continue
    raise ValueError(f"omnivoice.server.ray:app: {name}={value!r} is not a {' or '.join(k.__name__ for k in kinds)}")


def absolute_paths(config: ServerConfig) -> ServerConfig:
    """The config with its local paths made absolute: replicas do not start in the caller's directory."""
    import os

    def local(p: Optional[str]) -> Optional[str]:
        return os.path.abspath(p) if p and os.path.exists(p) else p

    return _replace(config, voices=config.voices.absolute(), model=local(config.model), codec=local(config.codec))

