"""Batch synthesis on a Ray cluster (the optional extra: pip install 'omnivoice-ggml[ray]').

Two ways in, both with Ray's own scheduling (nothing here decides which worker runs what):

`python -m omnivoice.batch MANIFEST -o OUTDIR --ray [ADDRESS]` starts one `Synthesizer` actor per GPU of the
cluster (`num_gpus=1`; or `--cpu-actors N` actors sharing the CPUs), each loading the model once, and hands them
shards of the manifest through `ray.util.ActorPool`. The driver reads reference clips and writes every output,
so outputs, resuming and failures.jsonl are exactly those of a local run, and reference paths need not exist
on the workers. A request's tokens do not depend on the actor or on its batch mates.

For Ray Data, `OmniVoicePredictor` is a callable class for `Dataset.map_batches`:

    import ray, omnivoice.batch.ray as ovray
    ds = ray.data.read_json("lines.jsonl")                       # columns: text, and any request field
    ds = ds.map_batches(ovray.OmniVoicePredictor, fn_constructor_kwargs={"model": "/models/OmniVoice"},
                        concurrency=2, num_gpus=1, batch_size=64, batch_format="numpy")
    for row in ds.iter_rows(): ...                               # + audio, sample_rate, tokens, error

Each of the `concurrency` actors loads the model once and synthesizes each batch it gets as one engine batch.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields
from typing import Any, Iterator, Optional

import numpy as np

from ..engine.offline import order_key
from ..engine.request import SynthesisRequest

__all__ = ["Synthesizer", "OmniVoicePredictor", "run_ray"]

MAX_SHARD = 64  # items per actor call: big enough to fill an engine batch, small enough to spread the load


def require_ray():
    try:
        import ray
    except ImportError:
        raise ValueError("Ray is not installed: pip install 'omnivoice-ggml[ray]' (or pip install ray)") from None
    return ray


class Synthesizer:
    """A loaded OmniVoice and its batched engine (a Ray actor, or a plain object): `run` synthesizes a list of
    requests as one batch.

    `warm_up` (default: on GPUs) runs one small batch at load (engine.offline.warm_up), so that an actor is
    ready when its first shard arrives: a fresh actor's first shard otherwise pays the process's one-time GPU
    costs (first launches, cuBLAS, first buffers and graphs), about as long as a shard's own work
    (BENCHMARKS.md, Ray)."""

    def __init__(self, model: Optional[str] = None, codec: Optional[str] = None, backend: str = "auto",
                 quant: str = "auto", threads: Optional[int] = None, batch_size="auto",
                 warm_up: Optional[bool] = None, cpu_products: Optional[str] = None) -> None:
        from ..api import OmniVoice
        from ..engine import BatchEngine
        from ..engine.offline import warm_up as run_warm_up

        self.ov = OmniVoice(model, codec, backend=backend, n_threads=threads, quant=quant,
                            cpu_products=cpu_products)
        self.engine = BatchEngine(self.ov, max_batch=batch_size)
        if self.ov.runtime.is_gpu if warm_up is None else warm_up:
            run_warm_up(self.ov, self.engine)

    def describe(self) -> str:
        d = self.ov.runtime.device
        return f"{d.spec} ({d.description}), pid {os.getpid()}"

    def results(self, requests: list) -> list:
        """SynthesisResult or exception for each request (SynthesisRequest or dict), in order."""
        from ..engine.offline import prepare, run_batch

        out: list = [None] * len(requests)
        jobs = []
        for i, p in enumerate(prepare(requests)):
            if isinstance(p, Exception):
                out[i] = p
            else:
                jobs.append((i, p[0], p[1]))
        for i, outcome in run_batch(self.ov, jobs, engine=self.engine):
            out[i] = outcome
        return out

    def run(self, requests: list, fmt: str = "wav16") -> list:
        """For each request: ("ok", audio file bytes in `fmt`, tokens, seconds) or ("error", kind, message)."""
        from .outputs import encode_result, exit_code_of

        out = []
        for r in self.results(requests):
            if not isinstance(r, BaseException):
                try:
                    out.append(("ok",) + encode_result(r, fmt))
                    continue
                except ValueError as e:
                    r = e
            out.append(("error", exit_code_of(r), str(r) if isinstance(r, ValueError) else f"{type(r).__name__}: {r}"))
        return out

    def run_tagged(self, tag, requests: list, fmt: str = "wav16") -> tuple:
        """(tag, run(requests, fmt)): lets a pool's caller tell which call a result belongs to."""
        return tag, self.run(requests, fmt)

    def close(self) -> None:
        self.engine.close()
        self.ov.close()


class RemoteFailure(Exception):
    """A request that failed on a Ray actor: the actor's message, and the exit status it stands for."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _shippable(req: SynthesisRequest, clips: dict) -> dict:
    """The request as a dict for an actor, its reference clip read here (paths need not exist on workers)."""
    from ..audio.io import load_audio

    d = {f.name: getattr(req, f.name) for f in fields(req)}
    ref = d.get("ref_audio")
    if isinstance(ref, (str, os.PathLike)):
        key = os.path.realpath(os.fspath(ref))
        if key not in clips:
            clips[key] = load_audio(key)
        d["ref_audio"] = clips[key]
    return d


def run_ray(args, items: list, say, on_ready=lambda: None, batch_size="auto") -> Iterator[tuple[Any, Any]]:
    """(item, (audio bytes, tokens, seconds) or exception) for every manifest item, as shards finish; `batch_size`:
    requests per LM step of each actor (--batch-size, checked)."""
    ray = require_ray()
    from ray.util import ActorPool

    started = not ray.is_initialized()
    if started:
        ray.init(address=args.ray or None, include_dashboard=False, log_to_driver=bool(args.verbose))
    actors = []
    try:
        resources = ray.cluster_resources()
        if args.cpu_actors:
            n = args.cpu_actors
            cpus = float(resources.get("CPU", 1)) / n
            threads = args.threads or max(1, int(cpus))
            options = {"num_cpus": cpus}
            backend = "cpu"
        else:
            n = int(resources.get("GPU", 0))
            if n < 1:
                raise ValueError("the Ray cluster has no GPU: give --cpu-actors N to run on CPUs")
            options, threads, backend = {"num_gpus": 1}, args.threads, args.backend
        actor_class = ray.remote(Synthesizer).options(**options)
        actors = [actor_class.remote(args.model, args.codec, backend, args.quant, threads,
                                     batch_size, None if args.warm_up else False,
                                     args.cpu_products)
                  for _ in range(n)]
        say("ray: " + "; ".join(ray.get([a.describe.remote() for a in actors])))
        on_ready()
        clips: dict = {}
        shippable = []
        for it in items:
            try:
                shippable.append((it, _shippable(it.request, clips)))
            except ValueError as e:  # an unreadable reference fails its item here, as it would locally
                yield it, e
        # Shards in the engine's own order; with a fixed batch size one shard is one engine batch, so the same
        # requests share a graph whatever the number of actors (on GPUs, where kernels round by shape, the
        # tokens then do not depend on it either).
        shippable.sort(key=lambda x: order_key(x[0].request))
        size = batch_size if batch_size != "auto" else max(1, min(MAX_SHARD, math.ceil(len(shippable) / len(actors))))
        shards = [shippable[i:i + size] for i in range(0, len(shippable), size)]
        pool = ActorPool(actors)
        for shard, results in _map(pool, shards, args.format):
            for (it, _), r in zip(shard, results):
                if r[0] == "ok":
                    yield it, r[1:]
                else:
                    yield it, ValueError(r[2]) if r[1] == 2 else RemoteFailure(r[2], r[1])
    finally:
        for a in actors:
            ray.kill(a)
        if started:
            ray.shutdown()


def _map(pool, shards: list, fmt: str):
    """(shard, results) pairs as the pool's actors finish them (map_unordered gives results alone: each call
    returns its shard's index with them)."""
    jobs = [(i, [d for _, d in s]) for i, s in enumerate(shards)]
    for i, results in pool.map_unordered(lambda actor, job: actor.run_tagged.remote(job[0], job[1], fmt), jobs):
        yield shards[i], results


class OmniVoicePredictor:
    """A callable class for ray.data.Dataset.map_batches: loads OmniVoice once per actor and synthesizes each
    batch of rows as one engine batch.

    Input columns: `text`, and optionally any SynthesisRequest field (language, instruct, ref_audio (a path on
    the worker), ref_text, duration, speed, seed, num_step, guidance_scale, ...); a missing column, None or
    NaN means the default. Output: the input columns plus `audio` (float32 at `sample_rate`), `sample_rate`,
    `tokens` (int32 [8, T], the chunks joined) and `error` ("" when the row succeeded; then audio is empty).
    Constructor arguments are those of Synthesizer (model, codec, backend, quant, threads, batch_size, warm_up,
    cpu_products).
    """

    def __init__(self, **kwargs) -> None:
        self.synth = Synthesizer(**kwargs)

    def __call__(self, batch: dict) -> dict:
        names = {f.name for f in fields(SynthesisRequest)} - {"voice"}
        columns = [c for c in batch if c in names]
        n = len(batch["text"])
        requests = []
        for i in range(n):
            row = {}
            for c in columns:
                v = batch[c][i]
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    continue
                row[c] = v.item() if isinstance(v, np.generic) else v
            requests.append(row)
        audio, tokens, errors = [], [], []
        for r in self.synth.results(requests):
            if isinstance(r, BaseException):
                audio.append(np.zeros(0, np.float32))
                tokens.append(np.zeros((8, 0), np.int32))
                errors.append(f"{type(r).__name__}: {r}")
            else:
                audio.append(r.audio)
                tokens.append(np.concatenate(r.tokens, axis=1))
                errors.append("")
        out = dict(batch)
        out["audio"] = _ragged(audio)
        out["tokens"] = _ragged(tokens)
        out["sample_rate"] = np.full(n, self.synth.ov.sample_rate, np.int64)
        out["error"] = np.array(errors, dtype=object)
        return out


def _ragged(arrays: list) -> np.ndarray:
    out = np.empty(len(arrays), dtype=object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out
