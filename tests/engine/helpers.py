"""Helpers of tests/engine: a request run alone, and the comparison of two results."""

from __future__ import annotations

import numpy as np

from tests.backend import BACKEND


def solo(ov, request: dict):
    """The request run alone through synthesize()."""
    r = dict(request)
    r.pop("id", None)
    return ov.synthesize(r.pop("text"), **r)


# A batch's sequences are decoded packed into shared graphs (runners.codec.decode_iter): on the CPU the same bits as
# alone; a GPU's products take other kernels for other widths, within the codec's own tolerance there
# (tests/models/test_codec.py; on an H200 3.6e-6 apart, 1.1e-3 with TF32). Another
# request's audio would be ~0.1 or more away.
GPU_AUDIO_ATOL = 1e-2


def assert_same_result(got, expected, what: str = "") -> None:
    assert len(got.tokens) == len(expected.tokens), f"{what}: {len(got.tokens)} chunks vs {len(expected.tokens)}"
    for i, (a, b) in enumerate(zip(got.tokens, expected.tokens)):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}: tokens of chunk {i}")
    assert got.texts == expected.texts, what
    if BACKEND == "cpu":
        np.testing.assert_array_equal(got.audio, expected.audio, err_msg=f"{what}: audio")
    else:
        assert got.audio.shape == expected.audio.shape, f"{what}: audio {got.audio.shape} vs {expected.audio.shape}"
        np.testing.assert_allclose(got.audio, expected.audio, rtol=0, atol=GPU_AUDIO_ATOL, err_msg=f"{what}: audio")
