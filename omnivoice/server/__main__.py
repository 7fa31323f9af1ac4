"""`python -m omnivoice.server`: serve the OpenAI speech API with uvicorn.

Argument parsing and process lifetime only: the app is omnivoice.server.app's.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys

from ..cli import EXIT_STATUS_HELP
from ..config import variable
from .arguments import add_engine_arguments, add_stream_and_log_arguments, check_engine_arguments, \
    run_server, server_parser

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
    p, g = server_parser("python -m omnivoice.server", "OpenAI-compatible OmniVoice speech server.", EPILOG)
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    g.add_argument("--port", type=int, default=8000, help="port to bind (default 8000)")
    g.add_argument("--api-key", default=variable("OMNIVOICE_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1/ (default: $OMNIVOICE_API_KEY, else none)")
    add_engine_arguments(g, "503 with Retry-After")
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
    add_stream_and_log_arguments(g)
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


def main(argv: list[str] | None = None) -> int:
    return run_server(build_parser(), serve, argv)


if __name__ == "__main__":
    sys.exit(main())
