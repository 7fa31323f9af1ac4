"""Sentence splitting: the package's one splitter, used two ways.

- Long-form chunking (`chunking.py`) splits after every mark of SPLIT_PUNCTUATION, commas included, exactly
  as the reference's `chunk_text_punctuation` does (its goldens in tests/golden/text_chunks.json).
- Streaming (`split_sentences`, `complete_sentences`) splits at sentence ends only: . ! ? … when a space or
  the end of the text follows (so "3.14" and "e.g." stay whole), and 。！？ anywhere.

In both, a "." that closes an abbreviation ("Mr.", "e.g.") ends nothing, and the marks and closing quotes or
brackets right after a split stay with the sentence before it. Lengths are code points, as in the reference.
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, Iterator, List

SPLIT_PUNCTUATION: FrozenSet[str] = frozenset(".,;:!?。，；：！？")
CLOSING_MARKS: FrozenSet[str] = frozenset("\"'“”‘’）]》>」】")

# A "." closing one of these words does not end a sentence.
ABBREVIATIONS: FrozenSet[str] = frozenset({
    "Mr.", "Mrs.", "Ms.", "Dr.", "Prof.", "Sr.", "Jr.", "Rev.", "Fr.", "Hon.", "Pres.", "Gov.", "Capt.", "Gen.",
    "Sen.", "Rep.", "Col.", "Maj.", "Lt.", "Cmdr.", "Sgt.", "Cpl.", "Co.", "Corp.", "Inc.", "Ltd.", "Est.",
    "Dept.", "St.", "Ave.", "Blvd.", "Rd.", "Mt.", "Ft.", "No.", "Jan.", "Feb.", "Mar.", "Apr.", "Aug.", "Sep.",
    "Sept.", "Oct.", "Nov.", "Dec.", "i.e.", "e.g.", "vs.", "Vs.", "Etc.", "approx.", "fig.", "def.",
})

# Streaming: where a sentence ends, which of those marks need a space after them, what may close a sentence.
SENTENCE_END: FrozenSet[str] = frozenset(".!?…。！？")
_SPACED_END: FrozenSet[str] = frozenset(".!?…")
_STREAM_CLOSING: FrozenSet[str] = CLOSING_MARKS | frozenset(")』}")


def split_pieces(text: str, marks: FrozenSet[str] = SPLIT_PUNCTUATION, closing: FrozenSet[str] = CLOSING_MARKS,
                 spaced: FrozenSet[str] = frozenset()) -> List[str]:
    """Cut `text` after each of `marks`; the pieces, unstripped, joined give `text` back.

    A mark or one of `closing` right after a cut joins the piece before it. A "." ending an abbreviation does
    not cut. A mark in `spaced` cuts only where whitespace or the end of the text follows it (after any
    further marks and closing characters). The defaults are the reference's chunking rules.
    """
    pieces: List[str] = []
    current: List[str] = []
    for i, ch in enumerate(text):
        if not current and pieces and (ch in marks or ch in closing):
            pieces[-1] += ch
            continue
        current.append(ch)
        if ch not in marks:
            continue
        if ch == ".":
            stripped = "".join(current).strip()
            if stripped and stripped.split()[-1] in ABBREVIATIONS:
                continue
        if ch in spaced and not _ends_here(text, i + 1, marks, closing):
            continue
        pieces.append("".join(current))
        current = []
    if current:
        pieces.append("".join(current))
    return pieces


def _ends_here(text: str, j: int, marks: FrozenSet[str], closing: FrozenSet[str]) -> bool:
    while j < len(text) and (text[j] in marks or text[j] in closing):
        j += 1
    return j == len(text) or text[j].isspace()


def split_sentences(text: str, min_len: int = 3) -> List[str]:
    """Sentences of `text` for streaming, stripped; a piece shorter than `min_len` joins the one before it."""
    out: List[str] = []
    for piece in split_pieces(text, SENTENCE_END, _STREAM_CLOSING, _SPACED_END):
        piece = piece.strip()
        if not piece:
            continue
        if out and len(piece) < min_len:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


def complete_sentences(pieces: Iterable[str], min_len: int = 3) -> Iterator[str]:
    """Sentences from text that arrives in pieces (lines of a pipe, tokens of a chat model), each yielded as
    soon as the text after it shows it is complete; what is left at the end comes last."""
    pending = ""
    for piece in pieces:
        pending += piece
        # The last sentence is finished only if more text would start a new one rather than extend it.
        if split_sentences(pending + " Probe", min_len)[-1] == "Probe":
            head, pending = pending, ""
        else:  # keep the unfinished tail as it came, spaces included
            tail = split_pieces(pending, SENTENCE_END, _STREAM_CLOSING, _SPACED_END)[-1] if pending else ""
            head, pending = pending[:len(pending) - len(tail)], tail
        yield from split_sentences(head, min_len)
    yield from split_sentences(pending, min_len)
