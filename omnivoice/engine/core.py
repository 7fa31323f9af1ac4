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

On a GPU, from PIPELINE_MIN_REQUESTS on (past DEVICE_MAX_REQUESTS where the device makes the MaskGIT choices), the
requests form two groups with a graph each, launched without waiting
(ggml's async compute): while one group's graph runs on the GPU, this thread makes the other group's MaskGIT
choices (BatchEngine(pipeline=...)).

Which requests share the steps is the schedule's choice (engine.schedule): arrival order, or with
`deadlines=True` (the server's engine) the earliest deadlines first, a request that loses its place parked with
its state and resumed later. Requests finish independently and free their slot; a long-form request
contributes one chunk at a time, its chunks in order (chunk 0's tokens voice the later ones in auto and design modes, and one generator runs
through all chunks, as in `synthesize`). The graph is rebuilt only when the set of packed chunks changes.
Finished units are decoded together (codec decode_iter), each request post-processed as soon as its audio is back
(on a GPU, while the codec's next graph runs), and clone references of requests admitted together are encoded
together.

Every synthesis goes through here: `OmniVoice.synthesize`, `stream`, `Speaker`, `dub` and `generate_tokens` run
their request as a batch of one on the caller's thread (engine.solo), `synthesize_batch` and the batch CLI as an
offline batch (engine.offline), `ov.engine()` and the server on a background thread (engine.service).
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import numpy as np

from ..generate.batch import draw_position_noise, run_on_device, step_many
from ..generate.maskgit import MaskGitState
from ..codec.voice import VoicePrompt
from ..config import current
from ..generate.philox import CudaPhiloxGenerator
from ..pipeline import CancelCallback, Cancelled, ProgressCallback, SynthesisResult, chunk_at, make_rng
from ..settings import Settings
from .memory import Limits, is_count, resolve_limits
from .request import SynthesisRequest
from .schedule import FIRST_AUDIO_S, select, select_arrival, unit_deadline
from .voices import VoiceCache

log = logging.getLogger("omnivoice")

__all__ = ["BatchEngine", "Task", "step0_logits"]


class Task:
    """One request in flight: its settings, voice, generator, chunks done so far and current MaskGIT state.

    With `sentences` (streaming) the text is spoken sentence by sentence, each one decoded and post-processed
    on its own and handed to `on_audio` as soon as it is done; without a voice prompt, sentence 0's tokens and
    text voice the rest (as `OmniVoice.stream` does). Otherwise the text is planned as `synthesize` plans it
    (long form: chunks) and decoded once at the end.

    `rng`: the generator to draw from (default: a new one from the settings' seed; a Speaker threads one through
    its calls). `progress(done, total)` is called after each MaskGIT step (steps a short chunk skips counted at
    its end); `cancel()` is polled before each step (on the device path before and after each run of steps),
    True failing the task with Cancelled. `dump`: a folder for
    prompt_ids.npy and logits0.npy (chunk 0's prompt and step-0 conditional logits) and tokens_N.npy. Without
    `decode` the result holds the tokens only (empty audio).
    """

    def __init__(self, request: SynthesisRequest, settings: Settings, index: int = 0,
                 sentences: Optional[list[str]] = None,
                 on_audio: Optional[Callable[[np.ndarray], None]] = None, *,
                 rng: Optional[CudaPhiloxGenerator] = None, progress: Optional[ProgressCallback] = None,
                 cancel: Optional[CancelCallback] = None, dump: Optional[Path] = None, decode: bool = True) -> None:
        self.request, self.settings, self.index = request, settings, index
        self.sentences = sentences
        self.on_audio = on_audio
        self.progress, self.should_cancel, self.dump, self.decode = progress, cancel, dump, decode
        self.voice: Optional[VoicePrompt] = request.voice   # the user's voice; set by the engine for ref_audio
        self.spoken_voice: Optional[VoicePrompt] = None     # streaming without a voice: sentence 0's
        self.rng = rng if rng is not None else make_rng(settings.seed)
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
        self.cancel_error: Optional[BaseException] = None  # what the cancel callback raised
        self.t_added = time.perf_counter()
        self.t_started: Optional[float] = None    # first admitted (a task parked since keeps it)
        # the schedule (engine.schedule): arrival order, the current unit's deadline and packed positions, and
        # what the deadlines of later units count from
        self.seq = 0
        self.deadline = float("inf")
        self.audio_before = 0.0                    # seconds of audio of the units done
        self.t_first_done: Optional[float] = None  # when unit 0's tokens were done
        self.t_generated: Optional[float] = None  # the last chunk's tokens done

    @property
    def stream(self) -> bool:
        return self.sentences is not None

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None

    @property
    def units(self) -> int:
        """Chunks (or sentences) in all; 0 until the text is planned."""
        return len(self.sentences) if self.stream else len(self.plans or ())

    @property
    def needs_voice(self) -> bool:
        return self.voice is None and self.request.ref_audio is not None

    def cancel(self) -> None:
        """Ask the engine to drop this task at its next step (its error becomes Cancelled)."""
        self.cancelled = True


# A unit to decode: its task, its code sequences (a chunk each, or a sentence) and the voice that post-processes it.
_Decode = tuple[Task, list[np.ndarray], Optional[VoicePrompt]]

# On a GPU where the device cannot make the MaskGIT choices (sampled classes, a build without patch 0024), the active
# requests form two groups with a packed graph each once at least this many run: one group's graph runs while the
# host makes the other group's choices. With one graph, the host's choices for many requests came after every graph
# run, the GPU idle meanwhile (about a third of the wall time at 64 requests). Below this count two graphs of half
# the width cost more GPU time than the host work they hide: a packed step's time grows slower than its requests at
# small counts (tools/lm_step_time.py --batch; BENCHMARKS.md).
PIPELINE_MIN_REQUESTS = 8

# A group of at most this many greedy tasks runs its steps on the device where the LM can (_on_device): each step the
# packed graph's run, then each task's choice, one kernel of one thread block, with no host work between the steps;
# past it the host steps them in two pipelined groups. On an H100, 64 against 7 (pipelined from 8), the server's
# closed loop of streamed one-sentence requests: 139 against 124 audio s/s at 32 clients, 155 against 131 at 64,
# first audio p50 885 against 1012 ms and 1709 against 2045 ms, and a seventh as many graph switches; conversational
# clients the same within noise (BENCHMARKS.md, "Device runs of up to 64 requests").
DEVICE_MAX_REQUESTS = 64


class _Group:
    """A share of the active tasks with its own packed graph, and its last graph run not yet collected: the
    tasks it ran for and its outputs, or None while the run is still on the device (launched, not waited for)."""

    def __init__(self) -> None:
        self.session = None
        self.key: Optional[tuple] = None
        self.device = False  # the session runs its tasks' steps on the device (BatchEngine._on_device)
        self.inflight: Optional[tuple[list[Task], Optional[list[dict]]]] = None

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        self.session, self.key, self.device = None, None, False


class BatchEngine:
    """Runs many Tasks on one loaded `OmniVoice`, one packed LM graph per MaskGIT step (not thread-safe: one
    thread drives it; omnivoice.engine.Engine runs it on a background thread).

    `pipeline` (default: where the runtime waits for each graph's run alone, CUDA; OMNIVOICE_PIPELINE=0/1
    overrides) splits the active requests into two groups whose graph runs alternate with the host's work on
    the other group (each run launched without waiting; the host waits for a group's run only when it needs its
    outputs); without it each step runs one graph for all and then the host's work. A request's tokens do not
    depend on it (each request has its own state and generator)."""

    def __init__(self, ov, max_batch: int | str = "auto", max_positions: Optional[int] = None,
                 pipeline: Optional[bool] = None, deadlines: bool = False, first_audio: float = FIRST_AUDIO_S,
                 max_step_positions: Optional[int] = None, clock: Callable[[], float] = time.perf_counter,
                 device_requests: Optional[int] = None) -> None:
        if not first_audio >= 0:
            raise ValueError(f"first_audio must be >= 0 seconds, got {first_audio!r}")
        if max_step_positions is not None and not is_count(max_step_positions):
            raise ValueError(f"max_step_positions must be a positive integer or None, got {max_step_positions!r}")
        self.ov = ov
        self.pipeline, self.lm, self.codec = ov.pipeline, ov.lm, ov.codec
        self.limits: Limits = resolve_limits(ov, max_batch, max_positions)
        # the schedule (engine.schedule): by deadlines (a server's engine) or by arrival (offline batches, a
        # request alone); a new stream's first-audio deadline (seconds), the step cap (packed positions a step
        # may hold; None: the memory budget's), and the clock of the deadlines (Task.t_added's: perf_counter)
        self.deadlines = bool(deadlines)
        self.first_audio, self.max_step_positions, self.clock = float(first_audio), max_step_positions, clock
        self._seq = 0
        self.pending: deque[Task] = deque()  # waiting to start, and parked (started, then put back by the schedule)
        self.active: list[Task] = []
        self.voices = VoiceCache(ov)
        if pipeline is None:
            pipeline = current().pipeline
            if pipeline is None:
                pipeline = self.lm.runtime.waits_per_graph
        self.pipelined = bool(pipeline)
        # the device's MaskGIT (CUDA with patch 0024) for groups of greedy tasks (_on_device); OmniVoice(device_maskgit=
        # False) or OMNIVOICE_DEVICE_MASKGIT=0 switches it off in the LM
        self.device_maskgit = self.lm.device_maskgit
        # how many tasks a device run takes at most (OMNIVOICE_DEVICE_REQUESTS); past that the host steps them in
        # two pipelined groups
        if device_requests is None:
            device_requests = current().device_requests or DEVICE_MAX_REQUESTS
        if not is_count(device_requests):
            raise ValueError(f"device_requests must be a positive integer, got {device_requests!r}")
        self.device_requests = int(device_requests)
        self._groups = [_Group() for _ in range(2 if self.pipelined else 1)]
        self._member: dict[int, int] = {}   # id(task) -> group index
        self._decodes: list[_Decode] = []
        self._finished: list[Task] = []
        # steps: MaskGIT steps run (packed graph runs collected, and steps run on the device); graphs: graph
        # switches (the set of packed chunks changed), of which graphs_reused took a graph a closed session of the
        # same shape left (no build: LanguageModel.max_graphs); packed_requests: the requests of every step,
        # summed; device_runs: runs of steps on the device (_on_device).
        self.stats = {"steps": 0, "graphs": 0, "graphs_reused": 0, "packed_requests": 0, "device_runs": 0}
        # Wall seconds by phase (what a profile of the engine needs first: device-bound or host-bound):
        # admit (voices, plans, prompts), graph (building packed graphs), the LM steps' ids, graph runs (launch
        # and wait; pipelined, a wait includes the other group's run queued before) and read-backs, wait (time
        # spent waiting for a graph run: device-bound time), maskgit (the host's choices), decode (codec and
        # post-processing).
        self.timings = dict.fromkeys(("admit", "graph", "lm_ids", "lm_run", "lm_read", "wait", "maskgit",
                                      "decode"), 0.0)
        # The model's graphs and buffers serve one caller at a time: graph runs, builds, encodes and decodes
        # hold the OmniVoice's lock, so synthesize() or create_voice() from another thread runs between them.
        self._model_lock = getattr(ov, "_lock", None) or contextlib.nullcontext()

    # ------------------------------------------------------------------------------------------ queue
    def add(self, task: Task) -> None:
        """Queue a task; it starts when the schedule (engine.schedule) gives it a place: a slot and room in the
        packed sequence, by the deadline of its first unit."""
        task.seq, self._seq = self._seq, self._seq + 1
        if task.state is None and task.unit == 0:  # until it is planned: its first unit's deadline, as a stream's
            task.deadline = task.t_added + self.first_audio
        self.pending.append(task)

    @property
    def waiting(self) -> list[Task]:
        """The pending tasks that never started (not those the schedule parked)."""
        return [t for t in self.pending if t.t_started is None]

    @property
    def step_positions(self) -> Optional[int]:
        """The packed positions a step may hold: the step cap, within the memory budget (None: no bound)."""
        caps = [c for c in (self.limits.max_positions, self.max_step_positions) if c is not None]
        return min(caps) if caps else None

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.active or self._decodes or any(g.inflight for g in self._groups))

    @property
    def composition_changed(self) -> bool:
        """Whether the next step needs a new graph anyway (a chunk finished or was dropped)."""
        return any(g.key != (self._group_key(i) or None) for i, g in enumerate(self._groups))

    def _group_tasks(self, i: int) -> list[Task]:
        return [t for t in self.active if self._member.get(id(t)) == i]

    def _group_key(self, i: int) -> tuple:
        return tuple((id(t), t.serial) for t in self._group_tasks(i))

    # ------------------------------------------------------------------------------------------ stepping
    def step(self, admit: bool = True) -> list[Task]:
        """One round: drop cancelled tasks, admit pending ones (if `admit`), one MaskGIT step for every active
        chunk, decode what finished. Returns the tasks that finished (result or error) in this round.

        Pipelined, a round collects each group's graph run launched in the round before (applying its choices)
        and launches the group's next one, so the graphs keep running between rounds and calls."""
        self._drop_cancelled()
        if admit and self.pending:
            t0 = time.perf_counter()
            self._admit()
            self.timings["admit"] += time.perf_counter() - t0
        for i, g in enumerate(self._groups):
            if g.inflight is not None:
                self._collect(g)
            self._launch(i, g)
        for g in self._groups:  # runs already waited for (a lone group's): their choices now
            if g.inflight is not None and g.inflight[1] is not None:
                self._collect(g)
        if self._decodes:
            t0 = time.perf_counter()
            with self._model_lock:
                self._flush_decodes()
            self.timings["decode"] += time.perf_counter() - t0
        done, self._finished = self._finished, []
        return done

    def _drop_cancelled(self) -> None:
        for t in [t for t in self.pending if self._cancelled(t)]:
            self.pending.remove(t)
            self._fail(t, t.cancel_error or Cancelled("synthesis cancelled"))
        for t in [t for t in self.active if self._cancelled(t)]:
            self._fail(t, t.cancel_error or Cancelled("synthesis cancelled"))

    @staticmethod
    def _cancelled(t: Task) -> bool:
        """Whether the task is to stop: cancel() was called or its cancel callback says so (a callback that raises
        stops it with that error)."""
        if not t.cancelled and t.should_cancel is not None:
            try:
                t.cancelled = bool(t.should_cancel())
            except Exception as e:
                t.cancelled, t.cancel_error = True, e
        return t.cancelled

    def _admit(self) -> None:
        """Give the next steps to the tasks whose units are due first (engine.schedule.select): start waiting
        tasks, and park running ones that lost their place (their state kept, back in `pending`)."""
        lim = self.limits
        if not self.pending or (not self.deadlines and len(self.active) >= lim.max_requests):
            return  # (in arrival order what runs keeps running)
        # the candidates: as many pending tasks as a step may hold, in deadline order (arrival order offline). A
        # task not planned yet has a provisional deadline that its plan only moves later (its arrival + the first-
        # audio deadline), so it is planned when it comes out first, then put back in its place. Clone references
        # of the tasks about to start are encoded together.
        key = (lambda t: (t.deadline, t.seq)) if self.deadlines else (lambda t: (0.0, t.seq))
        heap = [(key(t), t.seq, t) for t in self.pending]
        heapq.heapify(heap)
        candidates: list[Task] = []
        while heap and len(candidates) < lim.max_requests:
            _, _, t = heapq.heappop(heap)
            if t.finished:
                continue
            if t.state is None:
                if t.needs_voice:
                    self._encode_voices([t] + [u for _, _, u in heapq.nsmallest(lim.max_requests, heap)
                                               if u.needs_voice and u.state is None])
                    if t.finished:
                        continue
                try:
                    self._start_unit(t)  # planned: its positions and its unit's deadline known
                except Exception as e:  # a plan or prompt that cannot be built fails its own request only
                    self.pending.remove(t)
                    self._fail(t, e)
                    continue
                heapq.heappush(heap, (key(t), t.seq, t))
                continue
            candidates.append(t)
        chosen = self._select(candidates)
        if any(t not in chosen for t in self.active) and any(g.inflight for g in self._groups):
            # a task to park may have a graph run in flight: collect every run first (its step applied), so that
            # a parked task holds a complete state; then choose again, as units may have ended meanwhile
            for g in self._groups:
                if g.inflight is not None:
                    self._collect(g)
            chosen = self._select([t for t in candidates if not t.finished and t in self.pending])
        ids = {id(t) for t in chosen}
        for t in [t for t in self.active if id(t) not in ids]:
            self.active.remove(t)
            self._member.pop(id(t), None)
            self.pending.append(t)
        admitted = [t for t in chosen if t not in self.active]
        now = time.perf_counter()
        for t in admitted:
            self.pending.remove(t)
            if t.t_started is None:
                t.t_started = now
            self.active.append(t)
        self._assign(admitted)

    def _encode_voices(self, tasks: list[Task]) -> None:
        """The clone references of `tasks`, encoded together; a task whose reference fails fails."""
        # The lock only around the device's part: taking it waits for a pipelined graph run to end.
        with self._model_lock:
            outcomes = self.voices.get_many([t.request for t in tasks])
        for t, outcome in zip(tasks, outcomes):
            if isinstance(outcome, BaseException):
                self.pending.remove(t)
                self._fail(t, outcome)
            else:
                t.voice = outcome

    def _select(self, candidates: list[Task]) -> list[Task]:
        how = select if self.deadlines else select_arrival
        return how(self.active, candidates, self.limits.max_requests, self.step_positions)

    def _assign(self, tasks: list[Task]) -> None:
        """Put newly admitted tasks into groups: all into group 0 while few run, else each into the group with
        fewer packed positions."""
        loads = [sum(t.positions for t in self._group_tasks(i)) for i in range(len(self._groups))]
        # (where the device makes the choices, one group runs up to device_requests tasks on it)
        least = max(PIPELINE_MIN_REQUESTS, self.device_requests + 1) if self.device_maskgit else PIPELINE_MIN_REQUESTS
        split = len(self._groups) > 1 and len(self.active) >= least
        for t in tasks:
            i = int(np.argmin(loads)) if split else 0
            self._member[id(t)] = i
            loads[i] += t.positions

    def _start_unit(self, t: Task) -> None:
        """Plan the task's next chunk (or sentence), build its prompt and a fresh MaskGIT state."""
        p = self.pipeline
        if t.stream:
            sentence = t.sentences[t.unit]
            voice = t.voice or t.spoken_voice
            settings = replace(t.settings, chunk_duration=0.0)  # a sentence is never chunked
            chunk = chunk_at(p.plan(sentence, settings, voice), 0, [], voice)
        else:
            if t.plans is None:
                t.plans = p.plan(t.request.text, t.settings, t.voice)
            chunk = chunk_at(t.plans, t.unit, t.tokens, t.voice)
        prompt, t.lm_prompt = p.prompt(chunk, t.settings)
        if t.dump is not None and t.unit == 0 and not t.stream:
            self._dump_first(t, prompt)
        cfg = self.lm.cfg
        t.state = MaskGitState(chunk.n_target, t.settings.sampler, t.rng, cfg.n_codebook, cfg.audio_mask_id)
        t.positions = int(t.lm_prompt.input_ids.shape[1]) + int(chunk.n_target)
        t.deadline = unit_deadline(t.stream, t.unit, t.t_added, t.t_first_done, t.audio_before,
                                   int(chunk.n_target) / p.frame_rate, self.first_audio)
        t.serial += 1

    def _launch(self, i: int, g: _Group) -> None:
        """Start the group's next graph run (its graph rebuilt first if its chunks changed): left running when
        pipelined and another group has tasks (collected next round), else run here to its end."""
        tasks = self._group_tasks(i)
        if not tasks:
            if g.session is not None:
                with self._model_lock:
                    g.close()
            return
        key, device = self._group_key(i), self._on_device(i, tasks)
        if key != g.key or device != g.device:
            t0 = time.perf_counter()
            sampler = [t.settings.sampler for t in tasks]
            try:
                with self._model_lock:
                    g.close()
                    g.session = self.lm.session([t.lm_prompt for t in tasks], [s.guidance_scale for s in sampler],
                                                [s.class_temperature == 0 for s in sampler], device_steps=device)
            except MemoryError as e:
                self._shrink(tasks, e)
                return
            g.key, g.device = key, device
            self.stats["graphs"] += 1
            self.stats["graphs_reused"] += bool(g.session.reused)
            self.timings["graph"] += time.perf_counter() - t0
        if device and self._run_on_device(g, tasks):
            return
        tokens = [t.state.tokens for t in tasks]
        if self.pipelined and any(self._group_tasks(j) for j in range(len(self._groups)) if j != i):
            # Queued behind the other group's run; this thread goes on to that group's choices. (A worker
            # thread running each group's graph to its end took turns with this one at the GIL for the
            # read-backs and the choices, and the host's share grew by half.)
            with self._model_lock:
                g.session.launch(tokens)
            g.inflight = (tasks, None)
        else:
            g.inflight = (tasks, self._run(g.session, tokens, [t.state for t in tasks]))

    def _on_device(self, i: int, tasks: list[Task]) -> bool:
        """Whether group i runs its steps on the device (the fast path, where the LM has it: CUDA with patch 0024):
        every task choosing its classes greedily, at most device_requests of them, while no other group has
        work. The steps the tasks have left in common (all of a lone task's chunk) are then queued back to back,
        each step the packed graph's run and each task's choice on the device, and the host waits once
        (generate.batch.run_on_device); the tokens are the host loop's bit for bit (tests/models/
        test_lm_device_maskgit.py). No host work sits between the steps, so they run at the GPU's pace
        (BENCHMARKS.md, "One LM step and one chunk").

        What it costs: a request that arrives meanwhile waits for the run's end (for a lone task its chunk's end,
        the time of a short request's whole MaskGIT loop) instead of joining at the next step; the run ends where
        the first of its tasks finishes its chunk, where the graph is rebuilt anyway, and the engine admits it
        there (composition_changed). A run is not cut shorter: the host would wait between the pieces, which is
        what the device path saves."""
        if not self.device_maskgit or not 0 < len(tasks) <= self.device_requests:
            return False
        if not all(t.state.greedy for t in tasks):
            return False
        return not any(self._group_tasks(j) for j in range(len(self._groups)) if j != i)

    def _run_on_device(self, g: _Group, tasks: list[Task]) -> bool:
        """Run the steps the group's tasks have left in common on the device; False where the session declines
        (the host steps). Each step is counted (and reported to the tasks' progress callbacks) once the tokens are
        back; a task whose chunk failed (NaN scores, the mask id or a -1 chosen) fails alone."""
        t0 = time.perf_counter()
        try:
            with self._model_lock:
                outcome = run_on_device([t.state for t in tasks], g.session)
        except Exception as e:  # the device refused the run: its tasks fail
            for t in tasks:
                self._fail(t, e)
            return True
        if outcome is None:
            return False
        self.timings["lm_run"] += time.perf_counter() - t0
        steps = max((len(r) for r in outcome if not isinstance(r, Exception)), default=0)
        self.stats["steps"] += steps
        self.stats["packed_requests"] += steps * len(tasks)
        self.stats["device_runs"] += 1
        for t, r in zip(tasks, outcome):
            if isinstance(r, Exception):
                self._fail(t, r)
            elif self._cancelled(t):  # cancelled during the run: polled again before its tokens count
                self._fail(t, t.cancel_error or Cancelled("synthesis cancelled"))
            else:
                self._stepped(t, len(r))
        return True

    def _run(self, session, tokens: list[np.ndarray], states: Optional[list[MaskGitState]] = None) -> list[dict]:
        """One graph run; with `states`, their position noise is drawn meanwhile: a GPU's run is queued and the
        host is free, and a lone streamed request's first audio comes sooner by the noise's time."""
        with self._model_lock:
            session.launch(tokens)
            try:
                if states:
                    # The exact noise too where a GPU runs meanwhile (the step then need not evaluate it after
                    # the run); the CPU computed at launch, so there the step evaluates only what it needs.
                    draw_position_noise(states, exact=self.lm.runtime.is_gpu)
            finally:
                out = session.finish()
        self._count_run(session)
        return out

    def _count_run(self, session) -> None:
        """Add the session's last run to the timings: preparing the ids, the graph run, the read-back."""
        for name, dt in zip(("lm_ids", "lm_run", "lm_read"), session.times):
            self.timings[name] += dt

    def _collect(self, g: _Group) -> None:
        """Wait for the group's graph run (if still on the device) and apply each task's choices (tasks
        dropped meanwhile skipped)."""
        tasks, outputs = g.inflight
        g.inflight = None  # a Ctrl-C while waiting leaves the run to close(), whose graph close waits for it
        t0 = time.perf_counter()
        if outputs is None:
            with self._model_lock:
                outputs = g.session.finish()
            self._count_run(g.session)
        t1 = time.perf_counter()
        live = [(t, out) for t, out in zip(tasks, outputs) if not t.finished]
        choices = step_many([t.state for t, _ in live], [out for _, out in live])
        for (t, _), c in zip(live, choices):
            if isinstance(c, Exception):  # NaN scores or the like: this request fails, the others go on
                self._fail(t, c)
        self.stats["steps"] += 1
        self.stats["packed_requests"] += len(live)
        for t, _ in live:
            if t.finished:
                continue
            self._stepped(t, 1)
        self.timings["wait"] += t1 - t0
        self.timings["maskgit"] += time.perf_counter() - t1

    def _shrink(self, tasks: list[Task], error: MemoryError) -> None:
        """The packed graph did not fit: put the later half of the tasks back at the head of the queue (their
        MaskGIT states kept: nothing was applied) and lower the position budget to what stays. A request that
        does not fit alone fails with the MemoryError."""
        if not tasks:
            return
        if len(tasks) == 1:
            self._fail(tasks[0], error)
            return
        keep, back = tasks[:len(tasks) // 2], tasks[len(tasks) // 2:]
        for t in reversed(back):
            self.active.remove(t)
            self._member.pop(id(t), None)
            self.pending.appendleft(t)
        self.limits = replace(self.limits, max_positions=sum(t.positions for t in self.active))
        log.warning("batch of %d requests did not fit in memory; continuing with %d (at most %d positions)",
                    len(tasks), len(keep), self.limits.max_positions)

    def _stepped(self, t: Task, steps: int) -> None:
        """Count `steps` MaskGIT steps of the task's current chunk done (each reported to its progress callback),
        and move on when the chunk is done."""
        for _ in range(steps):
            t.steps_done += 1
            self._report(t)
        if not t.finished and t.state.done:
            self._unit_done(t)

    def _report(self, t: Task) -> None:
        """progress(done, total) of a task that asks for it; a callback that raises fails the task."""
        if t.progress is None or t.finished:
            return
        try:
            t.progress(t.steps_done, t.units * t.settings.sampler.num_step)
        except Exception as e:
            self._fail(t, e)

    def _dump_first(self, t: Task, prompt) -> None:
        """A dumping task's chunk 0: its prompt ids and the conditional logits of its step-0 forward."""
        t.dump.mkdir(parents=True, exist_ok=True)
        np.save(t.dump / "prompt_ids.npy", prompt.cond_ids.astype(np.int32))
        with self._model_lock:
            logits = step0_logits(self.lm, prompt, t.lm_prompt, t.settings.sampler.guidance_scale)
        np.save(t.dump / "logits0.npy", logits)

    def _unit_done(self, t: Task) -> None:
        tokens, t.state = t.state.tokens, None
        t.tokens.append(tokens)
        t.unit += 1
        t.audio_before += tokens.shape[1] / self.pipeline.frame_rate
        if t.unit == 1:
            t.t_first_done = self.clock()
        # steps a short chunk skips (nothing to unmask) still count toward the total
        if t.steps_done != t.unit * t.settings.sampler.num_step:
            t.steps_done = t.unit * t.settings.sampler.num_step
            self._report(t)
        if t.dump is not None and not t.stream:
            np.save(t.dump / f"tokens_{t.unit - 1}.npy", tokens.astype(np.int32))
        if t.finished:  # the progress callback failed it
            return
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
                if t.decode:
                    self._decodes.append((t, list(t.tokens), t.voice))
        if not more:
            t.t_generated = time.perf_counter()
            self.active.remove(t)
            self._member.pop(id(t), None)
            if not t.decode:  # tokens only
                self._succeed(t, np.zeros(0, np.float32), 0.0)
            return
        try:
            self._start_unit(t)
        except Exception as e:
            self._fail(t, e)

    # ------------------------------------------------------------------------------------------ audio
    def _flush_decodes(self) -> None:
        """Decode the finished units together and post-process each job as soon as its audio is back, so that on
        a GPU the post-processing overlaps the codec's next graph run. A task's decode time runs from the start
        of the flush to its audio being ready."""
        if not self._decodes:
            return
        jobs, self._decodes = self._decodes, []
        jobs = [j for j in jobs if not j[0].finished]
        if not jobs:
            return
        t0 = time.perf_counter()
        for (t, codes, voice), pieces in self._decoded(jobs):
            try:
                if isinstance(pieces, Exception):  # its own decode failed
                    raise pieces
                if pieces is None:  # the batch failed: decode each job alone, so only a bad one fails
                    pieces = self.codec.decode_batch(codes)
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

    def _decoded(self, jobs: list[_Decode]) -> Iterator[tuple[_Decode, Union[list[np.ndarray], Exception, None]]]:
        """Each job with its decoded code sequences as soon as the codec has them all (one batched decode_iter);
        if that decode fails, every job not yet given comes with None instead (to be decoded alone), a lone job
        with the error (its decode was alone: it fails, and the engine goes on)."""
        owner = [j for j, (_, codes, _) in enumerate(jobs) for _ in codes]  # the job of each sequence
        pieces: list[list[np.ndarray]] = [[] for _ in jobs]
        given = 0  # sequences come back in order: jobs[:given] have been given
        try:
            for i, audio in self.codec.decode_iter([c for _, codes, _ in jobs for c in codes]):
                j = owner[i]
                pieces[j].append(audio)
                if len(pieces[j]) == len(jobs[j][1]):
                    given = j + 1
                    yield jobs[j], pieces[j]
        except Exception as e:
            for job in jobs[given:]:
                yield job, e if len(jobs) == 1 else None

    def _succeed(self, t: Task, audio: np.ndarray, decode_s: float) -> None:
        now = time.perf_counter()
        timings = {"queued": (t.t_started or now) - t.t_added, "total": now - t.t_added, "decode": decode_s,
                   "generate": (t.t_generated or now) - (t.t_started or now)}
        t.result = SynthesisResult(audio, self.pipeline.sample_rate, t.tokens, t.texts, timings)
        self._finished.append(t)

    def _fail(self, t: Task, error: BaseException) -> None:
        if t.finished:
            return
        t.error = error
        t.state = None
        if t in self.active:
            self.active.remove(t)
            self._member.pop(id(t), None)
        self._finished.append(t)

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Wait for graph runs in flight, free the graphs; tasks still queued or running fail with Cancelled."""
        for g in self._groups:
            g.inflight = None
            with self._model_lock:
                g.close()  # waits for a run still on the device before freeing its graph
        for t in list(self.pending) + list(self.active):
            self._fail(t, Cancelled("engine closed"))
        self.pending.clear()
        self.active.clear()

    def __enter__(self) -> "BatchEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def step0_logits(lm, prompt, lm_prompt, guidance_scale: float) -> np.ndarray:
    """One full LM forward of a chunk's step-0 prompt (every target masked; `prompt`: text.prompt.Prompt, and
    `lm_prompt` its runners.lm.LMInput): the conditional row's raw audio logits, float32 [C, T, V]. A debugging
    aid (dumps, OmniVoice.llm_logits), not MaskGIT."""
    with lm.session([lm_prompt], guidance_scale, greedy=True, with_logits=True) as s:
        return s.step([prompt.uncond_ids])[0]["cond_logits"].astype(np.float32)
