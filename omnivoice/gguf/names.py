"""File names of a converted model: what the converter writes and what the loaders look for beside each other."""

from __future__ import annotations

CODEC_FILENAME = "omnivoice-tokenizer-F32.gguf"  # the audio codec (arch omnivoice-tokenizer), always F32


def lm_filename(quant: str) -> str:
    """File name of the LM GGUF for ``quant`` (f32 -> omnivoice-base-F32.gguf, q8_0 -> ...-Q8_0.gguf)."""
    return f"omnivoice-base-{quant.upper()}.gguf"
