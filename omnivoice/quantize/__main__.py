"""`python -m omnivoice.quantize IN.gguf OUT.gguf --type TYPE`: requantize a model GGUF (omnivoice.quantize's
schemes). Argument parsing only; exit statuses: omnivoice.cli."""

from __future__ import annotations

import argparse
import sys

from .. import cli
from . import SCHEMES, quantize_file


def main(argv: list[str] | None = None) -> int:
    """``python -m omnivoice.quantize IN.gguf OUT.gguf --type TYPE``; exit statuses of omnivoice.cli."""
    ap = argparse.ArgumentParser(
        prog="python -m omnivoice.quantize", epilog=cli.EXIT_STATUS_HELP + ".",
        description="Requantize an OmniVoice model GGUF (ours or omnivoice.cpp's; the LM or the codec), like "
                    "llama-quantize: the tensor types of the chosen scheme (omnivoice.cpp's policy), everything "
                    "else kept.")
    ap.add_argument("input", help="input GGUF (omnivoice-base-*.gguf or omnivoice-tokenizer-*.gguf)")
    ap.add_argument("output", help="output GGUF")
    ap.add_argument("--type", required=True, type=str.lower, choices=list(SCHEMES), metavar="TYPE",
                    help=f"weight scheme: {', '.join(SCHEMES)}")
    ap.add_argument("--allow-requantize", action="store_true",
                    help="also requantize tensors that are already quantized (from their dequantized values)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-tensor progress")
    args = ap.parse_args(argv)

    def body() -> int:
        out = quantize_file(args.input, args.output, args.type, args.allow_requantize, progress=not args.quiet)
        if not args.quiet:
            print(f"wrote {out}", file=sys.stderr)
        return cli.EXIT_OK

    return cli.run(body)


if __name__ == "__main__":
    raise SystemExit(main())
