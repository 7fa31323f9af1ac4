"""The flags every speech server takes (python -m omnivoice.server and python -m omnivoice.wyoming): the model,
the voice library and the batched engine, streaming and logging; and the command's run (exit statuses, signals).
Importing it needs no server extra."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from ..arguments import add_model_options, add_quant_option, add_threads_option
from ..cli import run, setup_logging
from ..config import current

__all__ = ["add_engine_arguments", "add_model_arguments", "add_stream_and_log_arguments", "check_engine_arguments",
           "run_server", "server_parser"]


def server_parser(prog: str, description: str, epilog: str):
    """A speech server's command line: the model's flags, then the "serving" group, returned with the parser for
    the command's own flags."""
    p = argparse.ArgumentParser(prog=prog, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
                                description=description)
    add_model_arguments(p)
    return p, p.add_argument_group("serving")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The model's flags (a group of their own), as every server names them."""
    g = p.add_argument_group("model")
    add_model_options(g)
    g.add_argument("--backend", default="auto", help="auto, cpu, cuda, vulkan, metal, optionally :INDEX")
    add_quant_option(g)
    add_threads_option(g)


def add_engine_arguments(g, refusal: str) -> None:
    """The voice library's and the batched engine's flags (checked by check_engine_arguments); `refusal`: what a
    client whose request finds the queue full gets, in the server's terms."""
    g.add_argument("--voices", type=Path, default=Path("voices"),
                   help="voice library folder of NAME.rvq + NAME.rvq.txt files (default ./voices)")
    g.add_argument("--max-batch", default="auto", help="requests batched into one LM step (default auto)")
    g.add_argument("--max-wait-ms", type=float, default=10.0,
                   help="how long a request that arrives while others run may wait to join their batch "
                        "(default 10; an idle engine starts at once)")
    g.add_argument("--max-queue", type=int, default=64,
                   help=f"waiting requests; past them a new request is refused ({refusal}; default 64)")
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


def add_stream_and_log_arguments(g) -> None:
    """--short-first-piece and --log-level."""
    g.add_argument("--short-first-piece", action="store_true",
                   help="cut a streamed answer's long first sentence (over 80 characters) at a clause, so its first "
                        "audio comes sooner; it changes that sentence's tokens (off: a one-sentence answer speaks as "
                        "the Python API's synthesize)")
    g.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])


def run_server(parser: argparse.ArgumentParser, serve, argv: list[str] | None) -> int:
    """A server's command: parse `argv`, log at --log-level, run `serve(args)` under cli.run (its exit statuses
    and signal handling)."""
    args = parser.parse_args(argv)
    setup_logging(getattr(logging, args.log_level.upper()), "%(levelname)s %(name)s: %(message)s")

    def checked() -> int:
        current()  # a malformed OMNIVOICE_* variable is bad input before a port is taken or a model loaded
        return serve(args)

    return run(checked)
