"""The MaskGIT unmasking schedule, computed with the reference's float32 arithmetic.

The reference (``_get_time_steps`` and the schedule loop in ``_generate_iterative``) builds the
time steps as a float32 tensor: ``torch.linspace(0, 1, num_step + 1)`` on the CPU, then
``t_shift * t / (1 + (t_shift - 1) * t)`` op by op in float32. The per-step counts use those
float32 values converted to Python floats: ``ceil(total * (t[s + 1] - t[s]))`` in float64, capped
by what is left, the last step taking the rest. Doing the time steps in float64 instead changes
the counts for 56 of the lengths 1..3000 (for example T = 205, 247), so every float32 rounding
below is deliberate.

``torch.linspace`` (float32, CPU) computes ``start + step * i`` for the first half of the points
and ``end - step * (steps - i - 1)`` for the second half, each as one fused multiply-add (the
compiler contracts the expression), so each point is rounded once. Checked against torch 2.13 on
the CPU for every ``steps`` in 2..1500.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["linspace_f32", "time_steps", "unmask_schedule"]


def linspace_f32(start: float, end: float, steps: int) -> np.ndarray:
    """``torch.linspace(start, end, steps)`` in float32 with torch's rounding.

    The step is ``(end - start) / (steps - 1)`` in float32; each point is the exact value of
    ``start + step * i`` (first half) or ``end - step * (steps - 1 - i)`` (second half) rounded
    once to float32, as a fused multiply-add gives. The exact value is formed in float64, which is
    exact for the [0, 1] interval used here (a 24-bit step times an index below 2**29).
    """
    if steps < 1:
        raise ValueError(f"linspace_f32: steps must be >= 1, got {steps}")
    f32 = np.float32
    start32, end32 = f32(start), f32(end)
    if steps == 1:
        return np.array([start32], dtype=np.float32)
    step = np.float64(f32(end32 - start32) / f32(steps - 1))
    idx = np.arange(steps, dtype=np.int64)
    halfway = steps // 2
    lo = np.float64(start32) + step * idx
    hi = np.float64(end32) - step * (steps - 1 - idx)
    return np.where(idx < halfway, lo, hi).astype(np.float32)


def time_steps(num_step: int, t_shift: float) -> np.ndarray:
    """The reference's ``_get_time_steps(0, 1, num_step, t_shift)``: float32 [num_step + 1]."""
    if num_step < 1:
        raise ValueError(f"time_steps: num_step must be >= 1, got {num_step}")
    t = linspace_f32(0.0, 1.0, num_step + 1)
    f32 = np.float32
    # Each scalar is a Python float that torch rounds to float32 before the op.
    num = f32(t_shift) * t
    den = f32(1.0) + f32(t_shift - 1.0) * t
    return (num / den).astype(np.float32)


def unmask_schedule(total: int, num_step: int, t_shift: float) -> list[int]:
    """Number of positions unmasked at each step, as the reference computes it.

    Args:
        total: number of masked positions at the start (num_codebooks * num_target_tokens).
        num_step: number of MaskGIT steps.
        t_shift: time shift of the schedule (0.1 by default in the reference).

    Returns:
        ``num_step`` non-negative counts summing to ``total`` (trailing zeros when ``total`` is small).
    """
    if total < 0:
        raise ValueError(f"unmask_schedule: total must be >= 0, got {total}")
    ts = [float(x) for x in time_steps(num_step, t_shift)]
    rem = int(total)
    sched = []
    for step in range(num_step):
        if step == num_step - 1:
            num = rem
        else:
            num = min(math.ceil(total * (ts[step + 1] - ts[step])), rem)
        sched.append(int(num))
        rem -= int(num)
    return sched
