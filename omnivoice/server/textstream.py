"""Text that arrives in pieces -> speech, sentence by sentence, through the batched engine: the one path of both
streaming doors (the WebSocket route, ws.py, and the Wyoming server, omnivoice.wyoming).

    stream = TextStream(backend.start, SynthesisRequest("", voice=..., seed=7))   # its text is not used
    stream.feed("Hello th"); stream.feed("ere. How are"); stream.end()
    async for segment in stream:          # Segment(text, audio): float32 24 kHz, one per sentence, in order
        ...

The text is cut by the streaming rule of every streamed path (text.streaming.StreamFeed): the sentences of the
whole text whatever the split, each complete once the next one has begun (or at `flush()` / `end()`), and a long
first sentence's first clause spoken alone, for an early first audio.

Each sentence is one engine request, never chunked, so the sentences of many streams share the engine's
batches with every other request. The voice is the request's (a library voice); without one, as in the engine's
own streams, the first sentence's tokens and text voice the rest, so the later sentences wait for the first one's
tokens. At most LOOKAHEAD sentences of a stream are in the engine at once: one long text does not take the
batch's slots from other clients, and the next sentence is already generating while one is sent. (A voice-design
instruct is worded, English or Chinese, by each sentence's own text.)
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, replace
from typing import AsyncIterator, Awaitable, Callable, Optional

import numpy as np

from ..codec.voice import VoicePrompt
from ..engine import Job, SynthesisRequest
from ..text.streaming import StreamFeed

__all__ = ["LOOKAHEAD", "Segment", "TextStream"]

LOOKAHEAD = 2


@dataclass
class Segment:
    """One spoken sentence (or first clause): its text and its audio, float32 mono at the engine's rate."""

    text: str
    audio: np.ndarray


class TextStream:
    """One utterance of text that arrives in pieces; async-iterate it for its Segments (see the module docstring).

    `start(request)` (SpeechBackend.start: a coroutine) puts one sentence into the engine and returns its Job
    (`future`, `cancel()`); sentences are submitted by the iteration, so its refusal (ValueError for a bad
    request, EngineFull) and a sentence's failure come out of the iteration. Not thread-safe: one event loop
    drives it."""

    def __init__(self, start: Callable[[SynthesisRequest], Awaitable[Job]], request: SynthesisRequest) -> None:
        self._start = start
        self._request = replace(request, chunk_duration=0.0)  # a sentence is never chunked (as in the engine)
        # the voice of the sentences after the first: the request's, else the first sentence's once it is spoken
        self._voice: Optional[VoicePrompt] = request.voice
        self._own_voice = request.voice is None and request.ref_audio is None
        self._feed = StreamFeed()
        self._waiting: deque[str] = deque()  # sentences not yet submitted
        self._jobs: deque[tuple[str, Job, asyncio.Future]] = deque()  # in the engine, oldest first
        self._submitted = 0
        self._ended = False
        self._cancelled = False
        self._wake = asyncio.Event()

    @property
    def pending_chars(self) -> int:
        """Characters received and not yet submitted to the engine (the bound a door puts on a client)."""
        return len(self._feed.pending) + sum(len(s) for s in self._waiting)

    @property
    def ended(self) -> bool:
        """Whether end() (or cancel()) was called: no more text is taken."""
        return self._ended

    @property
    def busy(self) -> bool:
        """Whether sentences are waiting for the engine or in it (audio still to come without more text)."""
        return bool(self._waiting or self._jobs)

    @property
    def jobs(self) -> list[Job]:
        """The engine jobs in flight, oldest first."""
        return [job for _, job, _ in self._jobs]

    @property
    def unspoken(self) -> tuple[int, int]:
        """(sentences in the engine, sentences not submitted yet): what cancel() stops."""
        return len(self._jobs), len(self._waiting)

    def feed(self, text: str) -> None:
        """Add a piece of text (any split, even mid-word); the sentences it completes are queued."""
        self._queue(self._feed.feed(text))

    def flush(self) -> None:
        """Speak what is pending now, as a sentence, without waiting for the text after it."""
        self._queue(self._feed.flush())

    def end(self) -> None:
        """No more text: what is pending is spoken, and the iteration ends after the last sentence."""
        self._ended = True
        self.flush()

    def cancel(self) -> None:
        """Stop: queued sentences are dropped, the ones in the engine cancelled, the iteration ends."""
        self._ended = self._cancelled = True
        self._waiting.clear()
        for _, job, done in self._jobs:
            job.cancel()
            done.add_done_callback(_ignore_outcome)  # its Cancelled is expected: nobody waits for it
        self._jobs.clear()
        self._wake.set()

    def _queue(self, sentences: list[str]) -> None:
        self._waiting.extend(sentences)
        self._wake.set()

    async def _submit_waiting(self) -> None:
        """Submit waiting sentences while the lookahead allows and their voice is known."""
        while self._waiting and len(self._jobs) < LOOKAHEAD and not self._cancelled:
            if self._own_voice and self._submitted and self._voice is None:
                return  # the first sentence's tokens are not back yet
            text = self._waiting[0]
            voice = self._voice if self._own_voice else self._request.voice
            job = await self._start(replace(self._request, text=text, voice=voice))
            if self._cancelled:  # while the engine took it
                job.cancel()
                return
            self._waiting.popleft()
            self._jobs.append((text, job, asyncio.wrap_future(job.future)))
            self._submitted += 1

    def __aiter__(self) -> AsyncIterator[Segment]:
        return self._segments()

    async def _segments(self) -> AsyncIterator[Segment]:
        while not self._cancelled:
            self._wake.clear()
            await self._submit_waiting()
            if self._jobs:
                text, job, done = self._jobs[0]
                if not done.done():  # wait for it, or for more text to submit meanwhile
                    woken = asyncio.ensure_future(self._wake.wait())
                    await asyncio.wait({done, woken}, return_when=asyncio.FIRST_COMPLETED)
                    woken.cancel()
                    continue
                self._jobs.popleft()
                result = done.result()  # the sentence's failure, if any, is raised here
                if self._own_voice and self._voice is None:
                    self._voice = VoicePrompt(result.tokens[0], text, None)
                await self._submit_waiting()  # the next sentences generate while this one is sent
                yield Segment(text, result.audio)
            elif self._ended and not self._waiting:
                return
            else:
                await self._wake.wait()


def _ignore_outcome(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()
