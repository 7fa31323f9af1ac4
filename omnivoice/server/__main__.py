"""`python -m omnivoice.server`: serve the OpenAI speech API with uvicorn.

Argument parsing and process lifetime only: the app is omnivoice.server.app's.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path

from ..arguments import add_quant_option, add_threads_option
from ..cli import EXIT_STATUS_HELP, run, setup_logging
from ..config import current

log = logging.getLogger("omnivoice.server")

EPILOG = f"""\
--model and --codec are checked (the files and folders exist, GGUF files have a GGUF header) and the port is
bound before the server starts: a bad model or a port in use is one error line, status 2 or 1. The model then
loads in the background: GET /health answers 503 until it is ready; a model that cannot be loaded stops the
server with status 2 (bad input) or 1. SIGINT and SIGTERM shut it down gracefully.

With --ray the same API is served by Ray Serve (omnivoice.server.ray, docs/SERVING.md): model replicas (a GPU
each by default) behind one endpoint, requests routed to the replica with the least queued audio, --replicas
MIN..MAX autoscaled by queue length. Without --address a local Ray cluster is started (and stopped at exit).
{EXIT_STATUS_HELP}

examples:
  python -m omnivoice.server --model ./OmniVoice --voices ./voices
  OMNIVOICE_API_KEY=secret python -m omnivoice.server --host 0.0.0.0 --port 8000 --backend cuda
  python -m omnivoice.server --ray --replicas 2 --model ./OmniVoice --voices ./voices       # two GPUs
  python -m omnivoice.server --ray --address auto --replicas 1..8 --voices /shared/voices   # a cluster
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m omnivoice.server", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="OpenAI-compatible OmniVoice speech server.")
    add_model_arguments(p)
    g = p.add_argument_group("serving")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    g.add_argument("--port", type=int, default=8000)
    g.add_argument("--api-key", default=current().api_key,
                   help="require 'Authorization: Bearer KEY' on /v1/ (default: $OMNIVOICE_API_KEY, else none)")
    add_engine_arguments(g)
    g.add_argument("--max-upload-mb", type=float, default=20.0, help="request body limit in MiB (default 20)")
    g.add_argument("--max-input-chars", type=int, default=4096,
                   help="longest input text; on the WebSocket, the most text pending per connection (default 4096)")
    g.add_argument("--max-duration", type=float, default=600.0,
                   help="the longest audio one request may ask for with `duration`, in seconds (default 600, the "
                        "request schema's bound; the engine runs a request's chunk as one graph, so on a CPU a "
                        "long one holds the others back: 60 suits a CPU server)")
    g.add_argument("--ws-idle-timeout", type=float, default=60.0,
                   help="seconds a WebSocket may stay without a message while nothing is spoken (default 60)")
    g.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a connection has to send a whole request head, from its start or its previous "
                        "response (default 10)")
    g.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds a request body may go without a byte before its connection is closed (default 30)")
    add_log_level(g)
    g = p.add_argument_group("Ray Serve (extra [ray]; docs/SERVING.md)")
    g.add_argument("--ray", action="store_true", help="serve on Ray Serve: model replicas behind one endpoint")
    g.add_argument("--address", help="Ray cluster to join (e.g. auto, or HOST:6379; default: start a local one)")
    g.add_argument("--replicas", default="1", help="model replicas: N, or MIN..MAX to autoscale (default 1)")
    g.add_argument("--gpus-per-replica", type=float, default=1.0,
                   help="GPUs per model replica (default 1; 0.5: two replicas share a GPU; 0: CPU replicas)")
    g.add_argument("--cpus-per-replica", type=float,
                   help="CPUs Ray reserves per model replica (default 1 with GPUs, else --threads or 1)")
    g.add_argument("--target-ongoing", type=float, default=16.0,
                   help="autoscaling: requests queued or running per replica to aim for (default 16)")
    return p


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model's flags (a group of their own), as every server names them (also python -m omnivoice.wyoming)."""
    g = p.add_argument_group("model")
    g.add_argument("--model", help="LM GGUF, OmniVoice checkpoint directory or Hugging Face repo id "
                                   "(default: $OMNIVOICE_MODEL, else k2-fsa/OmniVoice)")
    g.add_argument("--codec", help="codec GGUF (default: omnivoice-tokenizer-F32.gguf beside the model)")
    g.add_argument("--backend", default="auto", help="auto, cpu, cuda, vulkan, metal, optionally :INDEX")
    add_quant_option(g)
    add_threads_option(g)


def add_engine_arguments(g) -> None:
    """The voice library's and the batched engine's flags (checked by check_engine_arguments)."""
    g.add_argument("--voices", type=Path, default=Path("voices"),
                   help="voice library folder of NAME.rvq + NAME.rvq.txt files (default ./voices)")
    g.add_argument("--max-batch", default="auto", help="requests batched into one LM step (default auto)")
    g.add_argument("--max-wait-ms", type=float, default=10.0,
                   help="how long a request that arrives while others run may wait to join their batch "
                        "(default 10; an idle engine starts at once)")
    g.add_argument("--max-queue", type=int, default=64, help="waiting requests before 503 (default 64)")
    g.add_argument("--first-audio-ms", type=float, default=300.0,
                   help="the schedule's first-audio deadline: a new stream's first piece is due this many ms after "
                        "its arrival, and requests share the steps by deadline (omnivoice.engine.schedule; default "
                        "300)")
    g.add_argument("--max-step-positions", type=int,
                   help="the step cap: packed LM positions one step may hold (a request larger than it runs alone), "
                        "so that a waiting first piece is never stuck behind one huge step (default: the memory "
                        "budget of --max-batch auto, on a GPU at most one graph's)")


def check_engine_arguments(args) -> None:
    """ValueError for a bad --max-batch, --max-queue, --max-wait-ms, --first-audio-ms, --max-step-positions or
    --voices; --max-batch parsed."""
    if args.max_batch != "auto":
        try:
            args.max_batch = int(args.max_batch)
        except ValueError:
            raise ValueError(f"--max-batch must be 'auto' or a positive integer, got {args.max_batch!r}") from None
    for name, value in (("--max-batch", args.max_batch if args.max_batch != "auto" else 1),
                        ("--max-queue", args.max_queue)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if args.max_wait_ms < 0:
        raise ValueError(f"--max-wait-ms must be >= 0, got {args.max_wait_ms}")
    if not args.first_audio_ms >= 0:
        raise ValueError(f"--first-audio-ms must be >= 0, got {args.first_audio_ms}")
    if args.max_step_positions is not None and args.max_step_positions < 1:
        raise ValueError(f"--max-step-positions must be positive, got {args.max_step_positions}")
    if args.voices.exists() and not args.voices.is_dir():
        raise ValueError(f"--voices {args.voices}: not a folder")


def config_from_args(args):
    from .app import ServerConfig

    check_engine_arguments(args)
    for name, value in (("--max-input-chars", args.max_input_chars), ("--port", args.port + 1),
                        ("--max-upload-mb", args.max_upload_mb), ("--ws-idle-timeout", args.ws_idle_timeout),
                        ("--max-duration", args.max_duration), ("--header-timeout", args.header_timeout),
                        ("--body-timeout", args.body_timeout)):
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
    return ServerConfig(model=args.model, codec=args.codec, backend=args.backend, quant=args.quant,
                        cpu_products=args.cpu_products, threads=args.threads, voices=args.voices,
                        api_key=args.api_key, max_batch=args.max_batch,
                        max_wait_ms=args.max_wait_ms, max_queue=args.max_queue,
                        first_audio_ms=args.first_audio_ms, max_step_positions=args.max_step_positions,
                        short_first_piece=args.short_first_piece,
                        max_upload_bytes=int(args.max_upload_mb * 2**20), max_input_chars=args.max_input_chars,
                        ws_idle_timeout=args.ws_idle_timeout, max_duration=args.max_duration)


def listen(host: str, port: int) -> socket.socket:
    """The server's socket, bound to `host`:`port` (as uvicorn binds it); an OSError naming the address when it
    cannot be (in use, not this machine's, a privileged port), before anything else starts."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e} (--host, --port)") from None
    return sock


def serve(args) -> int:
    """Run the server until it is stopped; raises the load failure when the model cannot be loaded."""
    if args.ray:
        return serve_ray(args)
    try:
        import uvicorn

        from .app import create_app
    except ImportError as e:
        raise ValueError(f"the server needs its extra: pip install 'omnivoice-ggml[server]' ({e})") from None
    from ..resolve import check_model

    config = config_from_args(args)
    check_model(config.model, config.codec)  # a bad --model stops here, before the port is taken
    sock = listen(args.host, args.port)
    try:
        return _serve_on(sock, args, config, uvicorn, create_app)
    finally:
        sock.close()


def _serve_on(sock: socket.socket, args, config, uvicorn, create_app) -> int:
    config.voices.mkdir(parents=True, exist_ok=True)
    failure: list[BaseException] = []

    def load_failed(exc: BaseException) -> None:
        failure.append(exc)
        server.should_exit = True

    app = create_app(config, on_load_error=load_failed)
    from .connections import guarded, max_connections, raise_open_file_limit

    # idle sockets must not take the file descriptors: connections.py's guards
    http = guarded(args.header_timeout, args.body_timeout, max_connections(raise_open_file_limit()))
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                                           timeout_graceful_shutdown=10, http=http))
    host, port = sock.getsockname()[:2]
    where = f"{f'[{host}]' if ':' in host else host}:{port}"
    log.info("listening on http://%s (Ctrl-C to quit)", where)
    # uvicorn handles SIGINT / SIGTERM itself (a graceful shutdown), then raises the signal again for cli.run
    try:
        server.run(sockets=[sock])
    except SystemExit as e:  # uvicorn's own exit on a failed startup: reported as ours, with our status
        raise OSError(f"the server did not start on {where} (uvicorn exited with {e.code}; see the log above)") \
            from None
    if failure:
        raise failure[0]
    if not server.started:
        raise OSError(f"the server did not start on {where} (see the log above)")
    return 0


def serve_ray(args) -> int:
    """Deploy the model replicas on Ray Serve (omnivoice.server.ray.model_app) and serve the plain server's app and
    connection guards here, over them (RemoteBackend), until SIGINT / SIGTERM; then delete the Serve app (and stop
    the local cluster this started). No Serve HTTP proxy: it would add a hop each way and a call back for the
    body to every request, and it has none of the guards (docs/SERVING.md)."""
    import functools
    import signal

    try:
        import ray
        import uvicorn
        from ray import serve as ray_serve

        from .app import create_app
        from .ray import APP_NAME, RemoteBackend, absolute_paths, model_app, ray_options_of
    except ImportError as e:
        raise ValueError(f"--ray needs the extra: pip install 'omnivoice-ggml[ray]' ({e})") from None
    from ..resolve import check_model

    config = absolute_paths(config_from_args(args))
    options = ray_options_of(args)
    if args.address is None:  # a local cluster: the replicas see this machine's files (a cluster's hosts may not)
        check_model(config.model, config.codec)
    if not options["gpus_per_replica"] and args.backend == "auto":
        config.backend = "cpu"
    sock = listen(args.host, args.port)  # a port in use is one error line, before Ray starts
    try:
        sigterm = signal.getsignal(signal.SIGTERM)
        ray.init(address=args.address or None, include_dashboard=False,
                 logging_level=args.log_level.upper(), log_to_driver=args.log_level == "debug")
        signal.signal(signal.SIGTERM, sigterm)  # ray.init's own handler exits at once: SIGTERM stays cli.run's
        started = args.address is None
        try:
            # no proxy of Serve's (where Serve already runs on the cluster, it keeps what it has)
            ray_serve.start(proxy_location="Disabled")
            handle = ray_serve.run(model_app(config, **options), name=APP_NAME, route_prefix=None, blocking=False)
            log.info("Ray Serve app %r: %s model replicas", APP_NAME, args.replicas)
            app = functools.partial(create_app, loader=lambda config: RemoteBackend(handle))
            return _serve_on(sock, args, config, uvicorn, app)
        finally:
            try:
                ray_serve.delete(APP_NAME)
                if started:
                    ray_serve.shutdown()
            finally:
                ray.shutdown()
    finally:
        sock.close()


def add_log_level(g) -> None:
    g.add_argument("--short-first-piece", action="store_true",
                   help="cut a streamed answer's long first sentence (over 80 characters) at a clause, so its first "
                        "audio comes sooner; it changes that sentence's tokens (off: a one-sentence answer speaks as "
                        "the Python API's synthesize)")
    g.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def run_server(parser: argparse.ArgumentParser, serve, argv: list[str] | None) -> int:
    """A server's command: parse `argv`, log at --log-level, run `serve(args)` under cli.run (its exit statuses
    and signal handling). Also python -m omnivoice.wyoming's."""
    args = parser.parse_args(argv)
    setup_logging(getattr(logging, args.log_level.upper()), "%(levelname)s %(name)s: %(message)s")
    return run(lambda: serve(args))


def main(argv: list[str] | None = None) -> int:
    return run_server(build_parser(), serve, argv)


if __name__ == "__main__":
    sys.exit(main())
