"""SubRip (.srt) subtitles: parsing cues, and laying synthesized cue audio on one timeline.

Accepted input: blocks separated by one or more blank lines, each block being a cue number, a
timing line ``HH:MM:SS,mmm --> HH:MM:SS,mmm`` and zero or more text lines. Tolerated: a UTF-8 BOM,
CRLF or CR line ends, ``.`` instead of ``,`` before the milliseconds, hours of any number of
digits, spaces around the arrow, and trailing text after the end time (the position hints some
editors write, ignored). Cue numbers need not be consecutive. Times past ``MAX_HOURS`` hours are
refused. Anything else raises ``SrtError`` naming the line number and what was expected there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from ..text.utf8 import decode_utf8
from .io import check_rate

__all__ = ["Cue", "SrtError", "parse_srt", "load_srt", "place_cues", "timeline_samples", "MAX_HOURS"]

MAX_HOURS = 99_999  # far past any real subtitle; bounds the numbers (a 400-digit hour field overflows a float)

_TIME = r"(\d+):([0-5]\d):([0-5]\d)[,.](\d{3})"
_TIMING_RE = re.compile(rf"^\s*{_TIME}\s*-->\s*{_TIME}(?:\s.*)?$")
_INDEX_RE = re.compile(r"^\s*(\d+)\s*$")


class SrtError(ValueError):
    """A malformed SRT file; the message names the line and what was expected."""


@dataclass(frozen=True)
class Cue:
    """One subtitle: its number, start and end in seconds, and its text (lines joined by "\\n";
    may be empty for a cue with no text lines, which callers should render as silence)."""

    index: int
    start: float
    end: float
    text: str

    @property
    def duration(self) -> float:
        """Length of the cue's slot in seconds."""
        return self.end - self.start


def _seconds(h: str, m: str, s: str, ms: str, where: str) -> float:
    # leading zeros are stripped before int(): a 5 000-digit field of zeros and a 1 passed the length check and
    # reached Python's 4 300-digit limit of int() ("Exceeds the limit", no file or line)
    hours = h.lstrip("0") or "0"
    if len(hours) > len(str(MAX_HOURS)) or int(hours) > MAX_HOURS:
        raise SrtError(f"{where}: time {h[:12]}{'...' if len(h) > 12 else ''}:{m}:{s},{ms} is past {MAX_HOURS} hours")
    return int(hours) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000.0


MAX_CUE_DIGITS = 18  # a cue number fits an int64


def parse_srt(text: str, source: str = "<srt>") -> list[Cue]:
    """Parse SRT text into cues, in file order. ``source`` names the file in error messages.

    Raises ``SrtError`` for a missing cue number, a malformed timing line, an end before the start,
    or a file with no cues.
    """
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    cues: list[Cue] = []
    i = 0
    n = len(lines)
    while i < n:
        if not lines[i].strip():
            i += 1
            continue
        m = _INDEX_RE.match(lines[i])
        if not m:
            raise SrtError(f"{source}:{i + 1}: expected a cue number, got {lines[i].strip()[:60]!r}")
        number = m.group(1).lstrip("0") or "0"
        if len(number) > MAX_CUE_DIGITS:
            raise SrtError(f"{source}:{i + 1}: cue number {number[:12]}... has {len(number)} digits; at most "
                           f"{MAX_CUE_DIGITS} are taken")
        index = int(number)
        i += 1
        if i >= n or not lines[i].strip():
            raise SrtError(
                f"{source}:{i + 1}: expected a timing line 'HH:MM:SS,mmm --> HH:MM:SS,mmm' "
                f"after cue number {index}, got {'end of file' if i >= n else 'a blank line'}"
            )
        t = _TIMING_RE.match(lines[i])
        if not t:
            raise SrtError(
                f"{source}:{i + 1}: expected a timing line 'HH:MM:SS,mmm --> HH:MM:SS,mmm', "
                f"got {lines[i].strip()[:60]!r}"
            )
        start = _seconds(*t.groups()[:4], f"{source}:{i + 1}")
        end = _seconds(*t.groups()[4:], f"{source}:{i + 1}")
        if end < start:
            raise SrtError(
                f"{source}:{i + 1}: cue {index} ends before it starts ({end:.3f} s < {start:.3f} s)"
            )
        i += 1
        body = []
        while i < n and lines[i].strip():
            if body and _INDEX_RE.match(body[-1]) and _TIMING_RE.match(lines[i]):
                # A cue number and a timing line inside the text: the blank separator is missing.
                raise SrtError(f"{source}:{i}: expected a blank line before cue {body[-1]}")
            body.append(lines[i].strip())
            i += 1
        cues.append(Cue(index=index, start=start, end=end, text="\n".join(body)))
    if not cues:
        raise SrtError(f"{source}: no subtitle cues found (expected 'N', a timing line and text)")
    return cues


def load_srt(path: Union[str, "os.PathLike[str]"]) -> list[Cue]:
    """Read and parse an SRT file (UTF-8, with or without BOM)."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise SrtError(f"{name}: cannot read ({exc.strerror or exc})") from exc
    return parse_srt(decode_utf8(raw, name, SrtError), source=name)


def place_cues(cues: Sequence[Cue], audios: Sequence[np.ndarray], sample_rate: int) -> np.ndarray:
    """Lay each cue's audio on one timeline and return it (float32 mono).

    Cue ``k`` occupies samples ``[round(start * rate), round(end * rate))``. Its audio starts at
    the slot's start; audio shorter than the slot is followed by silence, longer audio is cut at
    the slot's end. Overlap rule: when a cue starts before the previous one ends (overlapping
    cues), the earlier cue is cut where the later one starts, so voices never mix; cues are
    placed in start-time order. The timeline ends at the latest cue end.
    """
    if len(cues) != len(audios):
        raise ValueError(f"place_cues got {len(cues)} cues but {len(audios)} audio clips")
    rate = check_rate(sample_rate)
    if not cues:
        return np.zeros(0, dtype=np.float32)
    slots = [(int(round(c.start * rate)), int(round(c.end * rate))) for c in cues]
    order = sorted(range(len(cues)), key=lambda k: (slots[k][0], k))
    total = timeline_samples(cues, rate)
    timeline = np.zeros(total, dtype=np.float32)
    for pos, k in enumerate(order):
        start, end = slots[k]
        if pos + 1 < len(order):
            end = min(end, slots[order[pos + 1]][0])
        clip = np.asarray(audios[k], dtype=np.float32)
        if clip.ndim != 1:
            raise ValueError(f"audio for cue {cues[k].index} must be mono [samples]; got shape {clip.shape}")
        n = max(0, min(len(clip), end - start))
        timeline[start : start + n] = clip[:n]
    return timeline


def timeline_samples(cues: Sequence[Cue], sample_rate: int) -> int:
    """Length in samples of the timeline place_cues makes: up to the latest cue end (0 without cues)."""
    return max((int(round(c.end * sample_rate)) for c in cues), default=0)
