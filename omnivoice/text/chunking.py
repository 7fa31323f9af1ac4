"""Long-form text chunking and terminal punctuation, ported from the reference's utils/text.py.

Lengths are Python code points (len(str)), as in the reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, List, Optional

from .duration import estimate_target_tokens
from .sentences import ABBREVIATIONS, CLOSING_MARKS, SPLIT_PUNCTUATION, split_pieces

__all__ = ["ABBREVIATIONS", "CLOSING_MARKS", "SPLIT_PUNCTUATION", "END_PUNCTUATION", "chunk_text_punctuation",
           "chunk_len_for", "add_punctuation", "needs_chunking", "ChunkPlan", "plan_chunks"]

# A text ending in one of these gets no extra punctuation. "……" is two code points and can never equal the
# last character; it is kept because the reference lists it.
END_PUNCTUATION: FrozenSet[str] = frozenset({
    ";", ":", ",", ".", "!", "?", "…", ")", "]", "}", '"', "'", "“", "”", "‘", "’",
    "；", "：", "，", "。", "！", "？", "、", "……", "）", "】",
})


def chunk_text_punctuation(text: str, chunk_len: int, min_chunk_len: Optional[int] = None) -> List[str]:
    """Split `text` into chunks of about `chunk_len` code points at sentence punctuation.

    Sentences (split after . , ; : ! ? and their full-width forms, not after abbreviations) are packed greedily
    into chunks of at most `chunk_len` code points (a longer sentence stays whole). With `min_chunk_len`, a
    chunk shorter than that is merged into the previous chunk (the first one into the second). Chunks are
    stripped and empty ones dropped.
    """
    merged: List[str] = []
    current = ""
    for sentence in split_pieces(text):
        if len(current) + len(sentence) <= chunk_len:
            current += sentence
        else:
            if current:
                merged.append(current)
            current = sentence
    if current:
        merged.append(current)

    final = merged
    if min_chunk_len is not None:
        first_short = len(merged) > 0 and len(merged[0]) < min_chunk_len
        final = []
        for i, chunk in enumerate(merged):
            if i == 1 and first_short:
                final[-1] += chunk
            elif len(chunk) >= min_chunk_len or not final:
                final.append(chunk)
            else:
                final[-1] += chunk
    return [s for s in (chunk.strip() for chunk in final) if s]


def chunk_len_for(text: str, num_target_tokens: int, chunk_duration: float, frame_rate: int) -> int:
    """Chunk budget in code points for `chunk_duration` seconds of audio, as the reference's _generate_chunked
    computes it from the whole text's estimated token count."""
    if not text:
        raise ValueError("chunk_len_for: text is empty")
    avg_tokens_per_char = num_target_tokens / len(text)
    return int(chunk_duration * frame_rate / avg_tokens_per_char)


def add_punctuation(text: str) -> str:
    """Strip `text` and append "." (or "。" if it contains a CJK ideograph) unless it already ends in
    punctuation or a closing mark."""
    text = text.strip()
    if not text:
        return text
    if text[-1] not in END_PUNCTUATION:
        is_chinese = any("\u4e00" <= ch <= "\u9fff" for ch in text)
        text += "。" if is_chinese else "."
    return text


def needs_chunking(num_target_tokens: int, chunk_threshold: float, frame_rate: int) -> bool:
    """Whether the reference generates this item chunk by chunk: its estimated tokens exceed
    int(chunk_threshold * frame_rate)."""
    return num_target_tokens > int(chunk_threshold * frame_rate)


@dataclass
class ChunkPlan:
    """One chunk of a long-form item: its text, target tokens and voice prompt.

    ref is "prompt" (the user's voice prompt), "chunk0" (the audio generated for chunk 0, auto/design modes) or
    None (chunk 0 of auto/design); ref_text and num_ref_audio_tokens describe that voice prompt.
    """

    text: str
    num_target_tokens: int
    ref: Optional[str]
    ref_text: Optional[str]
    num_ref_audio_tokens: Optional[int]


def plan_chunks(text: str, num_target_tokens: int, chunk_duration: float, frame_rate: int,
                ref_text: Optional[str] = None, num_ref_audio_tokens: Optional[int] = None,
                speed: float = 1.0, min_chunk_len: int = 3) -> List[ChunkPlan]:
    """The chunks the reference's _generate_chunked makes for one item, with each chunk's target length.

    `num_target_tokens` is the whole text's estimate (it sets the characters per chunk). With a voice prompt
    (num_ref_audio_tokens not None) every chunk is cloned from it; without one, chunk 0 is generated alone
    and its audio (num_target_tokens of chunk 0 frames) with its text becomes the voice prompt of the others.
    """
    chunk_len = chunk_len_for(text, num_target_tokens, chunk_duration, frame_rate)
    chunks = chunk_text_punctuation(text, chunk_len, min_chunk_len=min_chunk_len)
    plans: List[ChunkPlan] = []
    if num_ref_audio_tokens is not None:
        for c in chunks:
            n = estimate_target_tokens(c, ref_text, num_ref_audio_tokens, speed=speed)
            plans.append(ChunkPlan(c, n, "prompt", ref_text, num_ref_audio_tokens))
        return plans
    for i, c in enumerate(chunks):
        if i == 0:
            plans.append(ChunkPlan(c, estimate_target_tokens(c, None, None, speed=speed), None, None, None))
        else:
            first = plans[0]
            n = estimate_target_tokens(c, first.text, first.num_target_tokens, speed=speed)
            plans.append(ChunkPlan(c, n, "chunk0", first.text, first.num_target_tokens))
    return plans
