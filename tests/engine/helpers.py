"""Helpers of tests/engine: a request run alone, and the comparison of two results."""

from __future__ import annotations

import numpy as np


def solo(ov, request: dict):
    """The request run alone through synthesize()."""
    r = dict(request)
    r.pop("id", None)
    return ov.synthesize(r.pop("text"), **r)


def assert_same_result(got, expected, what: str = "") -> None:
    assert len(got.tokens) == len(expected.tokens), f"{what}: {len(got.tokens)} chunks vs {len(expected.tokens)}"
    for i, (a, b) in enumerate(zip(got.tokens, expected.tokens)):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}: tokens of chunk {i}")
    assert got.texts == expected.texts, what
    np.testing.assert_array_equal(got.audio, expected.audio, err_msg=f"{what}: audio")
