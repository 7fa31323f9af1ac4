"""Voice prompts and their files: a reference clip's codes with its transcript, ready for cloning.

A saved voice is two files: the codes and the clip's loudness in a .rvq container (rvq_format.py), and the
transcript as UTF-8 text beside it, named PATH + ".txt" (me.rvq -> me.rvq.txt). Any .rvq made by
`python -m omnivoice.codec` is a voice too once its transcript is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..text.utf8 import decode_utf8
from .rvq_format import check_rates, read_rvq, save_rvq

__all__ = ["VoicePrompt", "transcript_path"]


@dataclass(frozen=True, eq=False)
class VoicePrompt:
    """A voice to clone: the reference clip's codes int32 [8, T] at 25 frames/s, its transcript, and its
    loudness (RMS before normalisation; None when unknown)."""

    codes: np.ndarray
    text: str
    rms: Optional[float] = None

    def __post_init__(self):
        codes = np.asarray(self.codes)
        if codes.ndim != 2 or codes.shape[1] == 0 or not np.issubdtype(codes.dtype, np.integer):
            raise ValueError(f"voice prompt codes must be integers [codebooks, frames] with frames > 0, "
                             f"got {codes.dtype} {codes.shape}")
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError("voice prompt needs the transcript of its reference audio (ref_text)")
        object.__setattr__(self, "codes", codes.astype(np.int32, copy=False))

    @property
    def frames(self) -> int:
        """Length of the prompt in codec frames (25 per second)."""
        return int(self.codes.shape[1])

    def __repr__(self) -> str:
        text = self.text if len(self.text) <= 40 else self.text[:37].rstrip() + "..."
        rms = "None" if self.rms is None else f"{self.rms:.4g}"
        return f"VoicePrompt({self.codes.shape[0]} codebooks x {self.frames} frames, text={text!r}, rms={rms})"

    def save(self, path: str | os.PathLike) -> None:
        """Write the codes and loudness to PATH (a .rvq file) and the transcript to PATH.txt, each atomically."""
        from ..files import atomic_write_text

        save_rvq(path, self.codes, ref_rms=self.rms)
        atomic_write_text(transcript_path(path), self.text)

    @classmethod
    def load(cls, path: str | os.PathLike, text: Optional[str] = None, *, n_codebooks: int = 8,
             codebook_size: int = 1024, sample_rate: int = 24000, frame_rate: float = 25.0) -> "VoicePrompt":
        """Read a voice saved with save(), or any .rvq with its transcript given as `text`; its codes must be for
        the codec's `sample_rate` and `frame_rate` (OmniVoice's by default; rvq_format.check_rates).

        omnivoice.cpp's headerless .rvq files are read too; they hold neither the codec's number of codebooks
        nor its codebook size (pass the codec's; OmniVoice's by default), nor the clip's loudness (rms None)."""
        rvq = read_rvq(path, n_codebooks=n_codebooks, codebook_size=codebook_size)
        check_rates(rvq, sample_rate, frame_rate, path)
        if text is None:
            side = transcript_path(path)
            if not side.is_file():
                raise FileNotFoundError(f"no transcript for voice {path}: expected {side}, or pass ref_text")
            text = decode_utf8(side.read_bytes(), str(side))
        return cls(rvq.codes, text.strip(), rvq.ref_rms)


def transcript_path(path: str | os.PathLike) -> Path:
    """Where a saved voice keeps its transcript: the .rvq path plus .txt."""
    return Path(str(path) + ".txt")
