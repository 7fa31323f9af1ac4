"""The batch output folder: OUTDIR/<id>.<ext> written whole or not at all, the tokens beside them, and
OUTDIR/failures.jsonl; what an item's outcome becomes there (encode_result, exit_code_of), for the local run and
the Ray actors alike.

An item counts as done when its audio file exists (so a rerun resumes where a run stopped); with
--save-tokens its tokens (`<id>.npy`, int32 [8, T], chunks joined along T) are written before the audio, so
a done item always has both. failures.jsonl is started anew by every run and gets one line per failed item as
the run goes on: {"id": ..., "line": ..., "reason": ...}.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np

from .. import cli
from ..audio.io import encode_audio, format_extension
from ..files import atomic_write_bytes

__all__ = ["OutputDir", "FAILURES", "encode_result", "exit_code_of"]

FAILURES = "failures.jsonl"


class OutputDir:
    """Where a batch run writes. Creating it checks that files can be written there (OSError if not)."""

    def __init__(self, path: str | os.PathLike, fmt: str = "wav16", save_tokens: bool = False) -> None:
        self.path = Path(path)
        self.fmt, self.ext = fmt, format_extension(fmt)
        self.save_tokens = save_tokens
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.path.is_dir():
            raise NotADirectoryError(f"{self.path}: not a directory")
        # A real write, not os.access: permissions, read-only mounts, full disks and ACLs all show here.
        fd, probe = tempfile.mkstemp(prefix=".omnivoice-probe.", dir=self.path)
        os.close(fd)
        os.unlink(probe)
        self._failures = None

    def audio_path(self, item_id: str) -> Path:
        return self.path / f"{item_id}.{self.ext}"

    def tokens_path(self, item_id: str) -> Path:
        return self.path / f"{item_id}.npy"

    def done(self, item_id: str) -> bool:
        return self.audio_path(item_id).is_file()

    def write(self, item_id: str, audio_bytes: bytes, tokens: Optional[list[np.ndarray]] = None) -> None:
        """Write one item (its audio already encoded, see encode), tokens first."""
        if self.save_tokens and tokens is not None:
            buf = io.BytesIO()
            np.save(buf, np.concatenate([np.asarray(t, np.int32) for t in tokens], axis=1))
            atomic_write_bytes(self.tokens_path(item_id), buf.getvalue(), what="the tokens")
        atomic_write_bytes(self.audio_path(item_id), audio_bytes, what="the audio output")

    def encode(self, audio: np.ndarray, sample_rate: int) -> bytes:
        return encode_audio(audio, sample_rate, self.fmt)

    def fail(self, item_id: Any, line: Optional[int], reason: str) -> None:
        """Append one failure record (the file is started anew by the first record of a run). `item_id` is
        what the line gave (any JSON value, None for none)."""
        if self._failures is None:
            self._failures = open(self.path / FAILURES, "w", encoding="utf-8")
        rec = {"id": item_id, "line": line, "reason": reason}
        text = json.dumps(rec, ensure_ascii=False)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from a "\ud800" escape: kept as the escape
            text = json.dumps(rec)
        self._failures.write(text + "\n")
        self._failures.flush()

    def close(self) -> None:
        if self._failures is not None:
            self._failures.close()
            self._failures = None
        else:  # a run without failures leaves none of an earlier run's records behind
            try:
                (self.path / FAILURES).unlink()
            except FileNotFoundError:
                pass


def encode_result(result, fmt: str):
    """(audio file bytes, tokens, seconds of audio) of a SynthesisResult."""
    return encode_audio(result.audio, result.sample_rate, fmt), result.tokens, result.duration


def exit_code_of(e: BaseException) -> int:
    """The exit status an item's failure stands for (a Ray actor's failure carries it as exit_code)."""
    if getattr(e, "exit_code", None) is not None:
        return e.exit_code
    if isinstance(e, MemoryError):
        return cli.EXIT_OOM
    if isinstance(e, cli.BAD_INPUT):
        return cli.EXIT_BAD_INPUT
    return cli.EXIT_FAILURE
