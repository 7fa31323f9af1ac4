"""The streaming rule (text.streaming): sentences, the first kept short; the same pieces whether the text comes
whole or arrives in pieces."""

from __future__ import annotations

import pytest

from omnivoice.text.streaming import FIRST_PIECE_CHARS, StreamFeed, stream_arriving_sentences, stream_sentences

LONG_FIRST = ("When the long first sentence goes on, and on, past several clauses, with commas between them, "
              "it should be split for early audio. Then the rest. And more!")


def test_a_long_first_sentence_is_cut_at_a_clause():
    parts = stream_sentences(LONG_FIRST)
    assert len(parts[0]) <= FIRST_PIECE_CHARS and parts[0].endswith(",")
    assert " ".join(parts[:-2]) == LONG_FIRST[:LONG_FIRST.index(" Then")]
    assert parts[-2:] == ["Then the rest.", "And more!"]


def test_short_and_unbroken_first_sentences_stay_whole():
    assert stream_sentences("Short one. Another.") == ["Short one.", "Another."]
    unbroken = "A" * 100 + "."
    assert stream_sentences(unbroken) == [unbroken]  # no clause boundary: not cut mid-word
    later = "Short. " + "A long later sentence, with clauses, " * 4 + "ends."
    assert stream_sentences(later)[1:] == [later[len("Short. "):]]  # only the first piece is kept short


def test_empty_text_is_refused():
    with pytest.raises(ValueError, match="empty"):
        stream_sentences("   ")
    assert list(stream_arriving_sentences(["  ", "\n"])) == []


@pytest.mark.parametrize("cut", [1, 7, 30, 95, len(LONG_FIRST)])
def test_arriving_text_gives_the_whole_texts_pieces(cut):
    pieces = [LONG_FIRST[i:i + cut] for i in range(0, len(LONG_FIRST), cut)]
    assert list(stream_arriving_sentences(pieces)) == stream_sentences(LONG_FIRST)


def test_pushed_pieces_give_the_whole_texts_pieces_and_flush_speaks_the_pending_text():
    feed = StreamFeed()
    spoken = [p for ch in LONG_FIRST for p in feed.feed(ch)]
    assert feed.pending == " And more!" and spoken + feed.flush() == stream_sentences(LONG_FIRST)
    assert feed.feed("Half a sen") == [] and feed.flush() == ["Half a sen"]  # later sentences are not cut
