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
    omnivoice_engine_device_runs_total           runs of MaskGIT steps on the device (a few greedy requests on
                                                 CUDA: the engine's fast path)
    omnivoice_engine_seconds_total{phase}        the engine thread's wall seconds by phase (BatchEngine.timings:
                                                 admit, graph, lm_ids, lm_run, lm_read, wait, maskgit, decode);
                                                 with the scrapes' wall time, whether the server is bound by the
                                                 device, the engine's host work, or waits for requests

The engine's figures (queue depth, active requests, model loaded, omnivoice_engine_*) are read at scrape time
from `engines()`: one snapshot per engine, with the labels that tell them apart: none for the plain server's
one engine, `replica` for each model replica of the Ray Serve app (omnivoice.server.ray).
"""

from __future__ import annotations

import weakref
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

__all__ = ["Metrics", "EngineSnapshot", "CONTENT_TYPE_LATEST"]

# (labels, figures) of one engine: labels such as {"replica": id} ({} for a lone engine); figures
# "queue_depth", "active", "loaded" (0 or 1) and "counters" (Engine.counters, or None before the model is loaded)
EngineSnapshot = tuple[dict, dict]

RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
FIRST_AUDIO_BUCKETS = (0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class _Engines:
    """The engines' figures, read at scrape time: gauges (queue depth, active requests, model loaded) and their
    cumulative counters, one sample per engine."""

    GAUGES = (("queue_depth", "omnivoice_queue_depth", "Synthesis requests waiting for the engine"),
              ("active", "omnivoice_active_requests", "Synthesis requests the engine is working on"),
              ("loaded", "omnivoice_model_loaded", "1 once the model is loaded"))
    STEPS = (("steps", "Packed LM steps the engine ran"),
             ("packed_requests", "Requests in the engine's steps, summed"),
             ("graphs", "LM graph switches: the set of packed chunks changed"),
             ("graphs_reused", "LM graph switches to a graph kept from an earlier batch of the same shape"),
             ("device_runs", "Runs of MaskGIT steps on the device (a few greedy requests on CUDA)"))

    def __init__(self, read: Callable[[], list[EngineSnapshot]]) -> None:
        self.read = read

    def collect(self):
        engines = self.read()
        names = sorted({k for labels, _ in engines for k in labels})
        if not engines:  # nothing loaded yet: the gauges say so
            engines = [({k: "" for k in names}, {"queue_depth": 0, "active": 0, "loaded": 0, "counters": None})]
        for key, name, doc in self.GAUGES:
            family = GaugeMetricFamily(name, doc, labels=names)
            for labels, figures in engines:
                family.add_metric([labels.get(k, "") for k in names], figures.get(key, 0))
            yield family
        counted = [(labels, f["counters"]) for labels, f in engines if f.get("counters") is not None]
        if not counted:
            return
        for key, doc in self.STEPS:
            family = CounterMetricFamily(f"omnivoice_engine_{key}", doc, labels=names)
            for labels, c in counted:
                family.add_metric([labels.get(k, "") for k in names], c[key])
            yield family
        family = CounterMetricFamily("omnivoice_engine_seconds", "The engine thread's wall seconds by phase",
                                     labels=names + ["phase"])
        for labels, c in counted:
            for phase, seconds in c["seconds"].items():
                family.add_metric([labels.get(k, "") for k in names] + [phase], seconds)
        yield family


class Metrics:
    """The counters of one app; the engines' figures are read from `engines()` at scrape time (EngineSnapshot),
    and `more()` (Prometheus text: the Ray Serve app's ray_serve_* families) is appended to them."""

    def __init__(self, engines: Callable[[], list[EngineSnapshot]] = list,
                 more: Callable[[], bytes] = bytes) -> None:
        self._watched: weakref.WeakSet = weakref.WeakSet()
        self._more = more
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("omnivoice_requests", "HTTP requests answered, by route and status code",
                                ["route", "status"], registry=r)
        self.audio_seconds = Counter("omnivoice_audio_seconds", "Seconds of audio produced", registry=r)
        self.rtf = Histogram("omnivoice_real_time_factor",
                             "Wall seconds from submission to the last audio per second of audio, per request",
                             buckets=RTF_BUCKETS, registry=r)
        self.first_audio = Histogram("omnivoice_first_audio_seconds",
                                     "Seconds from submission to the first audio of a streamed request",
                                     buckets=FIRST_AUDIO_BUCKETS, registry=r)
        self.cancelled = Counter("omnivoice_cancelled_requests",
                                 "Syntheses stopped before the end because the client went away", registry=r)
        r.register(_Engines(engines))

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
        """The text of GET /metrics (blocking: `more` may ask other hosts)."""
        return generate_latest(self.registry) + self._more()
