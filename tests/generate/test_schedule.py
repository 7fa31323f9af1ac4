"""The unmasking schedule against the reference's counts (tests/golden/generate_schedule.npz)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from omnivoice.generate.schedule import linspace_f32, time_steps, unmask_schedule


def _grid(golden):
    return json.loads(str(golden["grid_json"]))


def test_time_steps_bit_exact(schedule_golden):
    # t_shift = 1.0 leaves torch.linspace's values untouched, so this also pins linspace_f32.
    for g in _grid(schedule_golden):
        got = time_steps(g["num_step"], g["t_shift"])
        expected = schedule_golden[g["key"] + "__time_steps"]
        assert got.dtype == np.float32
        assert got.view(np.uint32).tolist() == expected.view(np.uint32).tolist(), g["key"]


def test_default_schedule_all_lengths(schedule_golden):
    # 32 steps, t_shift 0.1, T = 1..3000: every count equals the reference's.
    g = next(g for g in _grid(schedule_golden) if g["num_step"] == 32 and g["t_shift"] == 0.1)
    expected = schedule_golden[g["key"] + "__counts"]
    assert expected.shape == (3000, 32)
    got = np.array([unmask_schedule(8 * t, 32, 0.1) for t in range(1, 3001)])
    bad = np.nonzero((got != expected).any(axis=1))[0] + 1
    assert bad.size == 0, f"schedule differs from the reference for T = {bad[:10].tolist()}"


@pytest.mark.parametrize("num_step", [4, 10, 16, 25, 50, 64])
def test_other_step_counts_and_shifts(schedule_golden, num_step):
    for g in _grid(schedule_golden):
        if g["num_step"] != num_step:
            continue
        expected = schedule_golden[g["key"] + "__counts"]
        got = np.array([unmask_schedule(8 * t, num_step, g["t_shift"]) for t in range(1, g["t_max"] + 1)])
        bad = np.nonzero((got != expected).any(axis=1))[0] + 1
        assert bad.size == 0, f"{g['key']}: differs for T = {bad[:10].tolist()}"


def test_schedule_invariants(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    for _ in range(50):
        total = int(rng.integers(0, 50_000))
        num_step = int(rng.integers(1, 80))
        t_shift = float(rng.uniform(0.02, 3.0))
        s = unmask_schedule(total, num_step, t_shift)
        assert len(s) == num_step and min(s) >= 0 and sum(s) == total, (fresh_seed, total, num_step, t_shift)


def test_linspace_close_to_exact(fresh_seed):
    rng = np.random.default_rng(fresh_seed)
    for steps in rng.integers(2, 5000, size=20):
        got = linspace_f32(0.0, 1.0, int(steps)).astype(np.float64)
        exact = np.arange(steps) / (steps - 1)
        # One rounding of a value computed from the float32 step: within a few float32 ulps.
        assert np.abs(got - exact).max() <= 4 * 2.0**-24, (fresh_seed, steps)
        assert got[0] == 0.0 and got[-1] == 1.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_step"):
        time_steps(0, 0.1)
    with pytest.raises(ValueError, match="total"):
        unmask_schedule(-1, 32, 0.1)
    with pytest.raises(ValueError, match="steps"):
        linspace_f32(0.0, 1.0, 0)
