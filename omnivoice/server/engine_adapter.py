"""The server's one door to the model: the batched engine (omnivoice.engine) behind a small facade.

Requests go into `OmniVoice.engine()`: an idle engine starts at once, a request that arrives while it runs
joins the running batch within `max_wait_ms` (sooner when the graph is rebuilt anyway), requests share the steps
by deadline (`first_audio_ms`, `max_step_positions`: omnivoice.engine.schedule), and each finishes (and frees its
slot) on its own. Voice
encoding goes through OmniVoice, whose lock puts it between two engine steps. Nothing else in
omnivoice/server/ imports the model.
"""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from ..codec.voice import VoicePrompt
from ..engine import EngineFull, Job, SynthesisRequest

__all__ = ["SynthesisRequest", "EngineFull", "Job", "SpeechBackend", "load_backend"]


class SpeechBackend:
    """What the server needs of the model: start jobs, encode voices, count text tokens, describe itself.

    The routes use this interface only; omnivoice.server.ray's RemoteBackend gives the same over Ray Serve
    replicas."""

    def __init__(self, ov, max_batch: Union[str, int] = "auto", max_wait_ms: float = 10.0,
                 max_queue: int = 64, first_audio_ms: float = 300.0, max_step_positions: Optional[int] = None,
                 short_first_piece: bool = False) -> None:
        self.ov = ov
        self.sample_rate = int(ov.sample_rate)
        self.frame_rate = float(ov.pipeline.frame_rate)  # codec frames (audio tokens) per second
        self.model_name = ov.model_path.name
        self.device = ov.runtime.label
        # a streamed answer's long first sentence stays whole unless asked (a clause cut changes its tokens)
        self.short_first_piece = short_first_piece
        self.engine = ov.engine(max_batch=max_batch, max_wait_ms=max_wait_ms, max_queue=max_queue,
                                first_audio_ms=first_audio_ms, max_step_positions=max_step_positions)

    def submit(self, request: SynthesisRequest, stream: bool = False) -> Job:
        """Queue a request; ValueError for a bad one at once, EngineFull (retry_after) when the queue is full."""
        return self.engine.submit(request, stream, short_first=self.short_first_piece)

    async def start(self, request: SynthesisRequest, stream: bool = False) -> Job:
        """`submit`, as the routes call it (a backend whose engine is remote awaits its acceptance)."""
        return self.submit(request, stream)

    def create_voice(self, samples: np.ndarray, sample_rate: int, transcript: str) -> VoicePrompt:
        """Encode a reference clip and its transcript into a voice prompt (blocking; OmniVoice's lock puts it
        between two engine steps)."""
        return self.ov.create_voice((samples, sample_rate), transcript)

    def count_tokens(self, text: str) -> int:
        return len(self.ov.tokenizer.encode(text))

    def counters(self) -> dict:
        """The engine's cumulative counters (Engine.counters), for /metrics."""
        return self.engine.counters()

    def engines(self) -> list[tuple[dict, dict]]:
        """The engine's figures for /metrics: one unlabelled EngineSnapshot (omnivoice.server.metrics)."""
        return [({}, {"queue_depth": self.queue_depth, "active": self.active, "loaded": 1,
                      "counters": self.counters()})]

    def more_metrics(self) -> bytes:
        """Other metrics for /metrics, in the Prometheus text format: none here."""
        return b""

    @property
    def queue_depth(self) -> int:
        return self.engine.queue_depth

    @property
    def active(self) -> int:
        return self.engine.active

    def close(self) -> None:
        """Stop the engine (unfinished requests end Cancelled), then free the model."""
        self.engine.close()
        self.ov.close()


def load_backend(model: Optional[str], codec: Optional[str] = None, backend: str = "auto",
                 quant: str = "auto", threads: Optional[int] = None, max_batch: Union[str, int] = "auto",
                 max_wait_ms: float = 10.0, max_queue: int = 64, cpu_products: Optional[str] = None,
                 first_audio_ms: float = 300.0, max_step_positions: Optional[int] = None,
                 short_first_piece: bool = False) -> SpeechBackend:
    """Load the model (slow: call it off the event loop) and start the engine."""
    from ..api import OmniVoice

    ov = OmniVoice(model, codec, backend=backend, n_threads=threads, quant=quant, cpu_products=cpu_products)
    try:
        return SpeechBackend(ov, max_batch, max_wait_ms, max_queue, first_audio_ms, max_step_positions,
                             short_first_piece)
    except BaseException:
        ov.close()
        raise
