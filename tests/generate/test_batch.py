"""Many MaskGIT states stepped together (generate.batch) give each chunk exactly its solo tokens."""

from __future__ import annotations

import numpy as np
import pytest
from fake_lm import FakeGuidedLM

from omnivoice.generate import CudaPhiloxGenerator, GenerationConfig, MaskGitState, generate, rand_like_many
from omnivoice.generate.batch import step_many


def test_rand_like_many_equals_each_draw(fresh_seed):
    shapes = [(8, 125), (8, 1), (3,), (0,), (8, 700), (1, 300_000), (5, 270_337), (8, 125)]
    one = [CudaPhiloxGenerator(fresh_seed + i, offset=4 * i) for i in range(len(shapes))]
    many = [CudaPhiloxGenerator(fresh_seed + i, offset=4 * i) for i in range(len(shapes))]
    for _ in range(2):  # twice: the offsets must advance the same way too
        expected = [g.rand_like(s) for g, s in zip(one, shapes)]
        got = rand_like_many(many, shapes)
        for e, g, s in zip(expected, got, shapes):
            assert g.shape == s and g.dtype == np.float32
            np.testing.assert_array_equal(g, e, err_msg=f"seed {fresh_seed}, shape {s}")
        assert [g.offset for g in many] == [g.offset for g in one]


def test_rand_like_many_where_equals_the_masked_draw(fresh_seed):
    """Only the masked elements computed, one call per thread or several (the class noise of a 5 s chunk,
    [8, 125, 1025], uses all four words of each thread's call on an H200; a 20 s chunk's takes four calls):
    the whole draw's values there, the same offsets after."""
    shapes = [(8, 125), (8, 125, 1025), (5, 270_337), (4, 600_000)]
    keep = np.random.default_rng(fresh_seed)
    masks = [keep.random(s) < p for s, p in zip(shapes, (0.5, 0.1, 0.2, 0.1))]
    one = [CudaPhiloxGenerator(fresh_seed + i, offset=8 * i) for i in range(len(shapes))]
    many = [CudaPhiloxGenerator(fresh_seed + i, offset=8 * i) for i in range(len(shapes))]
    for _ in range(2):
        expected = [g.rand_like(s)[m] for g, s, m in zip(one, shapes, masks)]
        got = rand_like_many(many, shapes, where=masks)
        for e, g, s in zip(expected, got, shapes):
            np.testing.assert_array_equal(g, e, err_msg=f"seed {fresh_seed}, shape {s}")
        assert [g.offset for g in many] == [g.offset for g in one]


class _Replay:
    """Serves one fake LM's outputs to step_many: what a packed LM step returns for one chunk."""

    def __init__(self, lm: FakeGuidedLM, greedy: bool):
        self.lm, self.greedy = lm, greedy

    def output(self, tokens):
        if self.greedy:
            pred, score = self.lm.guided_argmax(tokens)
            return {"pred": pred, "score": score}
        return {"log_probs": self.lm.guided_log_probs(tokens)}


CASES = [  # (T, config, seeded): greedy, position noise, class sampling, a tiny T with idle steps
    (13, GenerationConfig(num_step=8, position_temperature=0.0), False),
    (21, GenerationConfig(num_step=8), True),
    (7, GenerationConfig(num_step=6, class_temperature=0.9), True),
    (2, GenerationConfig(num_step=32), True),
    (30, GenerationConfig(num_step=5, t_shift=0.5, layer_penalty_factor=2.0), True),
]


def test_step_many_equals_generate_alone(fresh_seed):
    solo = []
    for i, (T, cfg, seeded) in enumerate(CASES):
        rng = CudaPhiloxGenerator(fresh_seed + i) if seeded else None
        solo.append(generate(FakeGuidedLM(i, T), T, cfg, rng))
    states = [MaskGitState(T, cfg, CudaPhiloxGenerator(fresh_seed + i) if seeded else None)
              for i, (T, cfg, seeded) in enumerate(CASES)]
    lms = [_Replay(FakeGuidedLM(i, T), cfg.class_temperature == 0) for i, (T, cfg, _) in enumerate(CASES)]
    steps = 0
    while any(not s.done for s in states):
        live = [i for i, s in enumerate(states) if not s.done]
        choices = step_many([states[i] for i in live], [lms[i].output(states[i].tokens.copy()) for i in live])
        assert not any(isinstance(c, Exception) for c in choices)
        steps += 1
    assert steps == max(sum(1 for k in s.schedule if k) for s in states)
    for i, (state, expected) in enumerate(zip(states, solo)):
        np.testing.assert_array_equal(state.tokens, expected, err_msg=f"case {i}, seed {fresh_seed}")


@pytest.mark.parametrize("bad, message", [
    (dict(score=np.full((8, 5), np.nan, np.float32)), "the LM produced NaN scores"),
    # rows of all-NaN or -inf logits as ggml's guided pick gives them: argmax -1, max -FLT_MAX (no NaN)
    (dict(pred=np.full((8, 5), -1, np.int32), score=np.full((8, 5), -np.finfo(np.float32).max, np.float32)),
     "the LM gave no finite score for a position being unmasked"),
], ids=["nan-scores", "pick-of-minus-one"])
def test_step_many_fails_only_the_bad_state(bad, message):
    states = [MaskGitState(5, GenerationConfig(num_step=4), CudaPhiloxGenerator(s)) for s in (1, 2)]
    good = _Replay(FakeGuidedLM(1, 5), True).output(states[0].tokens)
    before = states[1].tokens.copy()
    choices = step_many(states, [good, dict(good, **bad)])
    assert not isinstance(choices[0], Exception) and states[0].step > 0
    assert isinstance(choices[1], ValueError) and message in str(choices[1])
    np.testing.assert_array_equal(states[1].tokens, before)


def test_step_many_refuses_a_shared_generator():
    rng = CudaPhiloxGenerator(0)
    states = [MaskGitState(5, GenerationConfig(num_step=4), rng) for _ in range(2)]
    out = _Replay(FakeGuidedLM(1, 5), True).output(states[0].tokens)
    with pytest.raises(ValueError, match="share a generator"):
        step_many(states, [out, out])


def test_position_noise_on_worker_threads_equals_one_thread(fresh_seed, monkeypatch):
    """The noise of many states drawn by several worker threads (each a share of the states) is the noise one
    thread draws, and each generator ends at the same offset."""
    from omnivoice.generate import batch

    def draw(workers: int, min_positions: int):
        monkeypatch.setattr(batch, "_workers", lambda: workers)
        monkeypatch.setattr(batch, "MIN_POSITIONS_PER_WORKER", min_positions)
        states = [MaskGitState(T, GenerationConfig(num_step=8), CudaPhiloxGenerator(fresh_seed + i))
                  for i, T in enumerate((40, 7, 125, 60, 1))]
        batch.draw_position_noise(states)
        return [s.position_noise for s in states], [s.rng.offset for s in states]

    one, threads = draw(1, 16384), draw(3, 100)
    for a, b in zip(one[0], threads[0]):
        np.testing.assert_array_equal(a.u, b.u, err_msg=f"seed {fresh_seed}")
        np.testing.assert_array_equal(a.near, b.near, err_msg=f"seed {fresh_seed}")
    assert one[1] == threads[1]
