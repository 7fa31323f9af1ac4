"""Offline batches: a list of requests in, one result per request out (`OmniVoice.synthesize_batch`), or the
outcomes one by one as they finish (`run_batch`, which the batch CLI and the Ray actors use).

Requests are started in an order that groups them by step count and length, so a batch's members finish
their chunks on the same step and the packed graph is rebuilt rarely; results come back in the caller's order.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np

from ..pipeline import Settings, SynthesisResult
from ..text.duration import estimate_target_tokens
from .core import BatchEngine, Task
from .request import InvalidRequests, SynthesisRequest, as_request

__all__ = ["prepare", "run_batch", "synthesize_batch", "warm_up", "BatchFailed", "order_key"]

RequestLike = Union[SynthesisRequest, Mapping[str, Any]]


class BatchFailed(RuntimeError):
    """Some requests failed while the batch ran. `errors` maps request index -> exception; `results` holds the
    results in order (None where a request failed)."""

    def __init__(self, errors: dict[int, BaseException], results: list[Optional[SynthesisResult]]) -> None:
        self.errors, self.results = errors, results
        lines = [f"request {i}: {type(e).__name__}: {e}" for i, e in sorted(errors.items())]
        super().__init__(f"{len(errors)} of {len(results)} requests failed:\n  " + "\n  ".join(lines))


def prepare(items: Iterable[RequestLike]) -> list[Union[tuple[SynthesisRequest, Settings], Exception]]:
    """Each item checked and resolved into pipeline Settings (SynthesisRequest.settings); an invalid item gets
    its ValueError in its place."""
    out: list = []
    for item in items:
        try:
            req = as_request(item)
            out.append((req, req.settings()))
        except ValueError as e:
            out.append(e)
    return out


def order_key(r: SynthesisRequest) -> tuple:
    """The order requests start in: by step count, sampling mode and estimated length, so that the members of
    a batch finish together (the Ray driver shards a manifest in this order too)."""
    length = (round(r.duration * 25) if r.duration is not None
              else estimate_target_tokens(r.text, None, None, speed=r.speed))
    return (r.num_step, r.class_temperature > 0, length)


def run_batch(ov, prepared: Sequence[tuple[int, SynthesisRequest, Settings]], batch_size: int | str = "auto",
              engine: Optional[BatchEngine] = None) -> Iterator[tuple[int, Union[SynthesisResult, BaseException]]]:
    """Run (index, request, settings) items; yield (index, result or exception) as each finishes.

    `engine` reuses a BatchEngine (and its voice cache and measured limits); otherwise one is made and closed.
    Closing the generator early (Ctrl-C) cancels what has not finished.
    """
    own = engine is None
    engine = engine or BatchEngine(ov, max_batch=batch_size)
    tasks = [Task(req, settings, index=i) for i, req, settings in prepared]
    for t in sorted(tasks, key=lambda t: order_key(t.request)):
        engine.add(t)
    try:
        while engine.busy:
            for t in engine.step():
                yield t.index, (t.result if t.error is None else t.error)
    finally:
        for t in tasks:
            t.cancel()
        if own:
            engine.close()
        else:  # leave a reused engine clean: what was not finished is dropped
            engine.step(admit=False)


def warm_up(ov, engine: BatchEngine, n: int = 8, lone_seconds: int = 10) -> float:
    """Run one small batch through `engine` and discard it; return the seconds it took.

    A process's first batch on a GPU pays once for what later batches reuse (kernels loaded on first launch,
    cuBLAS's handles and workspaces, the compute buffers' first allocations, the codec's graphs); a Ray actor or
    a server that warms up at load pays it before its first real work. The batch has `n` one-second requests
    of two MaskGIT steps (at least 8: the pipelined engine's two groups), auto, designed and cloned (a synthetic
    one-second reference: the codec's encoder runs too), then a one-second request alone (the device's MaskGIT on
    CUDA). Where the LM keeps graphs by shape class (LanguageModel.shape_classes, on GPUs by default;
    runners.lm.class_layout), requests alone of 1 to `lone_seconds` seconds with about as many words as speech of
    that length has: each builds and captures the graph that a one-sentence request of its length will take, and
    the codec's decode graph of its length (one each for 1 to 10 s: ten graphs of the LM's sixteen, eight of the
    codec's). A failure here is raised: real work would fail alike.
    """
    t0 = time.perf_counter()
    sr = ov.sample_rate
    tone = (0.1 * np.sin(2 * np.pi * 220.0 * np.arange(sr) / sr)).astype(np.float32)
    common = dict(text="Warm up.", duration=1.0, num_step=2)
    requests = [SynthesisRequest(seed=i, **common) for i in range(max(n, 8) - 2)]
    requests += [SynthesisRequest(instruct="female", seed=0, **common),
                 SynthesisRequest(ref_audio=(tone, sr), ref_text="Warm up.", seed=0, **common)]
    prepared = [(i, r, r.settings()) for i, r in enumerate(requests)]
    batches = [prepared]
    for seconds in range(1, lone_seconds + 1 if ov.lm.shape_classes else 2):
        # English speech runs at about 2.7 words a second (the words of a clause, its class's text length)
        lone = SynthesisRequest(text=" ".join(["warm"] * max(1, round(2.7 * seconds))) + ".",
                                duration=float(seconds), num_step=2, seed=0)
        batches.append([(0, lone, lone.settings())])
    for batch in batches:
        for _, outcome in run_batch(ov, batch, engine=engine):
            if isinstance(outcome, BaseException):
                raise outcome
    return time.perf_counter() - t0


def synthesize_batch(ov, requests: Sequence[RequestLike], batch_size: int | str = "auto",
                     progress: Optional[Callable[[int, int], None]] = None) -> list[SynthesisResult]:
    """Synthesize every request, many at a time; one SynthesisResult per request, in order.

    Every request is checked before any work starts: InvalidRequests lists each invalid one. A request that
    fails while the batch runs does not stop the others; BatchFailed (with the other results) is raised at
    the end. `progress(done, total)` is called as requests finish.
    """
    items = list(requests)
    prepared = prepare(items)
    bad = [(i, _item_id(items[i]), str(p)) for i, p in enumerate(prepared) if isinstance(p, Exception)]
    if bad:
        raise InvalidRequests(bad)
    results: list[Optional[SynthesisResult]] = [None] * len(items)
    errors: dict[int, BaseException] = {}
    done = 0
    for i, outcome in run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], batch_size):
        if isinstance(outcome, BaseException):
            errors[i] = outcome
        else:
            results[i] = outcome
        done += 1
        if progress is not None:
            progress(done, len(items))
    if errors:
        raise BatchFailed(errors, results)
    return results  # type: ignore[return-value]


def _item_id(item: RequestLike):
    return item.get("id") if isinstance(item, Mapping) else getattr(item, "id", None)
