"""Rule-based duration estimate: per-script character weights scaled by a reference utterance.

A port of the reference's utils/duration.py (RuleDurationEstimator) and OmniVoice._estimate_target_tokens.
Durations are in whatever unit the reference duration is given in; the model passes audio tokens (25 per
second), and without a voice prompt it uses "Nice to meet you." = 25 tokens.
"""

from __future__ import annotations

import bisect
import unicodedata
from functools import lru_cache
from typing import Optional

# Relative speaking time of one character, 1.0 = one Latin letter.
WEIGHTS = {
    "cjk": 3.0,
    "hangul": 2.5,
    "kana": 2.2,
    "ethiopic": 3.0,
    "yi": 3.0,
    "indic": 1.8,
    "thai_lao": 1.5,
    "khmer_myanmar": 1.8,
    "arabic": 1.5,
    "hebrew": 1.5,
    "latin": 1.0,
    "cyrillic": 1.0,
    "greek": 1.0,
    "armenian": 1.0,
    "georgian": 1.0,
    "punctuation": 0.5,
    "space": 0.2,
    "digit": 3.5,
    "mark": 0.0,
    "default": 1.0,
}

# (last code point of the block, script), ascending; looked up with bisect.
RANGES = (
    (0x02AF, "latin"), (0x03FF, "greek"), (0x052F, "cyrillic"), (0x058F, "armenian"), (0x05FF, "hebrew"),
    (0x077F, "arabic"), (0x089F, "arabic"), (0x08FF, "arabic"), (0x097F, "indic"), (0x09FF, "indic"),
    (0x0A7F, "indic"), (0x0AFF, "indic"), (0x0B7F, "indic"), (0x0BFF, "indic"), (0x0C7F, "indic"),
    (0x0CFF, "indic"), (0x0D7F, "indic"), (0x0DFF, "indic"), (0x0EFF, "thai_lao"), (0x0FFF, "indic"),
    (0x109F, "khmer_myanmar"), (0x10FF, "georgian"), (0x11FF, "hangul"), (0x137F, "ethiopic"),
    (0x139F, "ethiopic"), (0x13FF, "default"), (0x167F, "default"), (0x169F, "default"), (0x16FF, "default"),
    (0x171F, "default"), (0x173F, "default"), (0x175F, "default"), (0x177F, "default"),
    (0x17FF, "khmer_myanmar"), (0x18AF, "default"), (0x18FF, "default"), (0x194F, "indic"), (0x19DF, "indic"),
    (0x19FF, "khmer_myanmar"), (0x1A1F, "indic"), (0x1AAF, "indic"), (0x1B7F, "indic"), (0x1BBF, "indic"),
    (0x1BFF, "indic"), (0x1C4F, "indic"), (0x1C7F, "indic"), (0x1C8F, "cyrillic"), (0x1CBF, "georgian"),
    (0x1CCF, "indic"), (0x1CFF, "indic"), (0x1D7F, "latin"), (0x1DBF, "latin"), (0x1DFF, "default"),
    (0x1EFF, "latin"), (0x309F, "kana"), (0x30FF, "kana"), (0x312F, "cjk"), (0x318F, "hangul"), (0x9FFF, "cjk"),
    (0xA4CF, "yi"), (0xA4FF, "default"), (0xA63F, "default"), (0xA69F, "cyrillic"), (0xA6FF, "default"),
    (0xA7FF, "latin"), (0xA82F, "indic"), (0xA87F, "default"), (0xA8DF, "indic"), (0xA8FF, "indic"),
    (0xA92F, "indic"), (0xA95F, "indic"), (0xA97F, "hangul"), (0xA9DF, "indic"), (0xA9FF, "khmer_myanmar"),
    (0xAA5F, "indic"), (0xAA7F, "khmer_myanmar"), (0xAADF, "indic"), (0xAAFF, "indic"), (0xAB2F, "ethiopic"),
    (0xAB6F, "latin"), (0xABBF, "default"), (0xABFF, "indic"), (0xD7AF, "hangul"), (0xFAFF, "cjk"),
    (0xFDFF, "arabic"), (0xFE6F, "default"), (0xFEFF, "arabic"), (0xFFEF, "latin"),
)
_BREAKPOINTS = [r[0] for r in RANGES]

# The reference's fallback voice prompt when there is none: this text spoken in 25 audio tokens.
DEFAULT_REF_TEXT = "Nice to meet you."
DEFAULT_REF_TOKENS = 25


@lru_cache(maxsize=4096)
def char_weight(char: str) -> float:
    """Weight of one character: ASCII letters 1.0, space 0.2, marks (and Arabic tatweel) 0, punctuation and
    symbols 0.5, other separators 0.2, numbers 3.5, otherwise by Unicode block (upper planes beyond U+20000
    count as CJK)."""
    code = ord(char)
    if (65 <= code <= 90) or (97 <= code <= 122):
        return WEIGHTS["latin"]
    if code == 32:
        return WEIGHTS["space"]
    if code == 0x0640:
        return WEIGHTS["mark"]
    category = unicodedata.category(char)
    if category.startswith("M"):
        return WEIGHTS["mark"]
    if category.startswith("P") or category.startswith("S"):
        return WEIGHTS["punctuation"]
    if category.startswith("Z"):
        return WEIGHTS["space"]
    if category.startswith("N"):
        return WEIGHTS["digit"]
    idx = bisect.bisect_left(_BREAKPOINTS, code)
    if idx < len(RANGES):
        return WEIGHTS.get(RANGES[idx][1], WEIGHTS["default"])
    if code > 0x20000:
        return WEIGHTS["cjk"]
    return WEIGHTS["default"]


def text_weight(text: str) -> float:
    """Sum of the character weights of `text` (summed left to right with sum(), as the reference)."""
    return sum(char_weight(c) for c in text)


def estimate_duration(target_text: str, ref_text: str, ref_duration: float, low_threshold: Optional[float] = 50,
                      boost_strength: float = 3) -> float:
    """Duration of `target_text` at the speaking rate of `ref_text` lasting `ref_duration`.

    Estimates below `low_threshold` are raised along a power curve: low * (est / low) ** (1 / boost_strength).
    Returns 0.0 when the reference is empty, silent (weight 0) or has a non-positive duration.
    """
    if ref_duration <= 0 or not ref_text:
        return 0.0
    ref_weight = text_weight(ref_text)
    if ref_weight == 0:
        return 0.0
    speed_factor = ref_weight / ref_duration
    estimated = text_weight(target_text) / speed_factor
    if low_threshold is not None and estimated < low_threshold:
        alpha = 1.0 / boost_strength
        return low_threshold * (estimated / low_threshold) ** alpha
    return estimated


def estimate_target_tokens(text: str, ref_text: Optional[str] = None, num_ref_audio_tokens: Optional[int] = None,
                           speed: float = 1.0) -> int:
    """Number of audio tokens to generate for `text` (at least 1), as OmniVoice._estimate_target_tokens.

    Without a voice prompt (no ref tokens or an empty ref_text) the rate of "Nice to meet you." in 25 tokens is
    used. A speed other than 1 (and > 0) divides the estimate.
    """
    if num_ref_audio_tokens is None or ref_text is None or len(ref_text) == 0:
        ref_text = DEFAULT_REF_TEXT
        num_ref_audio_tokens = DEFAULT_REF_TOKENS
    est = estimate_duration(text, ref_text, num_ref_audio_tokens)
    if speed > 0 and speed != 1.0:
        est = est / speed
    return max(1, int(est))


def duration_to_tokens(duration: float, frame_rate: int) -> int:
    """Target tokens for a fixed duration in seconds, as the reference's duration override: max(1, int(d * fps))."""
    return max(1, int(duration * frame_rate))
