"""The one sentence splitter: streaming sentences, incremental input, and the chunker's pieces from the same code."""

import pytest

from omnivoice.text.chunking import chunk_text_punctuation
from omnivoice.text.sentences import SentenceFeed, complete_sentences, split_pieces, split_sentences


def test_sentences_end_at_sentence_marks_not_abbreviations_or_commas():
    assert split_sentences('Hi there. Mr. Smith said "ok." 你好。再见！') == \
        ["Hi there.", 'Mr. Smith said "ok."', "你好。", "再见！"]
    assert split_sentences("One, two; three: four.") == ["One, two; three: four."]


def test_a_point_inside_a_word_or_number_ends_nothing():
    assert split_sentences("Pi is 3.14 today. See e.g. the table... Done?! Yes.") == \
        ["Pi is 3.14 today.", "See e.g. the table...", "Done?!", "Yes."]
    assert split_sentences("(He left.) Then she came. Wait… what?") == \
        ["(He left.)", "Then she came.", "Wait…", "what?"]


def test_short_pieces_join_the_sentence_before():
    assert split_sentences("Yes. No. A.") == ["Yes.", "No. A."]


def test_pieces_rejoin_to_the_text():
    text = "Mr. Smith, hello! 3.14 is pi... (really.) 你好，世界。End"
    for args in ((), (frozenset(".!?。"),)):
        assert "".join(split_pieces(text, *args)) == text


def test_chunker_and_streaming_share_the_abbreviation_rule():
    text = "Dr. Who arrived. Then Prof. X left."
    assert split_sentences(text) == ["Dr. Who arrived.", "Then Prof. X left."]
    assert chunk_text_punctuation(text, 10) == ["Dr. Who arrived.", "Then Prof. X left."]


def test_incremental_sentences_from_a_stream_of_lines():
    lines = ["Hello there. How", " are you? I am", " fine.\n", "Mr. Smith is here", ".\n", "end"]
    assert list(complete_sentences(iter(lines))) == \
        ["Hello there.", "How are you?", "I am fine.", "Mr. Smith is here.", "end"]
    # spaces at the end of a piece stay (not "Firstone."); a short sentence joins the one before, as in the
    # whole text
    assert list(complete_sentences(iter(["First ", "one. Sec", "ond one.", " A."]))) == \
        ["First one.", "Second one. A."]

    seen = []

    def slow_lines():  # a sentence must come out before the lines after it are read
        yield "First one. Sec"
        assert seen == ["First one."]
        yield "ond one.\n"

    for sentence in complete_sentences(slow_lines()):
        seen.append(sentence)
    assert seen == ["First one.", "Second one."]


@pytest.mark.parametrize("text", [
    "Hi. A. Bye there. It costs 3.14 dollars, e.g. a lot. Dr. Who came... Then? Yes!",
    '(He left.) Then she came. "Wait…" what? 你好。再见！好的。  Trailing words',
    "One. Two. Three.",
])
def test_sentences_of_text_in_pieces_do_not_depend_on_the_split(text):
    """Character by character, or cut at every position into two, the sentences are the whole text's (a piece
    that ends at "3." or "e." is not a sentence end: the text after it decides)."""
    whole = split_sentences(text)
    assert list(complete_sentences(text)) == whole
    for cut in range(len(text) + 1):
        assert list(complete_sentences([text[:cut], text[cut:]])) == whole, cut


def test_sentence_feed_says_a_sentence_is_complete_once_the_next_one_has_begun():
    feed = SentenceFeed()
    assert feed.feed("It costs 3.") == []
    assert feed.feed("14 now. Th") == []       # the next sentence has not min_len characters yet
    assert feed.feed("e end") == ["It costs 3.14 now."]
    assert feed.end() == ["The end"]
    assert feed.end() == []
