"""``python -m omnivoice.convert CHECKPOINT_DIR -o OUT_DIR [--quant auto|f32|f16|bf16|q8_0|q4_k_m|...]``."""

from __future__ import annotations

import argparse
import sys

from .. import cli


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and convert; a bad checkpoint is one `error:` line and exit status 2 (omnivoice.cli)."""
    from ..resolve import AUTO_QUANT_HELP
    from .lm import QUANTS

    ap = argparse.ArgumentParser(
        prog="python -m omnivoice.convert", epilog=cli.EXIT_STATUS_HELP + ".",
        description="Convert a Hugging Face OmniVoice checkpoint (k2-fsa/OmniVoice layout) to GGUF: "
                    "omnivoice-base-{QUANT}.gguf and omnivoice-tokenizer-F32.gguf (kept when already converted "
                    "from the same codec weights). The output folder then works as --model.")
    ap.add_argument("checkpoint", help="checkpoint directory (config.json, model.safetensors, audio_tokenizer/, ...)")
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("--quant", choices=("auto",) + tuple(QUANTS), default="auto",
                    metavar="QUANT",
                    help="storage of the LM matrices and embeddings (norms stay F32): " + ", ".join(QUANTS)
                         + " (the K-quants with omnivoice.cpp's tensor policy, see omnivoice.quantize); default "
                         f"auto: the type that suits --backend, as omnivoice.tts converts ({AUTO_QUANT_HELP})")
    ap.add_argument("--backend", default="auto",
                    help="the backend the files are for, which decides --quant auto (default auto: the first GPU "
                         "of this install, else the CPU)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-tensor progress")
    args = ap.parse_args(argv)
    return cli.run(lambda: _convert(args))


def _convert(args: argparse.Namespace) -> int:
    from . import convert_checkpoint

    quant = args.quant
    if quant == "auto":
        from ..ggml.backend import find_device
        from ..resolve import default_quant

        device, _ = find_device(args.backend)
        quant = default_quant(device.backend)
    convert_checkpoint(args.checkpoint, args.out, quant, progress=not args.quiet)
    if args.quant == "auto" and not args.quiet:
        print(f"(--quant auto: {quant} for {device.spec}, {device.description})", file=sys.stderr)
    return cli.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
