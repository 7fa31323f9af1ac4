"""Duration estimator: weights of every code point and all estimates equal the reference exactly."""

import numpy as np
import pytest
from text_golden import load_golden_json, load_golden_npz

from omnivoice.text import duration
from omnivoice.text.duration import char_weight, duration_to_tokens, estimate_duration, estimate_target_tokens


@pytest.fixture(scope="module")
def golden():
    return load_golden_json("text_duration.json")


def test_weight_of_every_code_point():
    want = load_golden_npz("text_char_weights.npz")["weight_x10"]
    assert want.shape == (0x110000,)
    got = np.array([char_weight(chr(c)) for c in range(0x110000)]) * 10
    bad = np.nonzero(np.rint(got).astype(np.int64) != want)[0]
    assert bad.size == 0, [hex(c) for c in bad[:10]]


def test_estimate_duration_equals_reference(golden):
    cases = golden["duration_cases"]
    assert len(cases) > 300
    for c in cases:
        got = estimate_duration(c["target"], c["ref"], c["ref_duration"], c["low_threshold"], c["boost"])
        assert got == c["output"], c  # bit-exact: same float operations in the same order


def test_estimate_target_tokens_equals_reference(golden):
    cases = golden["token_cases"]
    assert len(cases) > 300
    for c in cases:
        got = estimate_target_tokens(c["text"], c["ref_text"], c["num_ref_audio_tokens"], speed=c["speed"])
        assert got == c["output"], c


def test_tables_equal_reference(golden):
    assert duration.WEIGHTS == golden["tables"]["weights"]
    assert [list(r) for r in duration.RANGES] == golden["tables"]["ranges"]


def test_duration_to_tokens():
    assert duration_to_tokens(0.0, 25) == 1
    assert duration_to_tokens(2.0, 25) == 50
    assert duration_to_tokens(1.039, 25) == 25
