"""The MaskGIT loop against the reference's ``_generate_iterative`` run on the same fake LM.

Golden: tests/golden/generate_loop.npz (tools/reference/goldens.py generate). Deterministic cases
must agree token for token at every step; stochastic cases ran the reference on our re-created
CUDA generator, so they must agree too (draw order, sizes and offsets included). Invariants of
the stochastic mode are checked on fresh seeds.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from fake_lm import FakeGuidedLM

from omnivoice.generate import (
    CudaPhiloxGenerator,
    GenerationConfig,
    MaskGitState,
    filter_top_k,
    generate,
    gumbel_noise,
    gumbel_sample,
    sample_classes,
    teacher_force,
    top_k_positions,
    unmask_schedule,
)

from omnivoice.generate.philox import _philox_lanes, curand_uniform

MASK_ID = 1024
_GOLDEN = os.path.join(os.path.dirname(__file__), "..", "golden", "generate_loop.npz")


def _cases() -> list[dict]:
    if not os.path.exists(_GOLDEN):
        raise FileNotFoundError(
            f"{_GOLDEN} is missing; regenerate it with `.venv-ref/bin/python tools/reference/goldens.py generate`"
        )
    with np.load(_GOLDEN) as z:
        return json.loads(str(z["cases_json"]))


CASES = _cases()
CONFIG_FIELDS = ("num_step", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
                 "class_temperature")


def _config(case: dict) -> GenerationConfig:
    return GenerationConfig(**{k: case[k] for k in CONFIG_FIELDS})


def _rng(case: dict):
    return CudaPhiloxGenerator(case["rng_seed"], case["rng_offset"]) if "rng_seed" in case else None


def _lm(case: dict) -> FakeGuidedLM:
    return FakeGuidedLM(case["seed"], case["T"], guidance_scale=case["guidance_scale"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_free_running_equals_reference(case, loop_golden):
    name = case["name"]
    ref_inputs = loop_golden[f"{name}__inputs"].astype(np.int32)  # the reference's LM input, every step
    seen = {}

    def on_step(step, tokens, positions):
        seen[step] = (tokens, positions)

    rng = _rng(case)
    lm = _lm(case)
    out = generate(lm, case["T"], _config(case), rng, on_step=on_step)
    sched = unmask_schedule(8 * case["T"], case["num_step"], case["t_shift"])
    assert sorted(seen) == [s for s, k in enumerate(sched) if k > 0]
    assert lm.calls == len(seen)  # no LM call for a step that unmasks nothing
    for step, (tokens, positions) in seen.items():
        np.testing.assert_array_equal(tokens, ref_inputs[step], err_msg=f"{name}: LM input at step {step}")
        after = ref_inputs[step + 1] if step + 1 < len(ref_inputs) else loop_golden[f"{name}__final"]
        ref_positions = np.flatnonzero(after.reshape(-1) != ref_inputs[step].reshape(-1))
        assert sorted(positions.tolist()) == ref_positions.tolist(), f"{name}: positions at step {step}"
    np.testing.assert_array_equal(out, loop_golden[f"{name}__final"], err_msg=name)
    assert out.dtype == np.int32
    if rng is not None:
        assert rng.offset == int(loop_golden[f"{name}__rng_offset_end"]), f"{name}: RNG offset after the chunk"


class _LaunchingLM(FakeGuidedLM):
    """A runner that starts a run and finishes it later, as a GPU session does (`launch_guided_argmax`); it
    records the generator's offset at each launch and at the matching finish."""

    def __init__(self, case: dict, rng):
        super().__init__(case["seed"], case["T"], guidance_scale=case["guidance_scale"])
        self.rng, self.offsets = rng, []

    def launch_guided_argmax(self, tokens):
        start = self.rng.offset if self.rng is not None else None

        def finish():
            self.offsets.append((start, self.rng.offset if self.rng is not None else None))
            return self.guided_argmax(tokens)
        return finish


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_noise_drawn_while_the_lm_runs_equals_reference(case, loop_golden):
    """With a runner that launches and finishes apart, the loop draws the position noise in between (while
    the LM runs) and its tokens and generator stay the reference's."""
    rng = _rng(case)
    lm = _LaunchingLM(case, rng)
    config = _config(case)
    out = generate(lm, case["T"], config, rng)
    np.testing.assert_array_equal(out, loop_golden[f"{case['name']}__final"], err_msg=case["name"])
    if rng is not None:
        assert rng.offset == int(loop_golden[f"{case['name']}__rng_offset_end"])
    if config.class_temperature > 0:
        assert lm.offsets == []  # class noise comes first, from the LM's output: nothing to draw ahead
    elif config.position_temperature > 0:
        assert lm.offsets and all(b > a for a, b in lm.offsets)  # drawn between launch and finish
    else:
        assert lm.offsets and all(a == b for a, b in lm.offsets)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_device_plan_follows_the_host_loops_draws(case):
    """The rows a device runs the steps from (MaskGitState.device_plan; runners.lm.ChunkSession.run_on_device):
    each step's k, and for a step with position noise the generator's seed and offset at the host loop's draw,
    whose element i is word 0 of thread i's first Philox call (what the device computes); the generator ends where
    the host loop leaves it."""
    config, T = _config(case), case["T"]
    host_rng, dev_rng = _rng(case), _rng(case)
    state = MaskGitState(T, config, dev_rng, mask_id=MASK_ID)
    start = dev_rng.offset if dev_rng is not None else None
    assert state.device_plan(0) is None and (dev_rng is None or dev_rng.offset == start)  # too many steps
    plan = state.device_plan(256)
    if config.class_temperature > 0:
        assert plan is None and dev_rng.offset == start
        return
    lm = _LaunchingLM(case, host_rng)
    want = generate(lm, T, config, host_rng)
    schedule = unmask_schedule(8 * T, config.num_step, config.t_shift)
    np.testing.assert_array_equal(plan[:, 0], [k for k in schedule if k > 0])
    words = plan.view(np.uint32).astype(np.uint64)
    if config.position_temperature > 0:
        assert (plan[:, 5] == 1).all() and dev_rng.offset == host_rng.offset
        assert ((words[:, 1] | words[:, 2] << 32) == dev_rng.seed).all()
        np.testing.assert_array_equal(4 * (words[:, 3] | words[:, 4] << 32), [a for a, _ in lm.offsets])
        for row in (words[0], words[-1]):
            base = int(row[3] | row[4] << 32)
            lanes = [np.full(8 * T, base & 0xFFFFFFFF, np.uint64), np.full(8 * T, base >> 32, np.uint64),
                     np.arange(8 * T, dtype=np.uint64), np.zeros(8 * T, np.uint64),
                     np.full(8 * T, row[1], np.uint64), np.full(8 * T, row[2], np.uint64)]
            u = curand_uniform(_philox_lanes(*lanes)[0].astype(np.uint32))
            u[u == np.float32(1.0)] = 0
            np.testing.assert_array_equal(u, CudaPhiloxGenerator(dev_rng.seed, 4 * base).rand(8 * T))
    else:
        assert (plan[:, 1:] == 0).all() and (dev_rng is None or dev_rng.offset == start)
    assert state.finish_on_device(want) == [s for s, k in enumerate(schedule) if k > 0] and state.done


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_teacher_forced_choices_equal_reference(case, loop_golden):
    name = case["name"]
    inputs = loop_golden[f"{name}__inputs"].astype(np.int32)
    final = loop_golden[f"{name}__final"].astype(np.int32)
    choices = teacher_force(_lm(case), list(inputs), _config(case), _rng(case))
    assert len(choices) == case["num_step"]
    for step, choice in enumerate(choices):
        after = inputs[step + 1] if step + 1 < len(inputs) else final
        flat_before, flat_after = inputs[step].reshape(-1), after.reshape(-1)
        ref_positions = np.flatnonzero(flat_after != flat_before)
        order = np.argsort(choice.positions)
        assert choice.positions[order].tolist() == ref_positions.tolist(), f"{name}: step {step}"
        assert choice.tokens[order].tolist() == flat_after[ref_positions].tolist(), f"{name}: step {step}"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_step0_scores_match_reference(case, loop_golden):
    # The fake runner's guidance (GuidedLM semantics) against _predict_tokens_with_scoring.
    name = case["name"]
    lm = _lm(case)
    tokens = np.full((8, case["T"]), MASK_ID, dtype=np.int32)
    pred, conf = lm.guided_argmax(tokens)
    if case["class_temperature"] == 0:  # otherwise the reference's prediction is a sample
        np.testing.assert_array_equal(pred, loop_golden[f"{name}__step0_pred"], err_msg=name)
    np.testing.assert_allclose(conf, loop_golden[f"{name}__step0_conf"], rtol=0, atol=1e-5, err_msg=name)


def test_config_defaults_equal_reference(schedule_golden):
    defaults = json.loads(str(schedule_golden["defaults_json"]))
    cfg = GenerationConfig()
    assert {k: getattr(cfg, k) for k in defaults} == defaults


# ------------------------------------------------------------------------------------------
# Stochastic mode: invariants on fresh seeds
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "T,num_step,class_temperature,position_temperature",
    [(13, 12, 0.0, 5.0), (9, 8, 1.3, 5.0), (6, 32, 0.8, 0.0)],
)
def test_stochastic_invariants(T, num_step, class_temperature, position_temperature, fresh_seed):
    cfg = GenerationConfig(num_step=num_step, class_temperature=class_temperature,
                           position_temperature=position_temperature)
    lm = FakeGuidedLM(fresh_seed % 1000, T)
    rng = CudaPhiloxGenerator(fresh_seed)
    sched = unmask_schedule(8 * T, num_step, cfg.t_shift)
    k_top = math.ceil(0.1 * 1025)
    unmasked = np.zeros(8 * T, dtype=np.int64)
    counts = {}

    def on_step(step, tokens, positions):
        counts[step] = positions.size
        assert np.all(tokens.reshape(-1)[positions] == MASK_ID), f"seed {fresh_seed}: re-unmasked at {step}"
        unmasked[positions] += 1
        if class_temperature > 0:
            # Every sampled class is among the top 10 % of the guided log-probs (mask excluded).
            lp = lm.guided_log_probs(tokens)
            lp[..., MASK_ID] = -np.inf
            rank_of = (-lp).argsort(axis=-1, kind="stable").argsort(axis=-1, kind="stable")
            steps_tokens[step] = (positions, rank_of.reshape(-1, lp.shape[-1]))

    steps_tokens = {}
    out = generate(lm, T, cfg, rng, on_step=on_step)
    assert [counts.get(s, 0) for s in range(num_step)] == sched, f"seed {fresh_seed}"
    assert np.all(unmasked == 1), f"seed {fresh_seed}: every position unmasked exactly once"
    assert not np.any(out == MASK_ID) and out.min() >= 0 and out.max() < MASK_ID
    for step, (positions, ranks) in steps_tokens.items():
        chosen = out.reshape(-1)[positions]
        assert np.all(ranks[positions, chosen] < k_top), f"seed {fresh_seed}: outside the top-k at step {step}"


def test_stochastic_mode_is_random_and_seeded(fresh_seed):
    # 40 frames: over 80 tokens the share another seed changes still came as low as 0.54 (60 seeds); over 320
    # it stays above 0.62, so the bound below cannot fail by chance.
    cfg = GenerationConfig(num_step=8, class_temperature=1.0)
    lm = FakeGuidedLM(3, 40)
    a = generate(lm, 40, cfg, CudaPhiloxGenerator(fresh_seed))
    b = generate(lm, 40, cfg, CudaPhiloxGenerator(fresh_seed))
    c = generate(lm, 40, cfg, CudaPhiloxGenerator(fresh_seed + 1))
    np.testing.assert_array_equal(a, b)
    assert np.mean(a != c) > 0.5, f"seed {fresh_seed}: another seed should change most tokens"


def test_rng_threads_across_chunks(fresh_seed):
    cfg = GenerationConfig(num_step=6, class_temperature=0.5)
    lm1, lm2 = FakeGuidedLM(1, 7), FakeGuidedLM(2, 11)
    rng = CudaPhiloxGenerator(fresh_seed)
    generate(lm1, 7, cfg, rng)
    state = rng.get_state()
    second = generate(lm2, 11, cfg, rng)
    # Each step draws 8*T*1025 class noise then 8*T position noise, each a multiple-of-4 offset step.
    expected_inc = sum(
        rng.launch(8 * 7 * 1025)[1] + rng.launch(8 * 7)[1] for k in unmask_schedule(56, 6, 0.1) if k
    )
    assert state[1] == expected_inc
    resumed = CudaPhiloxGenerator(*state)
    np.testing.assert_array_equal(generate(lm2, 11, cfg, resumed), second)
    assert resumed.offset == rng.offset


# ------------------------------------------------------------------------------------------
# Building blocks
# ------------------------------------------------------------------------------------------


def test_filter_top_k_against_full_sort(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    lp = rng.normal(size=(3, 5, 1025)).astype(np.float32)
    lp[..., MASK_ID] = -np.inf
    got = filter_top_k(lp)
    k = math.ceil(0.1 * 1025)
    expected = np.full_like(lp, -np.inf)
    for idx in np.ndindex(3, 5):
        keep = np.argsort(lp[idx])[::-1][:k]
        expected[idx][keep] = lp[idx][keep]
    np.testing.assert_array_equal(got, expected, err_msg=f"seed {fresh_seed}")


def test_ties_prefer_lower_index(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    values = rng.integers(0, 4, size=(6, 40)).astype(np.float32)  # many ties
    got = filter_top_k(values, ratio=0.25)
    for row, out in zip(values, got):
        order = sorted(range(row.size), key=lambda i: (-row[i], i))[:10]
        expected = np.full(row.size, -np.inf, dtype=np.float32)
        expected[order] = row[order]
        np.testing.assert_array_equal(out, expected, err_msg=f"seed {fresh_seed}")
    scores = rng.integers(0, 5, size=(8, 9)).astype(np.float32)
    k = int(rng.integers(0, scores.size + 1))
    expected = sorted(range(scores.size), key=lambda i: (-scores.reshape(-1)[i], i))[:k]
    assert top_k_positions(scores, k).tolist() == expected


def test_top_k_positions_equals_a_full_sort(fresh_seed):
    """Ties (integer scores), -inf (unmasked positions) and every k, against sorting all positions by
    (-score, index); a NaN score sorts last, as the full stable sort put it."""
    rng = np.random.default_rng(fresh_seed)
    scores = rng.integers(0, 6, size=(8, 125)).astype(np.float32)
    scores[rng.random(scores.shape) < 0.6] = -np.inf
    flat = scores.reshape(-1)
    expected = sorted(range(flat.size), key=lambda i: (-flat[i], i))
    for k in sorted({0, 1, 2, 31, 64, int((flat > -np.inf).sum()), 700, flat.size, *rng.integers(0, 1001, 5)}):
        assert top_k_positions(scores, k).tolist() == expected[:k], f"k {k}, seed {fresh_seed}"
    flat[3] = np.nan
    assert top_k_positions(flat, flat.size)[-1] == 3


def test_gumbel_noise_matches_formula(fresh_seed):
    u = CudaPhiloxGenerator(fresh_seed).rand(100_000)
    u = np.concatenate([u, np.array([0.0, 2.0**-33, 0.5, 1 - 2.0**-24], dtype=np.float32)])
    got = gumbel_noise(u)
    assert got.dtype == np.float32
    # Op by op in float32 (numpy's own float32 log): the same roundings up to an ulp per log.
    eps = np.float32(1e-10)
    f32 = -np.log(-np.log(u + eps) + eps)
    np.testing.assert_allclose(got, f32, rtol=2e-6, atol=1e-6, err_msg=f"seed {fresh_seed}")
    # Away from u -> 1, where float32 cancels in log(u), it is the float64 formula to float32 accuracy.
    safe = u < 0.999
    x = u[safe].astype(np.float64)
    exact = -np.log(-np.log(x + 1e-10) + 1e-10)
    np.testing.assert_allclose(got[safe], exact, rtol=1e-5, atol=1e-5, err_msg=f"seed {fresh_seed}")


def test_position_noise_near_is_within_its_tolerance(fresh_seed):
    """PositionNoise.near against the exact float32 noise on random draws and on the extreme uniforms (the
    smallest and the largest cuRAND gives, where one log is near -23 or the inner one cancels): within a
    16th of the tolerance the top-k's bound relies on, as its docstring says."""
    from omnivoice.generate.maskgit import PositionNoise, _noise_tolerance
    from omnivoice.generate.philox import curand_uniform

    rng = np.random.default_rng(fresh_seed)
    bits = np.concatenate([rng.integers(0, 2**32, 500_000, dtype=np.uint64), np.arange(2**17, dtype=np.uint64),
                           2**32 - 1 - np.arange(2**18, dtype=np.uint64)]).astype(np.uint32)
    u = np.concatenate([curand_uniform(bits), np.array([0.0, 1.0], dtype=np.float32)])
    exact = gumbel_noise(u).astype(np.float64)
    err = np.abs(PositionNoise.of(u).near - exact)
    assert err.max() <= 6.3e-7, f"seed {fresh_seed}: {err.max()} at u={u[err.argmax()]}"
    assert (err <= _noise_tolerance(exact) / 16).all()


@pytest.mark.parametrize("layout", ["random", "near_ties", "exact_ties", "few_masked", "minus_inf"])
def test_noisy_top_k_equals_the_exact_sums(fresh_seed, layout):
    """The positions chosen from the exact noise of the near set only are those of the exact noise
    everywhere, also where many exact sums lie within an ulp of each other or are equal."""
    from omnivoice.generate.maskgit import PositionNoise, ScoredStep, _near_set

    rng = np.random.default_rng(fresh_seed)
    shape = (8, 125)
    u = CudaPhiloxGenerator(fresh_seed).rand(math.prod(shape)).reshape(shape)
    g = gumbel_noise(u)
    masked = rng.random(shape) < (0.05 if layout == "few_masked" else 0.6)
    scaled = (rng.normal(size=shape) * 2).astype(np.float32)
    if layout == "near_ties":  # exact sums a few ulps apart around 1.0
        scaled = (np.float32(1.0) - g + rng.integers(-3, 4, shape) * np.float32(2.0**-23)).astype(np.float32)
    elif layout == "exact_ties":  # equal exact sums: the lower index must win, as in the full sort
        scaled = np.float32(3.0) - g
        scaled[(scaled + g) != np.float32(3.0)] = np.float32(-50)
    elif layout == "minus_inf":
        scaled[rng.random(shape) < 0.7] = -np.inf
    expected_scores = np.where(masked, scaled + g, np.float32(-np.inf))
    noise = PositionNoise.of(u[masked])
    for k in sorted({0, 1, 2, 7, 31, int(masked.sum()) // 2, int(masked.sum()), *rng.integers(0, masked.sum() + 1, 4)}):
        masked_at = np.flatnonzero(masked.reshape(-1))
        keep = _near_set(scaled, masked_at, noise, k)
        step = ScoredStep(np.zeros(shape, np.int32), scaled.reshape(-1), masked_at[keep], u[masked][keep], None,
                          k, 1, 0)
        got = step.finish(step.exact_noise()).positions
        want = top_k_positions(expected_scores, k)
        assert got.tolist() == want.tolist(), f"{layout}, k {k}, seed {fresh_seed}"


def test_gumbel_sample_draws_like_rand_like(fresh_seed):
    logits = np.random.default_rng(fresh_seed).normal(size=(2, 3, 50)).astype(np.float32)
    a, b = CudaPhiloxGenerator(fresh_seed), CudaPhiloxGenerator(fresh_seed)
    got = gumbel_sample(logits, 5.0, a)
    u = b.rand(logits.size).reshape(logits.shape)
    np.testing.assert_array_equal(got, logits * np.float32(0.2) + gumbel_noise(u))
    assert a.offset == b.offset


def test_sample_classes_equals_filter_then_gumbel(fresh_seed):
    lp = np.log(np.random.default_rng(fresh_seed).dirichlet(np.ones(1025), size=(4, 6))).astype(np.float32)
    lp[..., MASK_ID] = -np.inf
    a, b = CudaPhiloxGenerator(fresh_seed), CudaPhiloxGenerator(fresh_seed)
    expected = gumbel_sample(filter_top_k(lp), 0.7, a).argmax(axis=-1)
    np.testing.assert_array_equal(sample_classes(lp, 0.7, b), expected, err_msg=f"seed {fresh_seed}")
    assert a.offset == b.offset


class _BadLM:
    def __init__(self, pred_shape=(8, 4), nan=False, unscored=False):
        self.pred_shape, self.nan, self.unscored = pred_shape, nan, unscored

    def guided_argmax(self, tokens):
        pred, conf = np.zeros(self.pred_shape, np.int32), np.zeros(self.pred_shape, np.float32)
        if self.nan:
            conf[0, 0] = np.nan
        if self.unscored:  # rows of all-NaN logits, as ggml's guided pick gives them: argmax -1, max -FLT_MAX
            pred[1:7, 2:] = -1
            conf[1:7, 2:] = -np.finfo(np.float32).max
        return pred, conf

    def guided_log_probs(self, tokens):
        raise AssertionError("not used")


def test_bad_inputs_raise_clear_errors():
    det = GenerationConfig(position_temperature=0.0)
    with pytest.raises(ValueError, match="random generator"):
        generate(FakeGuidedLM(1, 4), 4, GenerationConfig())
    with pytest.raises(ValueError, match=r"guided_argmax pred at step 0: expected shape \(8, 4\)"):
        generate(_BadLM(pred_shape=(8, 5)), 4, det)
    with pytest.raises(ValueError, match="NaN"):
        generate(_BadLM(nan=True), 4, det)
    # chosen once the finite positions are taken: the pick fails there, not at the codec's check of the codes
    with pytest.raises(ValueError, match=r"MaskGIT step \d+: the LM gave no finite score for a position being "
                                         r"unmasked \(its logits were NaN or -inf\)"):
        generate(_BadLM(unscored=True), 4, det)
    with pytest.raises(ValueError, match="num_step"):
        GenerationConfig(num_step=0)
    with pytest.raises(ValueError, match="position_temperature"):
        GenerationConfig(position_temperature=-1.0)
    with pytest.raises(ValueError, match="num_target_tokens"):
        generate(FakeGuidedLM(1, 4), 0, det)
    with pytest.raises(ValueError, match="steps given"):
        teacher_force(FakeGuidedLM(1, 4), [np.full((8, 4), MASK_ID)] * 3, GenerationConfig(num_step=2,
                      position_temperature=0.0))
