"""One synthesis request's text-side settings, resolved as the reference's OmniVoice._preprocess_all does.

Language name -> id, instruct -> normalised instruct (Chinese when the text has CJK ideographs), and the target
length: estimated from the text (and the voice prompt's rate), divided by `speed`, or fixed by `duration`
(then `speed` becomes estimate / fixed length, which chunked generation applies to every chunk's estimate).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .duration import duration_to_tokens, estimate_target_tokens
from .languages import resolve_language
from .voice_design import instruct_uses_zh, resolve_instruct

FRAME_RATE = 25


@dataclass
class TextRequest:
    """Resolved settings of one item; `speed` is what chunked generation divides each chunk's estimate by."""

    text: str
    lang: Optional[str]
    instruct: Optional[str]
    ref_text: Optional[str]
    num_ref_audio_tokens: Optional[int]
    num_target_tokens: int
    speed: float


def prepare_request(text: str, language: Optional[str] = None, instruct: Optional[str] = None,
                    ref_text: Optional[str] = None, num_ref_audio_tokens: Optional[int] = None,
                    duration: Optional[float] = None, speed: Optional[float] = None,
                    frame_rate: int = FRAME_RATE, strict_language: bool = True) -> TextRequest:
    """Resolve language, instruct and target length for one item, as the reference's _preprocess_all.

    `ref_text` / `num_ref_audio_tokens` describe a voice prompt (cloning): its transcript (already passed
    through add_punctuation when prompt preprocessing is on) and its number of audio frames. `duration`
    (seconds) overrides `speed`. With strict_language (default) an unknown language raises
    UnknownLanguageError; otherwise it becomes None with a warning, as in the reference.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if duration is not None and duration < 0:
        raise ValueError(f"duration must be >= 0 seconds, got {duration}")
    lang = resolve_language(language, strict=strict_language)
    resolved_instruct = resolve_instruct(instruct, use_zh=instruct_uses_zh(text)) if instruct is not None else None
    if num_ref_audio_tokens is None:
        ref_text = None
    item_speed = 1.0 if duration is not None else (speed if speed is not None else 1.0)
    est = estimate_target_tokens(text, ref_text, num_ref_audio_tokens, speed=item_speed)
    if duration is not None:
        target = duration_to_tokens(duration, frame_rate)
        return TextRequest(text, lang, resolved_instruct, ref_text, num_ref_audio_tokens, target, est / target)
    return TextRequest(text, lang, resolved_instruct, ref_text, num_ref_audio_tokens, est,
                       speed if speed is not None else 1.0)
