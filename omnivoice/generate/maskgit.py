"""The MaskGIT decoder loop in numpy: a port of the reference's ``_generate_iterative``.

One call generates the audio tokens of one chunk. The language model stays behind the small
:class:`GuidedLM` protocol (the ggml runner implements it; tests use a fake), so this module is
pure numpy. Per step the loop:

1. asks the LM for classifier-free-guided log-probabilities of the current tokens,
2. predicts a token per position (argmax, or Gumbel sampling among the top 10 % of classes when
   ``class_temperature > 0``) with its confidence (the max log-probability),
3. lowers the confidence of codebook ``c`` by ``c * layer_penalty_factor`` and, when
   ``position_temperature > 0``, perturbs it with Gumbel noise,
4. unmasks the ``schedule[step]`` still-masked positions of highest score.

Numerics follow the reference as it runs on CUDA, whose random stream
:class:`~omnivoice.generate.philox.CudaPhiloxGenerator` re-creates: draws happen in the
reference's order and sizes (class noise of [C, T, V] first, then position noise of [C, T];
nothing is drawn for a step that unmasks nothing), dividing by a temperature is a multiplication
by its float32 reciprocal as on CUDA, and the logarithms of the Gumbel noise are CUDA's ``logf``
(:mod:`omnivoice.generate.cuda_math`), evaluated where they can change which positions a step
unmasks (:class:`PositionNoise`). tools/reference/philox_cuda_check.py checks all of this bit for bit on a
GPU (it passed on an H200 with torch 2.11 / CUDA 13.0).

Ties: ``torch.topk`` has no defined order among equal values. Here every top-k (the positions to
unmask, the 10 % class filter) prefers the lower flat index among equal scores, and argmax takes
the first maximum, so results are deterministic; with continuous scores ties do not occur.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from ..options import DEFAULTS, SAMPLER, check
from .cuda_math import logf
from .philox import CudaPhiloxGenerator, rand_like_many
from .schedule import unmask_schedule

__all__ = [
    "GenerationConfig",
    "GuidedLM",
    "MaskGitState",
    "PositionNoise",
    "StepCallback",
    "StepChoice",
    "filter_top_k",
    "generate",
    "gumbel_noise",
    "gumbel_sample",
    "sample_classes",
    "teacher_force",
    "top_k_positions",
]

_CLASS_TOP_K_RATIO = 0.1  # the reference's _filter_top_k ratio


@dataclass(frozen=True)
class GenerationConfig:
    """Sampler settings, defaults as in the reference's ``OmniVoiceGenerationConfig`` (their names, defaults and
    bounds are omnivoice.options' table, which also checks them here: OptionError, a ValueError).

    ``guidance_scale`` is applied by the LM runner (see :class:`GuidedLM`); it is kept here so one
    object carries the whole sampler configuration.
    """

    num_step: int = DEFAULTS["num_step"]
    guidance_scale: float = DEFAULTS["guidance_scale"]
    t_shift: float = DEFAULTS["t_shift"]
    layer_penalty_factor: float = DEFAULTS["layer_penalty_factor"]
    position_temperature: float = DEFAULTS["position_temperature"]
    class_temperature: float = DEFAULTS["class_temperature"]

    def __post_init__(self) -> None:
        for name in SAMPLER:
            check(name, getattr(self, name))

    @property
    def deterministic(self) -> bool:
        """True when no random numbers are drawn (both temperatures are 0)."""
        return self.class_temperature == 0 and self.position_temperature == 0


class GuidedLM(Protocol):
    """What the loop needs from the language model of one chunk.

    The runner owns a prompt fixed for the chunk (conditional row: text, reference audio tokens,
    then the target window; unconditional row: the target window alone). Both methods take the
    current target tokens ``tokens`` (int32 [C, T]; the mask id where a position is still
    masked), write them into the target window of both rows, run the LM and combine the two rows
    with classifier-free guidance of scale g::

        c = log_softmax(cond_logits)      # over V, for each of the C x T target positions
        u = log_softmax(uncond_logits)
        log_probs = log_softmax(c + g * (c - u))   # or log_softmax(cond_logits) when g == 0

    in float32, as the reference's ``_predict_tokens_with_scoring`` does.

    A runner may also offer ``launch_guided_argmax(tokens)``: start what ``guided_argmax`` computes and
    return a function that waits for it and returns ``(pred, score)``. The loop then draws the step's
    position noise while the LM runs (on a GPU the run is queued, so the host's draw costs no time).

    And a runner whose device makes the greedy choice itself may offer ``device_steps`` (how many steps it
    runs at most without the host; 0 when it cannot now) and ``run_steps(tokens, plan, config)``: run the
    rows of :meth:`MaskGitState.device_plan` from ``tokens`` and return the tokens after the last one
    (:meth:`MaskGitState.run_on_device` drives it).
    """

    def guided_log_probs(self, tokens: np.ndarray) -> np.ndarray:
        """Return ``log_probs`` as float32 [C, T, V], mask column NOT yet set to -inf."""
        ...

    def guided_argmax(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(pred, score)``: argmax (int32 [C, T]) and max (float32 [C, T]) of ``log_probs``
        over V with the mask column excluded. The runner may compute these in its graph so that
        only [C, T] crosses to the host."""
        ...


StepCallback = Callable[[int, np.ndarray, np.ndarray], None]
"""``on_step(step, tokens_before, positions)``: step index, int32 [C, T] tokens the LM saw (a copy),
and the flat positions (``c * T + t``, int64, best score first) unmasked at that step."""


@dataclass(frozen=True)
class StepChoice:
    """The choice of one step: flat positions (best score first) and the tokens put there."""

    positions: np.ndarray  # int64 [k]
    tokens: np.ndarray  # int32 [k]


_EPS = np.float32(1e-10)


def gumbel_noise(u: np.ndarray) -> np.ndarray:
    """``-log(-log(u + 1e-10) + 1e-10)`` in float32, bit for bit as torch computes it on CUDA."""
    u = np.asarray(u, dtype=np.float32)
    return -logf(-logf(u + _EPS) + _EPS)


def _noise_tolerance(x: np.ndarray | np.float64) -> np.ndarray | np.float64:
    """A bound on |float32(s + gumbel_noise(u)) - (s + PositionNoise.near)| for a sum near ``x``: the noise is
    within 6.2e-7 of its float64 value over 9.2 million draws (4 million random ones, the 2^20 smallest and
    the 2^22 largest uniforms cuRAND gives; tests/generate/test_maskgit.py checks a share of each), and the
    float32 sum rounds by 2^-24 |x| at most; this allows 16 times the first and the second. ``x -
    tolerance(x)`` grows with ``x``, which the top-k's bound needs."""
    return 1e-5 + 2.0**-20 * np.abs(x)


@dataclass(frozen=True)
class PositionNoise:
    """One step's position noise at the masked positions (C order): the uniform draws, and either their Gumbel
    noise in float64 (two ``np.log``), within :func:`_noise_tolerance` of the exact float32 noise, or the exact
    noise itself, when it was asked for at once.

    Otherwise the exact noise (CUDA's ``logf``: some 200 numpy calls) is evaluated in the step, only for the
    positions whose noisy score lies near the step's k-th: a step unmasks about a 32nd of a chunk, and the
    exact noise of every position costs an order of magnitude more than the float64 one. Drawn while a GPU
    runs the LM, it is better evaluated at once: a lone request's step would otherwise wait after the LM's
    output for the exact noise of a few dozen positions (fixed numpy costs), which the LM's run hides."""

    u: np.ndarray  # float32
    near: Optional[np.ndarray]  # float64, unless the exact noise was evaluated at once
    exact: Optional[np.ndarray] = None  # float32, the exact noise of every masked position, if evaluated

    @classmethod
    def of(cls, u: np.ndarray, exact: bool = False) -> "PositionNoise":
        """The noise of the uniforms ``u``; with ``exact``, its exact value now too."""
        u = np.asarray(u, dtype=np.float32)
        if exact:
            return cls(u, None, gumbel_noise(u))
        a = (u + _EPS).astype(np.float64)  # the float32 sum, as the exact noise takes it
        return cls(u, -np.log(-np.log(a) + float(_EPS)))


def gumbel_sample(logits: np.ndarray, temperature: float, rng: CudaPhiloxGenerator) -> np.ndarray:
    """The reference's ``_gumbel_sample``: ``logits / temperature + gumbel_noise(rand_like(logits))``.

    The division is done as CUDA does it for a Python-float divisor: multiplication by the
    reciprocal, computed in float64 and rounded to float32.
    """
    if not temperature > 0:
        raise ValueError(f"gumbel_sample: temperature must be > 0, got {temperature!r}")
    logits = np.asarray(logits, dtype=np.float32)
    inv = np.float32(1.0 / float(temperature))
    scaled = logits * inv
    u = rng.rand_like(scaled.shape)
    return scaled + gumbel_noise(u)


def sample_classes(log_probs: np.ndarray, temperature: float, rng: CudaPhiloxGenerator) -> np.ndarray:
    """``gumbel_sample(filter_top_k(log_probs), temperature, rng).argmax(-1)`` (int32), computed faster.

    The generator advances by the whole ``rand_like`` draw, as the reference's does, but the draw and
    its noise are evaluated only where the top-k filter keeps a class (a tenth of them): elsewhere the
    sample is -inf whatever the noise. (For a 5 s chunk, 8 x 125 x 1025 values a step, most of a sampled
    step's host time when the whole draw was evaluated.)
    """
    if not temperature > 0:
        raise ValueError(f"sample_classes: temperature must be > 0, got {temperature!r}")
    log_probs = np.asarray(log_probs, dtype=np.float32)
    keep = _top_k_mask(log_probs, math.ceil(_CLASS_TOP_K_RATIO * log_probs.shape[-1]))
    u = rand_like_many([rng], [log_probs.shape], where=[keep])[0]  # the kept elements, C order
    perturbed = np.full(log_probs.shape, -np.inf, dtype=np.float32)
    perturbed[keep] = log_probs[keep] * np.float32(1.0 / float(temperature)) + gumbel_noise(u)
    return perturbed.argmax(axis=-1).astype(np.int32)


def _top_k_mask(values: np.ndarray, k: int) -> np.ndarray:
    """Boolean mask of the k largest entries along the last axis, ties broken by lower index."""
    n = values.shape[-1]
    if not 0 <= k <= n:
        raise ValueError(f"top-k: k must be in [0, {n}], got {k}")
    if k == 0:
        return np.zeros(values.shape, dtype=bool)
    if k == n:
        return np.ones(values.shape, dtype=bool)
    thr = np.partition(values, n - k, axis=-1)[..., n - k : n - k + 1]
    above = values > thr
    equal = values == thr
    room = k - above.sum(axis=-1, keepdims=True)
    return above | (equal & (np.cumsum(equal, axis=-1) <= room))


def filter_top_k(log_probs: np.ndarray, ratio: float = _CLASS_TOP_K_RATIO) -> np.ndarray:
    """The reference's ``_filter_top_k``: keep the ``ceil(ratio * V)`` largest values per row, -inf elsewhere."""
    log_probs = np.asarray(log_probs, dtype=np.float32)
    k = math.ceil(ratio * log_probs.shape[-1])
    keep = _top_k_mask(log_probs, k)
    return np.where(keep, log_probs, np.float32(-np.inf)).astype(np.float32)


def top_k_positions(scores: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the k largest scores, largest first, ties by lower index (int64 [k])."""
    flat = np.asarray(scores).reshape(-1)
    if not 0 <= k <= flat.size:
        raise ValueError(f"top_k_positions: k must be in [0, {flat.size}], got {k}")
    if k == 0:
        return np.empty(0, dtype=np.int64)
    neg = -flat
    cand = None
    if k < flat.size:
        # Only the positions at or above the k-th score (its ties included) can be chosen: a step unmasks about
        # 1/32 of a chunk, and sorting those alone is several times faster than sorting all 1000 of a 5 s chunk.
        # They come in index order, so the stable sort keeps ties by lower index.
        thr = np.partition(neg, k - 1)[k - 1]
        if not np.isnan(thr):
            cand = np.flatnonzero(neg <= thr)
    if cand is None:
        cand = np.arange(flat.size)
    # A stable sort of the negated scores keeps equal scores in index order.
    order = cand[np.argsort(neg[cand], kind="stable")]
    return order[:k].astype(np.int64)


def _near_set(scaled: np.ndarray, masked_at: np.ndarray, noise: PositionNoise, k: int) -> np.ndarray:
    """Which of the masked positions (flat indices ``masked_at``) have an exact noise that can decide the
    step's top k of ``scaled + gumbel_noise(u)`` (float32, as the reference sums them; -inf where not masked):
    indices into ``masked_at``.

    With tau the k-th largest of the float64 sums and t the tolerance, every position outside the near set
    {near >= tau - t(tau) - t(near)} has an exact score below the k-th exact one, which is at least tau - t(tau)
    (k sums at or above tau are each within t of their exact score, and x - t(x) grows with x).
    """
    if noise.u.size != masked_at.size:
        raise ValueError(f"position noise for {noise.u.size} positions, but {masked_at.size} are masked")
    if 0 < k < masked_at.size:
        near = scaled.reshape(-1)[masked_at].astype(np.float64) + noise.near
        tau = np.partition(near, near.size - k)[near.size - k]
        if np.isfinite(tau):
            return np.flatnonzero(near >= tau - _noise_tolerance(tau) - _noise_tolerance(near))
    return np.arange(masked_at.size)


def unscored_pick(step: Optional[int] = None) -> ValueError:
    """The error of a position being unmasked whose prediction is negative. The guided argmax of a row whose
    logits are all NaN or -inf is -1 (ggml's ARGMAX starts there) and its score -FLT_MAX, no NaN, so the NaN check
    does not see it; the request fails here, with the LM named, rather than at the codec's check of its codes. The
    host's choice (ScoredStep.finish) and a device that made the choice (runners.lm.ChunkSession.run_on_device)
    both raise it."""
    where = "MaskGIT" if step is None else f"MaskGIT step {step}"
    return ValueError(f"{where}: the LM gave no finite score for a position being unmasked (its logits were NaN or "
                      "-inf), and its prediction was -1")


@dataclass
class ScoredStep:
    """A step's choice up to the exact noise of its near set: :meth:`finish` takes that noise (the
    ``gumbel_noise`` of ``u``, or ``noise`` where known) and gives the choice, so a caller with many
    steps to finish evaluates the noise of all of them in one pass (``generate.batch``)."""

    pred: np.ndarray  # int32 [C, T]
    scores: np.ndarray  # float32 [C * T]: the scaled scores (before any noise)
    where: np.ndarray  # int64: the flat positions that can be chosen
    u: Optional[np.ndarray]  # float32: their uniforms, when their exact noise is still to be evaluated
    noise: Optional[np.ndarray]  # float32: their exact noise, when known (neither: no position noise)
    k: int
    mask_id: int
    step: int

    def finish(self, noise: Optional[np.ndarray]) -> StepChoice:
        """The choice, from the exact noise at ``where`` (:meth:`exact_noise`; None without position noise)."""
        exact = np.full(self.scores.size, -np.inf, dtype=np.float32)
        exact[self.where] = self.scores[self.where] if noise is None else self.scores[self.where] + noise
        positions = top_k_positions(exact, self.k)
        chosen = self.pred.reshape(-1)[positions]
        if (chosen == self.mask_id).any():
            raise ValueError(f"MaskGIT step {self.step}: the LM predicted the mask id {self.mask_id} for a "
                             "position being unmasked")
        if (chosen < 0).any():
            raise unscored_pick(self.step)
        return StepChoice(positions=positions, tokens=chosen.astype(np.int32))

    def exact_noise(self) -> Optional[np.ndarray]:
        """The exact noise at ``where``: evaluated here if it was not known."""
        return self.noise if self.u is None else gumbel_noise(self.u)

    def choice(self) -> StepChoice:
        """The choice, the exact noise evaluated here where it was not known (one step alone)."""
        return self.finish(self.exact_noise())


def _check_tokens(tokens: np.ndarray, num_codebooks: int, num_target_tokens: int, what: str) -> np.ndarray:
    tokens = np.asarray(tokens)
    if tokens.shape != (num_codebooks, num_target_tokens):
        raise ValueError(f"{what}: expected shape ({num_codebooks}, {num_target_tokens}), got {tokens.shape}")
    return tokens


def _choose(
    lm: GuidedLM,
    tokens: np.ndarray,
    k: int,
    config: GenerationConfig,
    rng: Optional[CudaPhiloxGenerator],
    penalty: np.ndarray,
    mask_id: int,
    step: int,
) -> StepChoice:
    """One MaskGIT step on ``tokens`` (int32 [C, T]): which k positions to unmask, with which tokens."""
    lm_tokens = tokens.copy()  # the runner must not be able to alter the loop's state
    if config.class_temperature > 0:
        return _pick(tokens, k, config, rng, penalty, mask_id, step, log_probs=lm.guided_log_probs(lm_tokens))
    pred, conf = lm.guided_argmax(lm_tokens)
    return _pick(tokens, k, config, rng, penalty, mask_id, step, pred=pred, score=conf)


def _pick(*args, **kwargs) -> StepChoice:
    """The choice of one step (see :func:`_score`)."""
    return _score(*args, **kwargs).choice()


def _score(
    tokens: np.ndarray,
    k: int,
    config: GenerationConfig,
    rng: Optional[CudaPhiloxGenerator],
    penalty: np.ndarray,
    mask_id: int,
    step: int,
    *,
    pred: Optional[np.ndarray] = None,
    score: Optional[np.ndarray] = None,
    log_probs: Optional[np.ndarray] = None,
    position_noise: Optional[PositionNoise] = None,
) -> ScoredStep:
    """The choice of one step, up to its exact position noise, from the LM's output for ``tokens``:
    ``log_probs`` [C, T, V] when class_temperature > 0, else its argmax ``pred`` and max ``score`` [C, T].

    ``position_noise`` is the noise of the masked positions' scores when the caller drew it already
    (generate.batch draws it for many chunks at once). Otherwise it is drawn here from ``rng``, after any
    class noise, as the reference does.
    """
    num_codebooks, num_target_tokens = tokens.shape
    if config.class_temperature > 0:
        log_probs = np.array(log_probs, dtype=np.float32)
        if log_probs.ndim != 3 or log_probs.shape[:2] != (num_codebooks, num_target_tokens):
            raise ValueError(
                f"guided_log_probs at step {step}: expected shape ({num_codebooks}, {num_target_tokens}, V), "
                f"got {log_probs.shape}"
            )
        if not 0 <= mask_id < log_probs.shape[2]:
            raise ValueError(f"mask_id {mask_id} is outside the LM's vocabulary of {log_probs.shape[2]}")
        log_probs[..., mask_id] = -np.inf
        pred = sample_classes(log_probs, config.class_temperature, rng)
        conf = log_probs.max(axis=-1)
    else:
        pred = _check_tokens(pred, num_codebooks, num_target_tokens, f"guided_argmax pred at step {step}")
        conf = _check_tokens(score, num_codebooks, num_target_tokens, f"guided_argmax score at step {step}")
        pred = pred.astype(np.int32)
        conf = conf.astype(np.float32)

    masked = tokens == mask_id
    masked_at = np.flatnonzero(masked.reshape(-1))
    scores = conf - penalty
    if np.isnan(scores).any():  # the noise is finite: a noisy score is NaN where this is
        raise ValueError(f"MaskGIT step {step}: the LM produced NaN scores")
    if config.position_temperature > 0:  # gumbel_sample, where it is read (the rest is -inf)
        if position_noise is None:
            position_noise = PositionNoise.of(rand_like_many([rng], [scores.shape], where=[masked])[0])
        scores = scores * np.float32(1.0 / float(config.position_temperature))
        if position_noise.exact is not None:
            return ScoredStep(pred, scores.reshape(-1), masked_at, None, position_noise.exact, k, mask_id, step)
        keep = _near_set(scores, masked_at, position_noise, k)
        return ScoredStep(pred, scores.reshape(-1), masked_at[keep], position_noise.u[keep], None, k, mask_id, step)
    return ScoredStep(pred, scores.reshape(-1), masked_at, None, None, k, mask_id, step)


def _prepare(config: GenerationConfig, rng: Optional[CudaPhiloxGenerator], num_codebooks: int) -> np.ndarray:
    if not config.deterministic and rng is None:
        raise ValueError(
            "MaskGIT: a random generator (CudaPhiloxGenerator) is needed when class_temperature or "
            f"position_temperature is > 0 (got {config.class_temperature}, {config.position_temperature})"
        )
    if num_codebooks < 1:
        raise ValueError(f"MaskGIT: num_codebooks must be >= 1, got {num_codebooks}")
    # The reference subtracts layer_ids * factor, an int tensor times a Python float: float32.
    return (np.arange(num_codebooks, dtype=np.float32) * np.float32(config.layer_penalty_factor))[:, None]


class MaskGitState:
    """One chunk's MaskGIT decoding as a state that whoever runs the LM advances step by step.

    :func:`generate` drives one state with one LM; ``omnivoice.generate.batch`` drives many at once, each
    scored in a shared LM pass, with the same arithmetic, so a chunk's tokens do not depend on its
    batch mates. Steps that unmask nothing are skipped (no LM call, no random draw), as in the reference.
    """

    def __init__(self, num_target_tokens: int, config: GenerationConfig = GenerationConfig(),
                 rng: Optional[CudaPhiloxGenerator] = None, num_codebooks: int = 8, mask_id: int = 1024) -> None:
        num_target_tokens = int(num_target_tokens)
        if num_target_tokens < 1:
            raise ValueError(f"generate: num_target_tokens must be >= 1, got {num_target_tokens}")
        self.config, self.rng, self.mask_id = config, rng, mask_id
        self.penalty = _prepare(config, rng, num_codebooks)
        self.tokens = np.full((num_codebooks, num_target_tokens), mask_id, dtype=np.int32)
        self.schedule = unmask_schedule(num_codebooks * num_target_tokens, config.num_step, config.t_shift)
        self.step = -1
        # This step's position noise, drawn before the LM's output is known (draw_position_noise).
        self.position_noise: Optional[PositionNoise] = None
        self._next()

    def _next(self) -> None:
        self.step += 1
        while self.step < len(self.schedule) and self.schedule[self.step] <= 0:
            self.step += 1

    @property
    def done(self) -> bool:
        """True once every step has run."""
        return self.step >= len(self.schedule)

    @property
    def k(self) -> int:
        """How many positions the next step unmasks."""
        return self.schedule[self.step]

    @property
    def greedy(self) -> bool:
        """Whether the next step needs only the argmax and max of the guided log-probs (no class sampling)."""
        return self.config.class_temperature == 0

    @property
    def noise_first(self) -> bool:
        """Whether the next step's only random draw is its position noise (greedy classes, a position
        temperature), so that it can be drawn before the LM's output is known: while the LM runs."""
        return self.greedy and self.config.position_temperature > 0 and not self.done

    def draw_position_noise(self) -> None:
        """Draw the next step's position noise now (see :attr:`noise_first`; ``generate.batch`` draws it for
        many states at once); :meth:`choose` then uses it instead of drawing."""
        if not self.noise_first:
            raise ValueError("draw_position_noise: this step draws class noise first, or no position noise")
        if self.position_noise is not None:
            raise ValueError("draw_position_noise: this step's noise is drawn already")
        masked = self.tokens == self.mask_id
        u = rand_like_many([self.rng], [self.tokens.shape], where=[masked])[0]
        self.position_noise = PositionNoise.of(u, exact=True)  # drawn while the LM runs (advance)

    def choose(self, **lm_output) -> StepChoice:
        """The next step's choice from the LM's output for :attr:`tokens` (``pred`` and ``score``, or
        ``log_probs``); draws from the generator, unless the position noise was drawn ahead."""
        return self.score(**lm_output).choice()

    def score(self, **lm_output) -> ScoredStep:
        """:meth:`choose` up to the exact noise of the positions it decides between."""
        if self.position_noise is not None:
            lm_output["position_noise"] = self.position_noise
        return _score(self.tokens, self.k, self.config, self.rng, self.penalty, self.mask_id, self.step,
                      **lm_output)

    def apply(self, choice: StepChoice) -> None:
        """Put the chosen tokens in place and move to the next step that unmasks something."""
        self.tokens.reshape(-1)[choice.positions] = choice.tokens
        self.position_noise = None
        self._next()

    @property
    def steps_left(self) -> list[int]:
        """The steps still to run that unmask something (the others are skipped)."""
        return [s for s in range(self.step, len(self.schedule)) if self.schedule[s] > 0]

    def device_plan(self, max_steps: int, count: Optional[int] = None) -> Optional[np.ndarray]:
        """The steps left (the first `count` of them, default all), as rows for a device that runs them without
        the host (GuidedLM.run_steps, see :meth:`run_on_device`; on CUDA runners.lm's ChunkSession.run_on_device:
        each step's choice made where the LM ran): int32 [n, 6] of k, the seed's low and high 32 bits, the Philox
        offset / 4's low and high 32 bits, and 1 where the step adds position noise.

        None where the device cannot take them: sampled classes, noise drawn ahead, more than `max_steps` steps
        (none where `max_steps` is 0), or a [C, T] draw that PyTorch would spread over several Philox calls per
        thread (the device computes element i as word 0 of thread i's first call). Otherwise the generator
        advances as the host's steps would advance it (one [C, T] draw for each step with position noise): run the
        rows, then :meth:`finish_on_device`.
        """
        if not self.greedy or self.position_noise is not None or self.done or max_steps <= 0:
            return None
        steps = self.steps_left[:count]
        noise = self.config.position_temperature > 0
        if not steps or len(steps) > max_steps or (noise and self.rng.launch(self.tokens.size)[0] < self.tokens.size):
            return None
        rows = np.zeros((len(steps), 6), dtype=np.int64)
        for row, s in zip(rows, steps):
            row[0] = self.schedule[s]
            if noise:
                base = self.rng.offset // 4
                row[1:6] = (self.rng.seed & 0xFFFFFFFF, self.rng.seed >> 32, base & 0xFFFFFFFF, base >> 32, 1)
                self.rng.offset = self.rng.offset + self.rng.launch(self.tokens.size)[1]
        return rows.astype(np.uint32).view(np.int32)

    def run_on_device(self, lm: GuidedLM) -> Optional[list[int]]:
        """Run every step left on ``lm``'s device (its ``device_steps`` and ``run_steps``, see :class:`GuidedLM`):
        returns the steps run, or None where it cannot (then nothing was drawn; step on the host)."""
        plan = self.device_plan(getattr(lm, "device_steps", 0))
        if plan is None:
            return None
        return self.finish_on_device(lm.run_steps(self.tokens.copy(), plan, self.config))

    def finish_on_device(self, tokens: np.ndarray, count: Optional[int] = None) -> list[int]:
        """Take the tokens of a device that ran :meth:`device_plan`'s rows (for the first `count` steps left, default
        all); returns the steps they covered."""
        steps = self.steps_left[:count]
        self.tokens[...] = _check_tokens(tokens, *self.tokens.shape, "tokens from the device")
        self.step = steps[-1] if steps else self.step
        self._next()
        return steps

    def advance(self, lm: GuidedLM, on_step: Optional[StepCallback] = None) -> StepChoice:
        """Score the tokens with ``lm``, choose, call ``on_step`` (before the tokens change) and apply."""
        launch = getattr(lm, "launch_guided_argmax", None) if self.greedy else None
        if launch is not None:
            finish = launch(self.tokens.copy())
            if self.noise_first:
                self.draw_position_noise()  # on the host while the LM runs
            pred, score = finish()
            choice = self.choose(pred=pred, score=score)
        else:
            choice = _choose(lm, self.tokens, self.k, self.config, self.rng, self.penalty, self.mask_id,
                             self.step)
        if on_step is not None:
            on_step(self.step, self.tokens.copy(), choice.positions.copy())
        self.apply(choice)
        return choice


def generate(
    lm: GuidedLM,
    num_target_tokens: int,
    config: GenerationConfig = GenerationConfig(),
    rng: Optional[CudaPhiloxGenerator] = None,
    num_codebooks: int = 8,
    mask_id: int = 1024,
    on_step: Optional[StepCallback] = None,
) -> np.ndarray:
    """Run the MaskGIT decoder for one chunk and return its tokens (int32 [num_codebooks, T]).

    Args:
        lm: the chunk's LM runner (:class:`GuidedLM`).
        num_target_tokens: T, the number of audio frames to generate.
        config: sampler settings.
        rng: random generator, required unless both temperatures are 0; it is advanced in place,
            so passing the same generator to successive chunks threads the stream as the
            reference's global CUDA generator does.
        num_codebooks: C.
        mask_id: the audio mask token id.
        on_step: optional callback, see :data:`StepCallback`. Steps that unmask nothing (small T)
            run no LM call and no callback.
    """
    state = MaskGitState(num_target_tokens, config, rng, num_codebooks, mask_id)
    while not state.done:
        state.advance(lm, on_step)
    return state.tokens


def teacher_force(
    lm: GuidedLM,
    step_tokens: Sequence[np.ndarray] | np.ndarray,
    config: GenerationConfig = GenerationConfig(),
    rng: Optional[CudaPhiloxGenerator] = None,
    mask_id: int = 1024,
) -> list[StepChoice]:
    """Replay the loop on given per-step inputs and return what each step would choose.

    For parity tests: ``step_tokens[s]`` (int [C, T]) is the input of step ``s`` as recorded from
    another implementation. Each step is scored from that input (not from this loop's own previous
    choices), so one differing choice does not derail the steps after it. The schedule comes from
    ``config`` and T; steps whose count is 0 give empty choices. At most ``config.num_step`` steps.
    """
    if len(step_tokens) == 0:
        return []
    first = np.asarray(step_tokens[0])
    if first.ndim != 2:
        raise ValueError(f"teacher_force: each step's tokens must be [C, T], got shape {first.shape}")
    num_codebooks, num_target_tokens = first.shape
    if len(step_tokens) > config.num_step:
        raise ValueError(f"teacher_force: {len(step_tokens)} steps given, config.num_step is {config.num_step}")
    penalty = _prepare(config, rng, num_codebooks)
    schedule = unmask_schedule(num_codebooks * num_target_tokens, config.num_step, config.t_shift)
    choices = []
    for step, given in enumerate(step_tokens):
        tokens = _check_tokens(given, num_codebooks, num_target_tokens, f"teacher_force step {step}")
        tokens = tokens.astype(np.int32)
        k = schedule[step]
        if k <= 0:
            choices.append(StepChoice(np.empty(0, np.int64), np.empty(0, np.int32)))
            continue
        masked = int((tokens == mask_id).sum())
        if masked < k:
            raise ValueError(f"teacher_force step {step}: {masked} masked positions, the schedule unmasks {k}")
        choices.append(_choose(lm, tokens, k, config, rng, penalty, mask_id, step))
    return choices
