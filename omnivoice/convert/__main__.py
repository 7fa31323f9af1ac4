"""``python -m omnivoice.convert CHECKPOINT_DIR -o OUT_DIR [--quant f32|f16|bf16|q8_0]``."""

from __future__ import annotations

import argparse
import sys

from . import QUANTS, CheckpointError, ConversionError, convert_checkpoint


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, convert, and turn checkpoint problems into a one-line error and exit status 1."""
    ap = argparse.ArgumentParser(
        prog="python -m omnivoice.convert",
        description="Convert a Hugging Face OmniVoice checkpoint (k2-fsa/OmniVoice layout) to GGUF: "
                    "omnivoice-base-{QUANT}.gguf and omnivoice-tokenizer-F32.gguf.")
    ap.add_argument("checkpoint", help="checkpoint directory (config.json, model.safetensors, audio_tokenizer/, ...)")
    ap.add_argument("-o", "--out", required=True, help="output directory")
    ap.add_argument("--quant", choices=QUANTS, default="f16",
                    help="storage of the LM matrices (default f16; norms F32, embeddings F16 for q8_0)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-tensor progress")
    args = ap.parse_args(argv)
    try:
        convert_checkpoint(args.checkpoint, args.out, args.quant, progress=not args.quiet)
    except (CheckpointError, ConversionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
