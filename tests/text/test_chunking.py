"""Chunking, add_punctuation and the long-form chunk plan equal the reference on every golden input."""

import pytest
from text_golden import load_golden_json

from omnivoice.text import chunking
from omnivoice.text.chunking import (add_punctuation, chunk_len_for, chunk_text_punctuation, needs_chunking,
                                     plan_chunks)


@pytest.fixture(scope="module")
def golden():
    return load_golden_json("text_chunks.json")


def test_chunk_text_punctuation_equals_reference(golden):
    cases = golden["chunk_cases"]
    assert len(cases) > 300
    for c in cases:
        assert chunk_text_punctuation(c["text"], c["chunk_len"], c["min_chunk_len"]) == c["output"], c


def test_add_punctuation_equals_reference(golden):
    cases = golden["punctuation_cases"]
    assert len(cases) > 300
    for c in cases:
        assert add_punctuation(c["text"]) == c["output"], c


def test_tables_equal_reference(golden):
    t = golden["tables"]
    assert sorted(chunking.SPLIT_PUNCTUATION) == t["split_punctuation"]
    assert sorted(chunking.CLOSING_MARKS) == t["closing_marks"]
    assert sorted(chunking.END_PUNCTUATION) == t["end_punctuation"]
    assert sorted(chunking.ABBREVIATIONS) == t["abbreviations"]


def test_long_form_plan_equals_reference():
    g = load_golden_json("text_long_form.json")
    fps = g["frame_rate"]
    assert sum(len(c["calls"]) > 1 for c in g["cases"]) > 20
    for c in g["cases"]:
        assert needs_chunking(c["num_target_tokens"], g["chunk_threshold"], fps) == c["needs_chunking"]
        plans = plan_chunks(c["text"], c["num_target_tokens"], c["chunk_duration"], fps, ref_text=c["ref_text"],
                            num_ref_audio_tokens=c["num_ref_audio_tokens"], speed=c["speed"] or 1.0)
        # The reference batches one item per call: one _generate_iterative call per chunk.
        assert len(plans) == len(c["calls"]), c["text"]
        for p, call in zip(plans, c["calls"]):
            assert [p.text] == call["texts"]
            assert [p.num_target_tokens] == call["target_lens"]
            assert [p.ref_text] == call["ref_texts"]
            assert [p.num_ref_audio_tokens] == call["ref_lens"]
        if c["num_ref_audio_tokens"] is None:
            assert plans[0].ref is None and all(p.ref == "chunk0" for p in plans[1:])
        else:
            assert all(p.ref == "prompt" for p in plans)


def test_chunk_len_for_rejects_empty_text():
    with pytest.raises(ValueError, match="empty"):
        chunk_len_for("", 10, 15.0, 25)
