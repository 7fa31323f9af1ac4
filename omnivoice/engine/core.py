"""The batched engine: many requests in flight, one LM graph per MaskGIT step for all of them.

Each request (a `Task`) keeps what makes it independent of its batch mates: its own MaskGIT state and its own
Philox generator (generate.batch), its own chunk plan, voice and settings. What they share is the LM pass: the
current chunk of every active request contributes its conditional and unconditional rows to one packed sequence
(runners.lm.ChunkSession, attention per segment), so a step costs one graph run for the whole batch. On the CPU
every op of that graph works per column or per segment, so a request's logits, and thus its tokens, are bit for
bit those of its solo run (tests/engine).

    engine = BatchEngine(ov, max_batch="auto")
    engine.add(Task(request, settings))
    while engine.busy:
        for task in engine.step():        # finished (task.result) or failed (task.error)
            ...

Requests finish independently and free their slot; a long-form request contributes one chunk at a time, its
chunks in order (chunk 0's tokens voice the later ones in auto and design modes, and one generator runs
through all chunks, as in `synthesize`). The graph is rebuilt only when the set of packed chunks changes.
Finished units are decoded together (codec decode_batch), and clone references of requests admitted together
are encoded together.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from dataclasses import replace
from typing import Callable, Optional

import numpy as np

from ..generate.batch import step_many
from ..generate.maskgit import MaskGitState
from ..codec.voice import VoicePrompt
from ..pipeline import Cancelled, Settings, SynthesisResult, _chunk, make_rng
from .memory import Limits, resolve_limits
from .request import SynthesisRequest
from .voices import VoiceCache

log = logging.getLogger("omnivoice")

__all__ = ["BatchEngine", "Task"]


class Task:
    """One request in flight: its settings, voice, generator, chunks done so far and current MaskGIT state.

    With `sentences` (streaming) the text is spoken sentence by sentence, each one decoded and post-processed
    on its own and handed to `on_audio` as soon as it is done; without a voice prompt, sentence 0's tokens and
    text voice the rest (as `OmniVoice.stream` does). Otherwise the text is planned as `synthesize` plans it
    (long form: chunks) and decoded once at the end.
    """

    def __init__(self, request: SynthesisRequest, settings: Settings, index: int = 0,
                 sentences: Optional[list[str]] = None,
                 on_audio: Optional[Callable[[np.ndarray], None]] = None) -> None:
        self.request, self.settings, self.index = request, settings, index
        self.sentences = sentences
        self.on_audio = on_audio
        self.voice: Optional[VoicePrompt] = request.voice   # the user's voice; set by the engine for ref_audio
        self.spoken_voice: Optional[VoicePrompt] = None     # streaming without a voice: sentence 0's
        self.rng = make_rng(settings.seed)
        self.tokens: list[np.ndarray] = []
        self.texts: list[str] = []
        self.pieces: list[np.ndarray] = []
        self.plans = None
        self.unit = 0                      # index of the chunk (or sentence) being generated
        self.state: Optional[MaskGitState] = None
        self.lm_prompt = None
        self.positions = 0                 # packed LM positions of the current chunk (cond + uncond)
        self.serial = 0                    # bumps with every new chunk: the graph's key
        self.steps_done = 0
        self.result: Optional[SynthesisResult] = None
        self.error: Optional[BaseException] = None
        self.cancelled = False
        self.t_added = time.perf_counter()
        self.t_started: Optional[float] = None

    @property
    def stream(self) -> bool:
        return self.sentences is not None

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None

    @property
    def needs_voice(self) -> bool:
        return self.voice is None and self.request.ref_audio is not None

    def cancel(self) -> None:
        """Ask the engine to drop this task at its next step (its error becomes Cancelled)."""
        self.cancelled = True


class BatchEngine:
    """Runs many Tasks on one loaded `OmniVoice`, one packed LM graph per MaskGIT step (not thread-safe: one
    thread drives it; omnivoice.engine.Engine runs it on a background thread)."""

    def __init__(self, ov, max_batch: int | str = "auto", max_positions: Optional[int] = None) -> None:
        self.ov = ov
        self.pipeline, self.lm, self.codec = ov.pipeline, ov.lm, ov.codec
        self.limits: Limits = resolve_limits(ov, max_batch, max_positions)
        self.pending: deque[Task] = deque()
        self.active: list[Task] = []
        self.voices = VoiceCache(ov)
        self._session = None
        self._key: Optional[tuple] = None
        self._decodes: list[tuple[Task, list[np.ndarray], Optional[VoicePrompt]]] = []
        self._finished: list[Task] = []
        self.stats = {"steps": 0, "graphs": 0, "packed_requests": 0}
        # The model's graphs and buffers serve one caller at a time: each round holds the OmniVoice's lock, so
        # synthesize() or create_voice() from another thread runs between two steps, not inside one.
        self._model_lock = getattr(ov, "_lock", None) or contextlib.nullcontext()

    # ------------------------------------------------------------------------------------------ queue
    def add(self, task: Task) -> None:
        """Queue a task; it starts when a slot and room in the packed sequence are free."""
        self.pending.append(task)

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.active or self._decodes)

    @property
    def composition_changed(self) -> bool:
        """Whether the next step needs a new graph anyway (a chunk finished or was dropped)."""
        return self._key != self._current_key()

    def _current_key(self) -> tuple:
        return tuple((id(t), t.serial) for t in self.active)

    # ------------------------------------------------------------------------------------------ stepping
    def step(self, admit: bool = True) -> list[Task]:
        """One round: drop cancelled tasks, admit pending ones (if `admit`), run one MaskGIT step for every
        active chunk, decode what finished. Returns the tasks that finished (result or error) in this round."""
        with self._model_lock:
            self._drop_cancelled()
            if admit:
                self._admit()
            if self.active:
                self._lm_step()
            self._flush_decodes()
        done, self._finished = self._finished, []
        return done

    def _drop_cancelled(self) -> None:
        for t in [t for t in self.pending if t.cancelled]:
            self.pending.remove(t)
            self._fail(t, Cancelled("synthesis cancelled"))
        for t in [t for t in self.active if t.cancelled]:
            self.active.remove(t)
            self._fail(t, Cancelled("synthesis cancelled"))

    def _admit(self) -> None:
        lim = self.limits
        free = lim.max_requests - len(self.active)
        if free <= 0 or not self.pending:
            return
        # Clone references of the tasks about to start are encoded together.
        window = [t for t in list(self.pending)[:free] if t.needs_voice]
        for t, outcome in zip(window, self.voices.get_many([t.request for t in window])):
            if isinstance(outcome, BaseException):
                self.pending.remove(t)
                self._fail(t, outcome)
            else:
                t.voice = outcome
        used = sum(t.positions for t in self.active)
        while self.pending and len(self.active) < lim.max_requests:
            t = self.pending[0]
            if t.needs_voice:
                break  # beyond this round's encode window: next round
            if t.state is None:
                try:
                    self._start_unit(t)
                except Exception as e:  # a plan or prompt that cannot be built fails its own request only
                    self.pending.popleft()
                    self._fail(t, e)
                    continue
            if lim.max_positions is not None and self.active and used + t.positions > lim.max_positions:
                break
            self.pending.popleft()
            t.t_started = time.perf_counter()
            self.active.append(t)
            used += t.positions

    def _start_unit(self, t: Task) -> None:
        """Plan the task's next chunk (or sentence), build its prompt and a fresh MaskGIT state."""
        p = self.pipeline
        if t.stream:
            sentence = t.sentences[t.unit]
            voice = t.voice or t.spoken_voice
            settings = replace(t.settings, chunk_duration=0.0)  # a sentence is never chunked (SentenceStream)
            chunk = _chunk(p.plan(sentence, settings, voice), 0, [], voice)
        else:
            if t.plans is None:
                t.plans = p.plan(t.request.text, t.settings, t.voice)
            chunk = _chunk(t.plans, t.unit, t.tokens, t.voice)
        _, t.lm_prompt = p._prompt(chunk, t.settings)
        cfg = self.lm.cfg
        t.state = MaskGitState(chunk.n_target, t.settings.sampler, t.rng, cfg.n_codebook, cfg.audio_mask_id)
        t.positions = int(t.lm_prompt.input_ids.shape[1]) + int(chunk.n_target)
        t.serial += 1

    def _lm_step(self) -> None:
        tasks = list(self.active)
        key = self._current_key()
        if key != self._key:
            self._close_session()
            sampler = [t.settings.sampler for t in tasks]
            try:
                self._session = self.lm.session([t.lm_prompt for t in tasks], [s.guidance_scale for s in sampler],
                                                [s.class_temperature == 0 for s in sampler])
            except MemoryError as e:
                self._shrink(tasks, e)
                return
            self._key = key
            self.stats["graphs"] += 1
        try:
            outputs = self._session.step([t.state.tokens for t in tasks])
        except MemoryError as e:
            self._close_session()
            self._shrink(tasks, e)
            return
        choices = step_many([t.state for t in tasks], outputs)
        for t, c in zip(tasks, choices):
            if isinstance(c, Exception):  # NaN scores or the like: this request fails, the others go on
                self._fail(t, c)
        self.stats["steps"] += 1
        self.stats["packed_requests"] += len(tasks)
        for t in tasks:
            if t.finished:
                continue
            t.steps_done += 1
            if t.state.done:
                self._unit_done(t)

    def _shrink(self, tasks: list[Task], error: MemoryError) -> None:
        """The packed graph did not fit: put the later half of the tasks back at the head of the queue (their
        MaskGIT states kept: nothing was applied) and lower the position budget to what stays. A request that
        does not fit alone fails with the MemoryError."""
        if len(tasks) == 1:
            self._fail(tasks[0], error)
            return
        keep, back = tasks[:len(tasks) // 2], tasks[len(tasks) // 2:]
        for t in reversed(back):
            self.active.remove(t)
            self.pending.appendleft(t)
        self.limits = replace(self.limits, max_positions=sum(t.positions for t in keep))
        log.warning("batch of %d requests did not fit in memory; continuing with %d (at most %d positions)",
                    len(tasks), len(keep), self.limits.max_positions)

    def _unit_done(self, t: Task) -> None:
        tokens, t.state = t.state.tokens, None
        t.tokens.append(tokens)
        t.unit += 1
        if t.stream:
            voice = t.voice or t.spoken_voice
            t.texts.append(t.sentences[t.unit - 1])
            self._decodes.append((t, [tokens], voice))
            if voice is None:
                t.spoken_voice = VoicePrompt(tokens, t.sentences[0], None)
            more = t.unit < len(t.sentences)
        else:
            more = t.unit < len(t.plans)
            if not more:
                t.texts = [p.text for p in t.plans]
                self._decodes.append((t, list(t.tokens), t.voice))
        if not more:
            self.active.remove(t)
            return
        try:
            self._start_unit(t)
        except Exception as e:
            self._fail(t, e)

    # ------------------------------------------------------------------------------------------ audio
    def _flush_decodes(self) -> None:
        if not self._decodes:
            return
        jobs, self._decodes = self._decodes, []
        jobs = [j for j in jobs if not j[0].finished]
        if not jobs:
            return
        t0 = time.perf_counter()
        try:
            audio = self.codec.decode_batch([c for _, codes, _ in jobs for c in codes])
        except Exception:
            if len(jobs) == 1:
                raise
            audio = None
        at = 0
        for t, codes, voice in jobs:
            try:
                if audio is None:  # the batch failed: decode each job alone, so only a bad one fails
                    pieces = self.codec.decode_batch(codes)
                else:
                    pieces, at = audio[at:at + len(codes)], at + len(codes)
                out = self.pipeline.finish(pieces, voice, t.settings).astype(np.float32, copy=False)
            except Exception as e:
                self._fail(t, e)
                continue
            if t.stream:
                t.pieces.append(out)
                if t.on_audio is not None:
                    t.on_audio(out)
                if t.unit >= len(t.sentences):
                    self._succeed(t, np.concatenate(t.pieces), time.perf_counter() - t0)
            else:
                self._succeed(t, out, time.perf_counter() - t0)

    def _succeed(self, t: Task, audio: np.ndarray, decode_s: float) -> None:
        now = time.perf_counter()
        timings = {"queued": (t.t_started or now) - t.t_added, "total": now - t.t_added, "decode": decode_s}
        t.result = SynthesisResult(audio, self.pipeline.sample_rate, t.tokens, t.texts, timings)
        self._finished.append(t)

    def _fail(self, t: Task, error: BaseException) -> None:
        if t.finished:
            return
        t.error = error
        t.state = None
        if t in self.active:
            self.active.remove(t)
        self._finished.append(t)

    # ------------------------------------------------------------------------------------------ lifetime
    def _close_session(self) -> None:
        if self._session is not None:
            self._session.close()
        self._session, self._key = None, None

    def close(self) -> None:
        """Free the graph; tasks still queued or running fail with Cancelled."""
        self._close_session()
        for t in list(self.pending) + list(self.active):
            self._fail(t, Cancelled("engine closed"))
        self.pending.clear()
        self.active.clear()

    def __enter__(self) -> "BatchEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
