"""Sentence splitting: the package's one splitter, used two ways.

- Long-form chunking (`chunking.py`) splits after every mark of SPLIT_PUNCTUATION, commas included, exactly
  as the reference's `chunk_text_punctuation` does (its goldens in tests/golden/text_chunks.json).
- Streaming (`split_sentences`; `SentenceFeed` and `complete_sentences` for text that arrives in pieces, with
  the same sentences whatever the split) splits at sentence ends only: . ! ? … when a space or the end of the
  text follows (so "3.14" and "e.g." stay whole), and 。！？ anywhere.

In both, a "." that closes an abbreviation ("Mr.", "e.g.") ends nothing, and the marks and closing quotes or
brackets right after a split stay with the sentence before it. Lengths are code points, as in the reference.
"""

from __future__ import annotations

from typing import FrozenSet, Iterable, Iterator, List, Tuple

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
    return [sentence for sentence, _ in _sentences_at(text, min_len)]


def _sentences_at(text: str, min_len: int) -> List[Tuple[str, int]]:
    """split_sentences with the offset in `text` where each sentence's first piece starts."""
    out: List[Tuple[str, int]] = []
    start = 0
    for piece in split_pieces(text, SENTENCE_END, _STREAM_CLOSING, _SPACED_END):
        at, start = start, start + len(piece)
        piece = piece.strip()
        if not piece:
            continue
        if out and len(piece) < min_len:
            out[-1] = (f"{out[-1][0]} {piece}", out[-1][1])
        else:
            out.append((piece, at))
    return out


class SentenceFeed:
    """split_sentences for text that arrives in pieces: `feed(piece)` returns the sentences that piece completed,
    `end()` the rest. Whatever the split, the sentences are those of split_sentences on the whole text.

    A sentence is complete once the sentence after it has begun with `min_len` characters: only then is it sure
    that its end mark is followed by a space (not "3." of "3.14", "e." of "e.g."), and that no short sentence
    ("A.") will join it.
    """

    def __init__(self, min_len: int = 3) -> None:
        self.min_len = min_len
        self.pending = ""  # the text of the sentence not yet complete, as it came

    def feed(self, piece: str) -> List[str]:
        self.pending += piece
        found = _sentences_at(self.pending, self.min_len)
        if len(found) < 2:
            return []
        self.pending = self.pending[found[-1][1]:]
        return [sentence for sentence, _ in found[:-1]]

    def end(self) -> List[str]:
        """The sentences of the text still pending (the last one, and a short one that joined it); empties it."""
        rest, self.pending = split_sentences(self.pending, self.min_len), ""
        return rest


def complete_sentences(pieces: Iterable[str], min_len: int = 3) -> Iterator[str]:
    """Sentences from text that arrives in pieces (lines of a pipe, tokens of a chat model), each yielded as
    soon as the text after it shows it is complete (SentenceFeed); what is left at the end comes last."""
    feed = SentenceFeed(min_len)
    for piece in pieces:
        yield from feed.feed(piece)
    yield from feed.end()
