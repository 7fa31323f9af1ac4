"""`python -m omnivoice.wyoming`: serve OmniVoice over the Wyoming protocol until stopped.

Argument parsing and process lifetime only: the connections are handler.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from functools import partial

from ..cli import EXIT_STATUS_HELP
from ..options import OptionError, add_arguments, check_all, flag_message, flags, from_arguments
from ..server.arguments import add_engine_arguments, add_stream_and_log_arguments, check_engine_arguments, \
    run_server, server_parser

# The synthesis options a command line sets for every answer (a Wyoming client cannot): all but the ones that
# concern a whole text (duration, long-form chunking); each sentence is spoken on its own.
OPTION_NAMES = ("speed", "num_step", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
                "class_temperature", "seed", "denoise", "postprocess_output", "pad_duration", "fade_duration")

EPILOG = f"""\
The model loads before the server listens. Home Assistant: Settings > Devices & services > Add integration >
Wyoming Protocol, host and port of --uri. SIGINT and SIGTERM stop the server.
{EXIT_STATUS_HELP}

examples:
  python -m omnivoice.wyoming --uri tcp://0.0.0.0:10200 --model ./OmniVoice --voices ./voices
  python -m omnivoice.wyoming --uri tcp://127.0.0.1:10200 --backend cuda --voice nova --seed 7
"""


def build_parser() -> argparse.ArgumentParser:
    p, g = server_parser("python -m omnivoice.wyoming", "OmniVoice as a Wyoming text-to-speech service.", EPILOG)
    g.add_argument("--uri", default="tcp://127.0.0.1:10200",
                   help="where to listen: tcp://HOST:PORT, unix://PATH or stdio:// (default tcp://127.0.0.1:10200)")
    add_engine_arguments(g, "an error event")
    g.add_argument("--voice", default="auto",
                   help="the voice of a request that names none: auto, a built-in name or a library voice "
                        "(default auto)")
    g.add_argument("--language", help="the language of a request that names none (default: none, the "
                                      "language-agnostic mode)")
    g.add_argument("--samples-per-chunk", type=int, default=1024, help="samples per audio-chunk event (default 1024)")
    add_stream_and_log_arguments(g)
    add_arguments(p.add_argument_group("synthesis (every answer)"), OPTION_NAMES)
    return p


def serve(args) -> int:
    try:
        from wyoming.server import AsyncServer

        from .handler import Handler, Service
    except ImportError as e:
        raise ValueError(f"the Wyoming server needs its extra: pip install 'omnivoice-ggml[wyoming]' ({e})") from None
    from ..server.engine_adapter import load_backend
    from ..server.voices import VoiceLibrary

    check_engine_arguments(args)
    if args.samples_per_chunk < 1:
        raise ValueError(f"--samples-per-chunk must be positive, got {args.samples_per_chunk}")
    options = from_arguments(args, OPTION_NAMES)
    try:
        check_all(options)
    except OptionError as e:
        raise ValueError(flag_message(e, flags(OPTION_NAMES))) from None
    try:
        server = AsyncServer.from_uri(args.uri)
    except ValueError as e:
        raise ValueError(f"--uri {args.uri}: {e}") from None
    # the default voice and language are checked before the model loads (the library needs no model)
    service = Service(None, VoiceLibrary(args.voices), {**options, "language": args.language}, args.voice,
                      args.samples_per_chunk)
    try:
        service.request(None)
    except ValueError as e:
        raise ValueError(f"--voice / --language: {e}") from None
    service.backend = load_backend(args.model, args.codec, backend=args.backend, quant=args.quant,
                                   threads=args.threads, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                                   max_queue=args.max_queue, cpu_products=args.cpu_products,
                                   first_audio_ms=args.first_audio_ms, max_step_positions=args.max_step_positions)
    try:
        logging.getLogger("omnivoice.wyoming").info("model %s loaded on %s; listening on %s",
                                                    service.backend.model_name, service.backend.device, args.uri)
        asyncio.run(server.run(partial(Handler, service)))
    finally:
        service.backend.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_server(build_parser(), serve, argv)


if __name__ == "__main__":
    sys.exit(main())
