"""The streaming rule: how every streamed path (`OmniVoice.stream`, the engine's `submit(stream=True)`, and so
the server's streamed responses) cuts text into the pieces it speaks one after another.

- Sentences as `sentences.split_sentences` cuts them (sentence ends only, abbreviations kept whole), from a whole
  text or from text that arrives in pieces (`sentences.SentenceFeed`: the same sentences whatever the split),
  pulled (`stream_arriving_sentences`) or pushed (`StreamFeed`, for servers that receive the pieces).
- The first piece is kept short, so that the first audio comes early: a first sentence longer than
  FIRST_SENTENCE_MAX_CHARS is split at its clauses (commas and the like, `chunking.chunk_text_punctuation`) into
  a head of at most FIRST_PIECE_CHARS and the rest of the sentence. A sentence without clause punctuation stays
  whole (never cut mid-word). Text pushed in pieces (StreamFeed) speaks the head as soon as it is known, before
  the sentence ends.
"""

from __future__ import annotations

from typing import Iterable, Iterator, List, Optional

from .chunking import chunk_text_punctuation
from .sentences import SENTENCE_END, SPLIT_PUNCTUATION, SentenceFeed, split_sentences

__all__ = ["FIRST_SENTENCE_MAX_CHARS", "FIRST_PIECE_CHARS", "first_pieces", "stream_sentences",
           "stream_arriving_sentences", "StreamFeed"]

# A first sentence longer than this is split at its clauses into a head of at most FIRST_PIECE_CHARS: about three
# seconds of speech, generated while the rest waits its turn.
FIRST_SENTENCE_MAX_CHARS = 80
FIRST_PIECE_CHARS = 48


def first_pieces(sentence: str) -> List[str]:
    """The first sentence of a stream as the pieces it is spoken in: itself, or its short head and the rest."""
    if len(sentence) <= FIRST_SENTENCE_MAX_CHARS:
        return [sentence]
    pieces = chunk_text_punctuation(sentence, FIRST_PIECE_CHARS, min_chunk_len=3)
    if len(pieces) > 1 and sentence.startswith(pieces[0]):
        rest = sentence[len(pieces[0]):].strip()
        return [pieces[0]] + ([rest] if rest else [])
    return [sentence]


def stream_sentences(text: str, short_first: bool = True) -> List[str]:
    """A whole text as the pieces a stream speaks; ValueError when it holds nothing to speak. Without
    `short_first` the first sentence stays whole (first_pieces is skipped): its tokens are then those of the same
    sentence spoken alone, which a clause split changes (a one-sentence text of 1 to 25 words then speaks as
    `OmniVoice.synthesize` speaks it; with the split, 84 of 400 such texts are cut and their tokens differ:
    tools/first_piece_tokens.py, BENCHMARKS.md)."""
    sentences = split_sentences(text)
    if not sentences:
        raise ValueError("text: is empty, nothing to synthesize")
    return (first_pieces(sentences[0]) if short_first else sentences[:1]) + sentences[1:]


def stream_arriving_sentences(pieces: Iterable[str]) -> Iterator[str]:
    """Text that arrives in pieces (lines of a pipe, a chat model's tokens) as the pieces a stream speaks, each
    yielded as soon as the text after it shows its sentence is complete (StreamFeed). Yields nothing for empty
    text."""
    feed = StreamFeed()
    for piece in pieces:
        yield from feed.feed(piece)
    yield from feed.flush()


class StreamFeed:
    """The streaming rule for text pushed in pieces: `feed(piece)` returns the pieces to speak that it completed,
    `flush()` what is pending, to be spoken now (at the end of the text, or when a client asks for it).

    A long first sentence's head goes out as soon as it is known, before the sentence ends (_known_head).
    Whatever the split, the pieces are stream_sentences' of the whole text."""

    def __init__(self) -> None:
        self._sentences = SentenceFeed()
        self._first = True
        self._head: Optional[str] = None  # the first sentence's head, when it went out before the sentence ended

    @property
    def pending(self) -> str:
        """The text received whose sentence is not complete yet."""
        return self._sentences.pending

    def feed(self, piece: str) -> List[str]:
        spoken = self._spoken(self._sentences.feed(piece))
        if self._first and self._head is None:
            self._head = _known_head(self.pending.strip())
            if self._head is not None:
                spoken.append(self._head)
        return spoken

    def flush(self) -> List[str]:
        return self._spoken(self._sentences.end())

    def _spoken(self, sentences: List[str]) -> List[str]:
        if not (sentences and self._first):
            return sentences
        self._first = False
        if self._head is None:
            return first_pieces(sentences[0]) + sentences[1:]
        rest = sentences[0][len(self._head):].strip()  # the head went out already: what follows it
        return ([rest] if rest else []) + sentences[1:]


def _known_head(text: str) -> Optional[str]:
    """The head first_pieces gives every first sentence that begins with `text` (stripped), or None while that
    is not known yet: once `text` already splits in two (it is past FIRST_SENTENCE_MAX_CHARS). The head is closed
    by a clause that did not fit beside it; more text only lengthens that clause or adds clauses after it. A
    sentence mark in `text` (the sentence's end, or a dot of "3.14" or "Mr." that chunking splits at and the
    sentence rule does not) leaves it to the whole sentence."""
    if not SENTENCE_END.isdisjoint(text) or SPLIT_PUNCTUATION.isdisjoint(text):
        return None  # (without clause marks first_pieces keeps the sentence whole)
    pieces = first_pieces(text)
    return pieces[0] if len(pieces) > 1 else None
