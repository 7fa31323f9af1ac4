"""The streaming rule (text.streaming): sentences, the first kept short; the same pieces whether the text comes
whole or arrives in pieces."""

from __future__ import annotations

import random

import pytest

from omnivoice.text.streaming import FIRST_PIECE_CHARS, StreamFeed, stream_arriving_sentences, stream_sentences

LONG_FIRST = ("When the long first sentence goes on, and on, past several clauses, with commas between them, "
              "it should be split for early audio. Then the rest. And more!")


def test_a_long_first_sentence_is_cut_at_a_clause():
    parts = stream_sentences(LONG_FIRST)
    assert len(parts[0]) <= FIRST_PIECE_CHARS and parts[0].endswith(",")
    assert " ".join(parts[:-2]) == LONG_FIRST[:LONG_FIRST.index(" Then")]
    assert parts[-2:] == ["Then the rest.", "And more!"]


def test_without_short_first_the_first_sentence_stays_whole():
    assert stream_sentences(LONG_FIRST, short_first=False) == [LONG_FIRST[:LONG_FIRST.index(" Then")],
                                                               "Then the rest.", "And more!"]


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


def test_a_long_first_sentences_head_goes_out_before_the_sentence_ends():
    feed = StreamFeed()
    end = LONG_FIRST.index(" Then")
    spoken = [(i, p) for i, ch in enumerate(LONG_FIRST) for p in feed.feed(ch)]
    spoken += [(len(LONG_FIRST), p) for p in feed.flush()]
    assert [p for _, p in spoken] == stream_sentences(LONG_FIRST)
    at, head = spoken[0]
    assert at < end - 10 and LONG_FIRST.startswith(head)  # well before the first sentence's end


def _random_text(rng: random.Random) -> str:
    """A first sentence mostly long and without dots inside (where the head may go out early), clause marks
    at random distances, quotes and brackets; later sentences with abbreviations and numbers too."""
    plain = ["alpha", "be", "c", "delta", "echoes", "fox", "g", "hotel", "India's", "x", "quite-long-word", "42"]
    dotted = plain + ["3.14", "e.g.", "Mr."]
    marks = [",", ",", ";", ":", "", "", "", ",\"", "\"", ")", "」", "，"]
    ends = [".", "!", "?", "…", "。", ".\"", "?!"]
    sentences = []
    for k in range(rng.randint(1, 3)):
        words = dotted if k or rng.random() < 0.2 else plain
        n = rng.randint(4, 45) if k == 0 else rng.randint(1, 12)
        sentences.append(" ".join(rng.choice(words) + rng.choice(marks) for _ in range(n)) + rng.choice(ends))
    return " ".join(sentences) + rng.choice(["", " ", " tail", " A."])


@pytest.mark.parametrize("seed", range(6))
def test_pushed_pieces_of_random_texts_give_the_whole_texts_pieces(seed):
    """Texts with long first sentences, clause marks, quotes, abbreviations and numbers, cut at every character
    and at random: the pieces spoken (the early head included) are stream_sentences' of the whole text."""
    rng = random.Random(seed)
    for _ in range(100):
        text = _random_text(rng)
        if not text.strip():
            continue
        whole = stream_sentences(text)
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12))))
        for pieces in (list(text), [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]):
            feed = StreamFeed()
            spoken = [p for piece in pieces for p in feed.feed(piece)] + feed.flush()
            assert spoken == whole, (text, pieces)
