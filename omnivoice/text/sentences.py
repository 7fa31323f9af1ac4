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

_ABBREVIATION_CHARS = max(len(a) for a in ABBREVIATIONS)

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
    run_end = 0  # text[i + 1:run_end] is a run of marks and closing characters, found once for the whole run
    for i, ch in enumerate(text):
        if not current and pieces and (ch in marks or ch in closing):
            pieces[-1] += ch
            continue
        current.append(ch)
        if ch not in marks:
            continue
        # the word the "." closes: an abbreviation is no longer than _ABBREVIATION_CHARS, so a window of one
        # more character holds all of it or shows it is longer (linear time, however many dots a piece has)
        if ch == "." and "".join(current[-_ABBREVIATION_CHARS - 1:]).split()[-1] in ABBREVIATIONS:
            continue
        if ch in spaced:
            if i + 1 >= run_end:
                run_end = i + 1
                while run_end < len(text) and (text[run_end] in marks or text[run_end] in closing):
                    run_end += 1
            if not (run_end == len(text) or text[run_end].isspace()):
                continue
        pieces.append("".join(current))
        current = []
    if current:
        pieces.append("".join(current))
    return pieces


def split_sentences(text: str, min_len: int = 3) -> List[str]:
    """Sentences of `text` for streaming, stripped; a piece shorter than `min_len` joins the one before it."""
    out: List[Tuple[str, int]] = []
    at = 0
    for piece in split_pieces(text, SENTENCE_END, _STREAM_CLOSING, _SPACED_END):
        _fold(out, piece, at, min_len)
        at += len(piece)
    return [sentence for sentence, _ in out]


def _fold(out: List[Tuple[str, int]], piece: str, at: int, min_len: int) -> None:
    """Add one piece (starting at offset `at`) to the (sentence, offset of its first piece) list: stripped, and
    joined to the sentence before it when shorter than `min_len`."""
    piece = piece.strip()
    if not piece:
        return
    if out and len(piece) < min_len:
        out[-1] = (f"{out[-1][0]} {piece}", out[-1][1])
    else:
        out.append((piece, at))


class SentenceFeed:
    """split_sentences for text that arrives in pieces: `feed(piece)` returns the sentences that piece completed,
    `end()` the rest. Whatever the split, the sentences are those of split_sentences on the whole text.

    A sentence is complete once the sentence after it has begun with `min_len` characters: only then is it sure
    that its end mark is followed by a space (not "3." of "3.14", "e." of "e.g."), and that no short sentence
    ("A.") will join it. Each feed costs the length of the text since the last cut (and a glance at the piece
    while that text holds no sentence mark), not of all the text pending.
    """

    def __init__(self, min_len: int = 3) -> None:
        self.min_len = min_len
        self.pending = ""  # the text of the sentence not yet complete, as it came
        # Every piece of `pending` but the last is final (a cut is made only once the text after its mark is
        # seen); their sentences are kept with their offsets in `pending`. The last piece starts at `_tail`.
        self._final: List[Tuple[str, int]] = []
        self._tail = 0
        self._tail_marks = False  # whether the last piece holds a sentence mark (then more text may cut it)

    def feed(self, piece: str) -> List[str]:
        self.pending += piece
        if self._tail_marks or not SENTENCE_END.isdisjoint(piece):
            pieces = split_pieces(self.pending[self._tail:], SENTENCE_END, _STREAM_CLOSING, _SPACED_END)
            for p in pieces[:-1]:
                _fold(self._final, p, self._tail, self.min_len)
                self._tail += len(p)
            self._tail_marks = bool(pieces) and not SENTENCE_END.isdisjoint(pieces[-1])
        found = list(self._final)
        _fold(found, self.pending[self._tail:], self._tail, self.min_len)
        if len(found) < 2:
            return []
        start = found[-1][1]  # the last sentence stays pending: what follows may join it
        done = [sentence for sentence, _ in found[:-1]]
        self._final = [(self._final[-1][0], 0)] if self._final and self._final[-1][1] == start else []
        self.pending, self._tail = self.pending[start:], self._tail - start
        return done

    def end(self) -> List[str]:
        """The sentences of the text still pending (the last one, and a short one that joined it); empties it."""
        rest = split_sentences(self.pending, self.min_len)
        self.pending, self._final, self._tail, self._tail_marks = "", [], 0, False
        return rest


def complete_sentences(pieces: Iterable[str], min_len: int = 3) -> Iterator[str]:
    """Sentences from text that arrives in pieces (lines of a pipe, tokens of a chat model), each yielded as
    soon as the text after it shows it is complete (SentenceFeed); what is left at the end comes last."""
    feed = SentenceFeed(min_len)
    for piece in pieces:
        yield from feed.feed(piece)
    yield from feed.end()
