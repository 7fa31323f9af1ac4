"""GET /metrics: the server's counters in the Prometheus text format (prometheus_client, one registry per app).

    omnivoice_requests_total{route,status}       HTTP requests answered, by route template and status code
    omnivoice_queue_depth                        synthesis requests waiting for the engine
    omnivoice_active_requests                    synthesis requests the engine is working on
    omnivoice_audio_seconds_total                seconds of audio produced
    omnivoice_real_time_factor                   per request: wall seconds from submission to the last audio,
                                                 divided by the audio's seconds (histogram)
    omnivoice_first_audio_seconds                per streamed request: seconds to the first audio (histogram)
    omnivoice_cancelled_requests_total           syntheses stopped before the end because the client went away
    omnivoice_model_loaded                       1 once the model is loaded
    omnivoice_engine_steps_total                 MaskGIT steps the engine ran (packed LM steps and steps on the device)
    omnivoice_engine_packed_requests_total       requests in those steps, summed (over steps: the mean batch)
    omnivoice_engine_graphs_total                LM graph switches (the set of packed chunks changed)
    omnivoice_engine_graphs_reused_total         of those, graphs kept from an earlier batch of the same shape
    omnivoice_engine_device_chunks_total         chunks whose MaskGIT steps ran on the device (a lone greedy
                                                 request on CUDA: the engine's fast path)
    omnivoice_engine_seconds_total{phase}        the engine thread's wall seconds by phase (BatchEngine.timings:
                                                 admit, graph, lm_ids, lm_run, lm_read, wait, maskgit, decode);
                                                 with the scrapes' wall time, whether the server is bound by the
                                                 device, the engine's host work, or waits for requests
"""

from __future__ import annotations

import weakref
from typing import Callable, Optional

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily

__all__ = ["Metrics", "CONTENT_TYPE_LATEST"]

RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
FIRST_AUDIO_BUCKETS = (0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class _EngineCounters:
    """The engine's own counters (Engine.counters), read at scrape time; none before the model is loaded."""

    STEPS = (("steps", "Packed LM steps the engine ran"),
             ("packed_requests", "Requests in the engine's steps, summed"),
             ("graphs", "LM graph switches: the set of packed chunks changed"),
             ("graphs_reused", "LM graph switches to a graph kept from an earlier batch of the same shape"),
             ("device_chunks", "Chunks whose MaskGIT steps ran on the device (a lone greedy request on CUDA)"))

    def __init__(self, read: Callable[[], Optional[dict]]) -> None:
        self.read = read

    def collect(self):
        c = self.read()
        if c is None:
            return
        for key, doc in self.STEPS:
            yield CounterMetricFamily(f"omnivoice_engine_{key}", doc, value=c[key])
        family = CounterMetricFamily("omnivoice_engine_seconds", "The engine thread's wall seconds by phase",
                                     labels=["phase"])
        for phase, seconds in c["seconds"].items():
            family.add_metric([phase], seconds)
        yield family


class Metrics:
    """The counters of one app; `queue_depth`, `active` and `engine` (Engine.counters, or None before the
    model is loaded) are read from the engine at scrape time."""

    def __init__(self, queue_depth: Callable[[], float], active: Callable[[], float],
                 loaded: Callable[[], float], engine: Callable[[], Optional[dict]] = lambda: None) -> None:
        self._watched: weakref.WeakSet = weakref.WeakSet()
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("omnivoice_requests", "HTTP requests answered, by route and status code",
                                ["route", "status"], registry=r)
        Gauge("omnivoice_queue_depth", "Synthesis requests waiting for the engine",
              registry=r).set_function(queue_depth)
        Gauge("omnivoice_active_requests", "Synthesis requests the engine is working on",
              registry=r).set_function(active)
        Gauge("omnivoice_model_loaded", "1 once the model is loaded", registry=r).set_function(loaded)
        self.audio_seconds = Counter("omnivoice_audio_seconds", "Seconds of audio produced", registry=r)
        self.rtf = Histogram("omnivoice_real_time_factor",
                             "Wall seconds from submission to the last audio per second of audio, per request",
                             buckets=RTF_BUCKETS, registry=r)
        self.first_audio = Histogram("omnivoice_first_audio_seconds",
                                     "Seconds from submission to the first audio of a streamed request",
                                     buckets=FIRST_AUDIO_BUCKETS, registry=r)
        self.cancelled = Counter("omnivoice_cancelled_requests",
                                 "Syntheses stopped before the end because the client went away", registry=r)
        r.register(_EngineCounters(engine))

    def watch_cancel(self, job) -> None:
        """Count `job` as cancelled if it ends stopped (it was cancelled because its client went away)."""
        from concurrent.futures import CancelledError

        from ..pipeline import Cancelled

        def ended(future) -> None:
            if future.cancelled() or isinstance(future.exception(), (Cancelled, CancelledError)):
                self.cancelled.inc()

        if job not in self._watched:
            self._watched.add(job)
            job.future.add_done_callback(ended)

    def produced(self, audio_seconds: float, wall_seconds: float) -> None:
        """One finished synthesis."""
        self.audio_seconds.inc(audio_seconds)
        if audio_seconds > 0:
            self.rtf.observe(wall_seconds / audio_seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
