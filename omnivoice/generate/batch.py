"""One MaskGIT step for many chunks at once, each from its own share of one LM pass.

Every chunk keeps its own :class:`~omnivoice.generate.maskgit.MaskGitState` (tokens, schedule, settings) and
its own Philox generator, so its choices are exactly those of :func:`~omnivoice.generate.maskgit.generate`
run alone. What is shared is host work that does not depend on which chunk an element belongs to: the
position noise of the greedy chunks is drawn with one Philox evaluation per group of chunks
(``rand_like_many``), only at the still-masked positions (the others are never read), and turned into
Gumbel noise in one pass per group; the groups run on worker threads (numpy releases the GIL in these
elementwise passes). The exact noise (CUDA's logf) of the positions near each chunk's k-th score is then
evaluated for all chunks in one pass. On 64 five-second requests this noise is most of a step's host time
(see BENCHMARKS.md).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Protocol, Sequence

import numpy as np

from .maskgit import GenerationConfig, MaskGitState, PositionNoise, ScoredStep, StepChoice, gumbel_noise
from .philox import rand_like_many

__all__ = ["draw_position_noise", "run_on_device", "step_many"]

# Positions of noise per worker thread at least: below this a thread costs more than it saves. The noise is
# some 80 numpy passes, each short at these sizes, and every pass hands the GIL back and forth: on a 2-core CPU a
# second thread paid only from about 32 000 masked positions, and eight threads on 32 five-second requests at
# 4096 positions a thread made a whole step three times slower.
MIN_POSITIONS_PER_WORKER = 16384
_pool: Optional[ThreadPoolExecutor] = None


def _workers() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _noise(states: Sequence[MaskGitState], exact: bool) -> list[PositionNoise]:
    """The noise at the masked positions of each state (C order), drawn from each one's generator."""
    masked = [s.tokens == s.mask_id for s in states]
    draws = rand_like_many([s.rng for s in states], [s.tokens.shape for s in states], where=masked)
    noise = PositionNoise.of(np.concatenate(draws), exact)
    cuts = np.cumsum([d.size for d in draws])[:-1]
    parts = [np.split(a, cuts) if a is not None else [None] * len(draws) for a in (noise.u, noise.near, noise.exact)]
    return [PositionNoise(*p) for p in zip(*parts)]


def _position_noise(states: Sequence[MaskGitState], exact: bool) -> list[PositionNoise]:
    """_noise for all states, in groups on worker threads when there is enough of it."""
    global _pool
    sizes = [int((s.tokens == s.mask_id).sum()) for s in states]
    n = min(_workers(), max(1, sum(sizes) // MIN_POSITIONS_PER_WORKER), len(states))
    if n == 1:
        return _noise(states, exact)
    if _pool is None:
        _pool = ThreadPoolExecutor(_workers(), thread_name_prefix="omnivoice-noise")
    bounds = np.linspace(0, len(states), n + 1).astype(int)
    groups = [states[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return [x for part in _pool.map(_noise, groups, [exact] * n) for x in part]


def draw_position_noise(states: Sequence[MaskGitState], exact: bool = False) -> None:
    """Draw the next step's position noise of every state whose only draw it is (MaskGitState.noise_first)
    and that has none yet, all together; e.g. while the LM runs, then with ``exact`` (see PositionNoise). A
    state that samples its classes draws class noise first, so it draws its own position noise after that,
    inside choose()."""
    todo = [s for s in states if s.noise_first and s.position_noise is None]
    for s, noise in zip(todo, _position_noise(todo, exact) if todo else []):
        s.position_noise = noise


def step_many(states: Sequence[MaskGitState], outputs: Sequence[dict]) -> list[StepChoice | ValueError]:
    """Advance each state by one step from its LM output and return the choices.

    ``outputs[i]`` is what the LM gave for ``states[i].tokens``: ``pred`` and ``score`` (int32 / float32
    [C, T]) for a greedy state, ``log_probs`` (float32 [C, T, V]) otherwise. No state may be done. A state
    whose output is unusable (NaN scores, the mask id or a -1 chosen) gets the ValueError in its place and does not
    advance; the others do.
    """
    if len(states) != len(outputs):
        raise ValueError(f"step_many: {len(states)} states but {len(outputs)} LM outputs")
    rngs = [id(s.rng) for s in states if s.rng is not None]
    if len(set(rngs)) != len(rngs):
        raise ValueError("step_many: two states share a generator; each chunk in a step needs its own stream")
    for i, state in enumerate(states):
        if state.done:
            raise ValueError(f"step_many: state {i} has no step left")
    draw_position_noise(states)
    choices: list = []
    scored = []
    for state, out in zip(states, outputs):
        try:
            if state.greedy:
                scored.append(state.score(pred=out["pred"], score=out["score"]))
            else:
                scored.append(state.score(log_probs=out["log_probs"]))
        except ValueError as e:  # this chunk's scores are unusable (NaN, the mask id chosen): it alone fails
            scored.append(e)
    # The exact noise of every state's near set in one pass: CUDA's logf is some 200 numpy calls, whose fixed
    # cost even for the few dozen values of one state 64 states would pay 64 times.
    draws = [s.u for s in scored if isinstance(s, ScoredStep) and s.u is not None]
    exact = iter(np.split(gumbel_noise(np.concatenate(draws)), np.cumsum([d.size for d in draws])[:-1])
                 if draws else [])
    for state, s in zip(states, scored):
        try:
            if isinstance(s, ValueError):
                raise s
            choice = s.finish(next(exact) if s.u is not None else s.noise)
        except ValueError as e:
            choices.append(e)
            continue
        state.apply(choice)
        choices.append(choice)
    return choices


class PackedDeviceLM(Protocol):
    """What `run_on_device` needs of an LM that holds several chunks (a packed runner session) and makes the greedy
    choices on its device: `device_steps`, the steps it runs at most without the host (0 when it cannot now), and
    `run_steps_many(tokens, plans, configs)`: run each chunk's rows of MaskGitState.device_plan from its tokens
    (int32 [C, T]) with its settings, and return each chunk's tokens after the last row, or the ValueError of a
    chunk whose scores were unusable."""

    device_steps: int

    def run_steps_many(self, tokens: Sequence[np.ndarray], plans: Sequence[np.ndarray],
                       configs: Sequence[GenerationConfig]) -> list: ...


def run_on_device(states: Sequence[MaskGitState], lm: PackedDeviceLM) -> Optional[list[list[int] | ValueError]]:
    """Run the steps every state has left in common (as many as the state with the fewest has) on `lm`'s device,
    each state's choices its own, with the host loop's arithmetic and draws. Returns per state the steps run (or
    the ValueError of a state whose chunk failed), or None where the device cannot take them all (then nothing was
    drawn: step on the host)."""
    limit = getattr(lm, "device_steps", 0)
    if not limit or not states or any(not s.greedy or s.done or s.position_noise is not None for s in states):
        return None
    count = min(len(s.steps_left) for s in states)
    offsets = [s.rng.offset if s.rng is not None else None for s in states]
    plans = [s.device_plan(limit, count) for s in states]
    if any(p is None for p in plans):  # put back what the others drew
        for s, offset in zip(states, offsets):
            if s.rng is not None:
                s.rng.offset = offset
        return None
    outs = lm.run_steps_many([s.tokens.copy() for s in states], plans, [s.config for s in states])
    return [out if isinstance(out, Exception) else s.finish_on_device(out, count) for s, out in zip(states, outs)]
