"""Continuous batching on a background thread, for servers: `submit` a request, get a `Job` at once.

    engine = ov.engine(max_batch="auto", max_wait_ms=20, max_queue=256)
    job = engine.submit({"text": "Hello there. How are you?"}, stream=True)
    for audio in job.chunks():           # float32 24 kHz, one piece per sentence as it finishes
        ...
    result = job.result()                # SynthesisResult (the pieces joined)
    engine.close()

The thread runs a BatchEngine. An idle engine starts at once with the requests that have arrived; later ones
join the running batch at the next step where the graph is rebuilt anyway (a chunk finished) or once they have
waited `max_wait_ms`, so a busy engine does not rebuild its graph for every arrival. Which requests share the
steps follows their deadlines (engine.schedule: a new stream's first piece is due `first_audio_ms` after its
arrival, later pieces when the audio before them has played, whole answers as a real-time stream of them
would play), within `max_batch` requests and `max_step_positions` packed positions a step. A finished or
cancelled request frees its slot at once. `submit` raises ValueError for an invalid request (before queueing it)
and EngineFull when `max_queue` requests are already waiting.

Streaming (`stream=True`) cuts the text by the streaming rule (text.streaming: sentences, the first kept short
so the first audio comes early), as `OmniVoice.stream` does; each sentence is decoded and post-processed on its own,
and without a voice prompt sentence 0's tokens and text voice the rest, as long form and `OmniVoice.stream`
do. Without streaming, `chunks()` yields the whole result once.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections import deque
from typing import Any, Iterator, Mapping, Optional, Union

import numpy as np

from ..pipeline import Cancelled, SynthesisResult
from ..text.streaming import stream_sentences
from . import offline
from .core import BatchEngine, Task
from .schedule import FIRST_AUDIO_S
from .request import SynthesisRequest, as_request

log = logging.getLogger("omnivoice")

__all__ = ["Engine", "EngineFull", "Job", "stream_sentences"]

_END = object()


RATE_WINDOW = 32  # finished requests that the measured rate of EngineFull.retry_after spans


class EngineFull(RuntimeError):
    """The engine's queue is full; try again after `retry_after` seconds."""

    def __init__(self, retry_after: float, queued: int) -> None:
        self.retry_after = float(retry_after)
        super().__init__(f"the engine's queue is full ({queued} requests waiting); retry in {retry_after:.1f} s")


class Job:
    """A submitted request: its audio as it comes (`chunks`), its `result`, `cancel`, and a Future."""

    def __init__(self, engine: "Engine", task: Task) -> None:
        self.engine, self.task = engine, task
        self.request: SynthesisRequest = task.request
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self._pieces: queue.Queue = queue.Queue()
        self.stream = task.stream

    @property
    def id(self):
        return self.request.id

    @property
    def done(self) -> bool:
        return self.future.done()

    def chunks(self) -> Iterator[np.ndarray]:
        """Float32 audio at 24 kHz: one piece per sentence as it finishes (stream=True), else the whole result
        once. Raises the request's error (Cancelled when cancelled) after the pieces that were made."""
        while True:
            piece = self._pieces.get()
            if piece is _END:
                break
            yield piece
        exc = self.future.exception()
        if exc is not None:
            raise exc

    def result(self, timeout: Optional[float] = None) -> SynthesisResult:
        """Wait for the result (concurrent.futures.TimeoutError after `timeout` seconds)."""
        return self.future.result(timeout)

    def cancel(self) -> None:
        """Stop the request at its next step and free its slot; result() then raises Cancelled."""
        self.task.cancel()
        self.engine._wake()

    # called by the engine thread
    def _audio(self, piece: np.ndarray) -> None:
        self._pieces.put(piece)

    def _finish(self) -> None:
        t = self.task
        if t.error is not None:
            self.future.set_exception(t.error)
        else:
            if not self.stream:
                self._pieces.put(t.result.audio)
            self.future.set_result(t.result)
        self._pieces.put(_END)


class Engine:
    """A BatchEngine on its own thread with a bounded queue: continuous batching for servers (thread-safe).

    `warm_up` (default: on GPUs) runs one small batch before the thread starts (engine.offline.warm_up), so
    that the first client does not pay the process's one-time GPU costs."""

    def __init__(self, ov, max_batch: int | str = "auto", max_wait_ms: float = 20.0, max_queue: int = 256,
                 warm_up: Optional[bool] = None, first_audio_ms: float = FIRST_AUDIO_S * 1000,
                 max_step_positions: Optional[int] = None) -> None:
        if not max_wait_ms >= 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {max_wait_ms!r}")
        if isinstance(max_queue, bool) or not isinstance(max_queue, int) or max_queue < 1:
            raise ValueError(f"max_queue must be a positive integer, got {max_queue!r}")
        self.ov = ov
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        if not first_audio_ms >= 0:
            raise ValueError(f"first_audio_ms must be >= 0, got {first_audio_ms!r}")
        self._core = BatchEngine(ov, max_batch=max_batch, deadlines=True, first_audio=first_audio_ms / 1000.0,
                                 max_step_positions=max_step_positions)
        if ov.runtime.is_gpu if warm_up is None else warm_up:
            offline.warm_up(ov, self._core)
        self._cv = threading.Condition()
        self._inbox: deque[Job] = deque()
        self._jobs: dict[int, Job] = {}
        self._closed = False
        # the engine's busy seconds (time in its steps) when each of the last RATE_WINDOW requests finished
        self._busy, self._finishes = 0.0, deque(maxlen=RATE_WINDOW)
        self._thread = threading.Thread(target=self._run, name="omnivoice-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------------------ clients
    def submit(self, request: Union[SynthesisRequest, Mapping[str, Any]], stream: bool = False,
               short_first: bool = True) -> Job:
        """Queue a request (a SynthesisRequest or a dict of its fields). Raises ValueError for an invalid one,
        EngineFull when the queue is full, RuntimeError after close(). A stream's long first sentence is cut at
        a clause for an earlier first audio unless `short_first` is False (text.streaming.stream_sentences)."""
        req = as_request(request)
        settings = req.settings()
        sentences = stream_sentences(req.text, short_first) if stream else None
        if sentences and req.instruct:
            # a stream words a voice-design instruct (English or Chinese) by its first sentence, as OmniVoice.stream
            settings = req.settings(wording=sentences[0])
        task = Task(req, settings, sentences=sentences)
        job = Job(self, task)
        task.on_audio = job._audio
        with self._cv:
            if self._closed:
                raise RuntimeError("the engine is closed")
            waiting = len(self._inbox) + len(self._core.waiting)
            if waiting >= self.max_queue:
                raise EngineFull(self._retry_after(waiting), waiting)
            self._inbox.append(job)
            self._cv.notify()
        return job

    def _retry_after(self, waiting: int) -> float:
        """Seconds until a full queue has room: one request more must finish and let a waiting one start, at the
        rate the last RATE_WINDOW requests finished (per second of the engine's busy time, so that an idle spell
        does not count); 1 s before two have finished. (The mean time of a request, its wait in the queue included,
        times the batches waiting said 488 s to a client while the whole backlog of 64 finished in 61 s.)"""
        done = self._finishes
        if len(done) < 2 or done[-1] <= done[0]:
            return 1.0
        rate = (len(done) - 1) / (done[-1] - done[0])
        return max(1.0, (waiting - self.max_queue + 1) / rate)

    @property
    def queue_depth(self) -> int:
        """Requests waiting to start (not those the schedule parked after they started)."""
        return len(self._inbox) + len(self._core.waiting)

    @property
    def active(self) -> int:
        """Requests being generated now."""
        return len(self._core.active)

    def counters(self) -> dict:
        """The engine thread's cumulative work so far: BatchEngine.stats (steps, graph switches, graphs reused,
        requests packed into the steps, summed) and `seconds`, its wall seconds by phase (BatchEngine.timings).
        A snapshot, readable from any thread."""
        core = self._core
        return {**core.stats, "seconds": dict(core.timings)}

    def close(self) -> None:
        """Stop the thread; requests not finished fail with Cancelled. Idempotent."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify()

    # ------------------------------------------------------------------------------------------ thread
    def _run(self) -> None:
        core = self._core
        try:
            while True:
                with self._cv:
                    while not self._closed and not self._inbox and not core.busy:
                        self._cv.wait()
                    if self._closed:
                        break
                    # An idle engine starts at once with what has arrived (waiting max_wait for company would
                    # add it to every lone request's first audio); later arrivals join as _should_admit says.
                    self._take_inbox()
                t0 = time.perf_counter()
                finished = core.step(admit=self._should_admit())
                self._busy += time.perf_counter() - t0
                self._deliver(finished)
        except BaseException as e:  # an engine failure fails every request rather than hanging its clients
            log.exception("engine thread failed")
            with self._cv:
                self._closed = True
                self._take_inbox()
            for job in list(self._jobs.values()):
                job.task.error = job.task.error or RuntimeError(f"engine failed: {type(e).__name__}: {e}")
        finally:
            with self._cv:
                self._closed = True
                self._take_inbox()
            core.close()
            self._deliver(core.step(admit=False))
            for job in list(self._jobs.values()):
                if not job.done:
                    job.task.error = job.task.error or Cancelled("engine closed")
                    self._deliver([job.task])

    def _take_inbox(self) -> None:
        while self._inbox:
            job = self._inbox.popleft()
            self._jobs[id(job.task)] = job
            self._core.add(job.task)

    def _should_admit(self) -> bool:
        core = self._core
        if not core.pending:
            return False
        if not core.active or core.composition_changed:
            return True  # nothing running, or the graph is rebuilt anyway
        # a parked task comes back when a unit ends (the composition changes); a new one within max_wait
        waiting = core.waiting
        return bool(waiting) and time.perf_counter() - min(t.t_added for t in waiting) >= self.max_wait

    def _deliver(self, finished: list[Task]) -> None:
        for t in finished:
            job = self._jobs.pop(id(t), None)
            if job is None or job.done:
                continue
            if t.result is not None:
                self._finishes.append(self._busy)
            job._finish()
