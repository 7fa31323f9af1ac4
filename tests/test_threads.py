"""One OmniVoice shared by threads: 4 threads synthesizing and encoding voices at once get exactly what one
thread gets (before the lock, two threads got "the LM produced NaN scores" and silently wrong voice codes)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import omnivoice

from tests.golden_paths import GOLDEN


@pytest.fixture(scope="module")
def ov(tiny_gguf, backend_spec):
    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend=backend_spec) as ov:
        yield ov


def test_four_threads_on_one_object_match_one_thread(ov):
    clip = np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"]
    jobs = [("say", i) for i in range(4)] + [("voice", i) for i in range(4)]

    def run(job):
        kind, i = job
        if kind == "say":  # texts of different lengths: different graph shapes in flight at once
            return ov.synthesize("Thread test. " * (i + 1), seed=i, num_step=4).audio
        return ov.create_voice((clip[: 24000 + 4800 * i], 24000), "Hello world, this is me.").codes

    expected = [run(j) for j in jobs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(2):
            order = jobs[::2] + jobs[1::2]  # synthesis and encoding side by side
            for job, got in zip(order, pool.map(run, order)):
                np.testing.assert_array_equal(got, expected[jobs.index(job)], err_msg=str(job))


def test_streams_interleave_sentence_by_sentence(ov):
    text = "First sentence here. Second one follows. A third to end."
    expected = list(ov.stream(text, seed=5, num_step=4))
    with ThreadPoolExecutor(2) as pool:
        a, b = pool.map(lambda _: list(ov.stream(text, seed=5, num_step=4)), range(2))
    for got in (a, b):
        assert len(got) == len(expected)
        for x, y in zip(got, expected):
            np.testing.assert_array_equal(x, y)
