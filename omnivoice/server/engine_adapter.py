"""The server's one door to the model: a stand-in for the batched engine until it lands.

TEMPORARY, AND THE ONE FILE TO CHANGE: the server codes against the engine interface of issue 15 (TEAM.md:
SynthesisRequest, engine.submit(request, stream) -> Job with chunks() / result() / cancel() / done / future,
EngineFull(retry_after), engine.queue_depth / active / close()). Until omnivoice.engine exists this module
implements that interface over OmniVoice.synthesize / stream with one worker thread: requests run one at a
time in arrival order (no LM steps are shared; max_batch and max_wait_ms are accepted and unused). Switching
to the engine replaces this file's body; nothing else in omnivoice/server/ imports the model.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import math
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Iterator, Optional, Union

import numpy as np

from ..codec.voice import VoicePrompt
from ..pipeline import SynthesisResult

__all__ = ["SynthesisRequest", "EngineFull", "Job", "SpeechBackend", "load_backend"]

AudioInput = Union[str, "os.PathLike[str]", tuple]


class EngineFull(RuntimeError):
    """The queue is full; try again in `retry_after` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"the synthesis queue is full; retry in {retry_after:.0f} s")
        self.retry_after = retry_after


@dataclass
class SynthesisRequest:
    """One synthesis, as the engine takes it (field names and defaults are OmniVoice.synthesize's)."""

    text: str
    language: Optional[str] = None
    instruct: Optional[str] = None
    ref_audio: Optional[AudioInput] = None
    ref_text: Optional[str] = None
    voice: Optional[VoicePrompt] = None
    duration: Optional[float] = None
    speed: float = 1.0
    num_step: int = 32
    guidance_scale: float = 2.0
    t_shift: float = 0.1
    layer_penalty_factor: float = 5.0
    position_temperature: float = 5.0
    class_temperature: float = 0.0
    seed: Optional[int] = None
    denoise: bool = True
    postprocess_output: bool = True
    preprocess_prompt: bool = True
    chunk_duration: float = 15.0
    chunk_threshold: float = 30.0
    id: Optional[str] = None

    @classmethod
    def from_dict(cls, d: dict) -> "SynthesisRequest":
        """Build from a mapping; an unknown key is a ValueError naming it."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown synthesis option(s): {', '.join(unknown)}")
        return cls(**d)

    def validate(self) -> None:
        """Check what can be checked without the model."""
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError("text is empty: nothing to synthesize")
        if not self.speed > 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")
        if self.duration is not None and not self.duration > 0:
            raise ValueError(f"duration must be > 0 seconds, got {self.duration}")
        if not (isinstance(self.num_step, int) and self.num_step >= 1):
            raise ValueError(f"num_step must be a positive integer, got {self.num_step!r}")
        if self.voice is not None and self.ref_audio is not None:
            raise ValueError("give either voice or ref_audio, not both")
        if self.ref_audio is not None and not (self.ref_text and str(self.ref_text).strip()):
            raise ValueError("ref_text (the transcript of the reference audio) is required for voice cloning")

    def options(self) -> dict:
        """The keyword arguments of OmniVoice.synthesize / stream besides the text."""
        d = dataclasses.asdict(self)
        d["voice"] = self.voice  # asdict would copy the VoicePrompt's arrays into a dict
        for k in ("text", "id"):
            d.pop(k)
        return d


_END = object()


class Job:
    """One submitted request: its future (SynthesisResult), its audio pieces, and a way to stop it."""

    def __init__(self, request: SynthesisRequest, stream: bool) -> None:
        self.request, self.stream = request, stream
        self.future: concurrent.futures.Future = concurrent.futures.Future()
        self._pieces: queue.Queue = queue.Queue()
        self._cancel = threading.Event()

    def chunks(self) -> Iterator[np.ndarray]:
        """Float32 24 kHz audio, one piece per finished sentence (stream=True) or the whole audio once.

        Raises what the job raised (Cancelled, concurrent.futures.CancelledError, ValueError, ...)."""
        while True:
            piece = self._pieces.get()
            if piece is _END:
                break
            yield piece
        self.future.result()

    def result(self, timeout: Optional[float] = None) -> SynthesisResult:
        return self.future.result(timeout)

    def cancel(self) -> None:
        """Stop the job: a queued one never runs, a running one stops before its next MaskGIT step."""
        self._cancel.set()
        if self.future.cancel():
            self._pieces.put(_END)

    @property
    def done(self) -> bool:
        return self.future.done()


class _SerialEngine:
    """One worker thread running jobs one after another, in arrival order."""

    def __init__(self, ov, max_queue: int) -> None:
        self.ov, self.max_queue = ov, max_queue
        self._queue: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self._running: Optional[Job] = None
        self._closed = False
        self._seconds_per_job = 1.0  # moving average, for Retry-After
        self._worker = threading.Thread(target=self._work, name="omnivoice-engine", daemon=True)
        self._worker.start()

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def active(self) -> int:
        return int(self._running is not None)

    def submit(self, request: SynthesisRequest, stream: bool = False) -> Job:
        request.validate()
        opts = request.options()
        for k in ("ref_audio", "ref_text", "voice", "preprocess_prompt"):
            opts.pop(k)
        self.ov.settings(text=request.text, **opts)  # language, instruct, sampler: ValueError now, not later
        job = Job(request, stream)
        with self._cv:
            if self._closed:
                raise RuntimeError("the engine is closed")
            if len(self._queue) >= self.max_queue:
                raise EngineFull(max(1.0, math.ceil(self._seconds_per_job * (len(self._queue) + 1))))
            self._queue.append(job)
            self._cv.notify()
        return job

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                job = self._queue.popleft()
                if not job.future.set_running_or_notify_cancel():
                    continue
                self._running = job
            t0 = time.perf_counter()
            try:
                job.future.set_result(self._run(job))
            except BaseException as e:  # the job's failure is the caller's to see, not the worker's end
                job.future.set_exception(e)
            finally:
                job._pieces.put(_END)
                self._running = None
                self._seconds_per_job = 0.8 * self._seconds_per_job + 0.2 * (time.perf_counter() - t0)

    def _run(self, job: Job) -> SynthesisResult:
        r = job.request
        if not job.stream:
            result = self.ov.synthesize(r.text, cancel=job._cancel.is_set, **r.options())
            job._pieces.put(result.audio)
            return result
        pieces = []
        for audio in self.ov.stream(r.text, cancel=job._cancel.is_set, **r.options()):
            pieces.append(audio)
            job._pieces.put(audio)
        return SynthesisResult(np.concatenate(pieces), self.ov.sample_rate, [], [])

    def close(self) -> None:
        with self._cv:
            self._closed = True
            pending = list(self._queue)
            self._queue.clear()
            self._cv.notify_all()
        for job in pending:
            job.cancel()
        running = self._running
        if running is not None:
            running.cancel()
        self._worker.join(timeout=30)


class SpeechBackend:
    """What the server needs of the model: submit jobs, encode voices, count text tokens, describe itself."""

    def __init__(self, ov, max_batch: Union[str, int] = "auto", max_wait_ms: float = 10.0,
                 max_queue: int = 64) -> None:
        self.ov = ov
        self.sample_rate = int(ov.sample_rate)
        self.frame_rate = float(ov.pipeline.frame_rate)  # codec frames (audio tokens) per second
        self.model_name = ov.model_path.name
        self.device = f"{ov.runtime.device.spec} ({ov.runtime.device.description})"
        self.engine = _SerialEngine(ov, max_queue)

    def submit(self, request: SynthesisRequest, stream: bool = False) -> Job:
        """Queue a request; ValueError for a bad one at once, EngineFull when the queue is full."""
        return self.engine.submit(request, stream)

    def create_voice(self, samples: np.ndarray, sample_rate: int, transcript: str) -> VoicePrompt:
        """Encode a reference clip and its transcript into a voice prompt (blocking; OmniVoice's lock puts it
        between two syntheses)."""
        return self.ov.create_voice((samples, sample_rate), transcript)

    def count_tokens(self, text: str) -> int:
        return len(self.ov.tokenizer.encode(text))

    @property
    def queue_depth(self) -> int:
        return self.engine.queue_depth

    @property
    def active(self) -> int:
        return self.engine.active

    def close(self) -> None:
        self.engine.close()
        self.ov.close()


def load_backend(model: Optional[str], codec: Optional[str] = None, backend: str = "auto",
                 quant: str = "auto", threads: Optional[int] = None, max_batch: Union[str, int] = "auto",
                 max_wait_ms: float = 10.0, max_queue: int = 64) -> SpeechBackend:
    """Load the model (slow: call it off the event loop) and start the engine."""
    from ..api import OmniVoice

    ov = OmniVoice(model, codec, backend=backend, n_threads=threads, quant=quant)
    try:
        return SpeechBackend(ov, max_batch, max_wait_ms, max_queue)
    except BaseException:
        ov.close()
        raise
