"""Deadline scheduling: which requests in flight share the engine's next packed steps.

Every unit of work (a piece of a stream, a chunk of a whole answer) has a deadline: when a listener who plays
the audio in real time needs it.

- A stream's first piece: its arrival + the first-audio deadline (`first_audio`, default FIRST_AUDIO_S).
- A stream's later piece: when the audio before it has played, counted from the moment its first piece was done
  (the slack of the audio already sent: a client playing in real time needs the next piece only then).
- A whole answer's chunk: its arrival + the first-audio deadline + the seconds of audio up to that chunk's end,
  when a real-time stream of the same audio would have played it. A short whole answer is thus due soon after a
  new stream's first piece; a long one (`"duration": 600`) has its chunks due as they would play, so it goes at
  least at real time while new streams' first pieces go ahead of it.

`select` takes the units with the earliest deadlines first (earliest deadline first, EDF) while they fit the
step's bounds (requests, packed positions); units that do not fit beside those already taken are skipped, so
that smaller later ones fill the rest of the step (the throughput-bound work fills what is left). Deadlines
are fixed times, so a unit passed over becomes the earliest as time goes on: nothing waits forever, and a unit
that is the earliest always runs (alone, if it is larger than the step's bound).

Offline batches (synthesize_batch, the batch CLI) and a request run alone keep arrival order instead
(`select_arrival`: whatever runs keeps running, waiting requests join in the order they came while they fit):
there nobody listens while the batch runs, and the batch's own order (engine.offline.order_key) packs requests
that finish together.

The server's engine (engine.core.BatchEngine(deadlines=True)) selects when it admits: requests that lose their
place are parked with their MaskGIT state and generator as they are, and resume where they stopped, so a
request's tokens do not depend on the schedule (tests/engine).
"""

from __future__ import annotations

from typing import Optional, Protocol, Sequence, TypeVar

__all__ = ["FIRST_AUDIO_S", "Schedulable", "select", "select_arrival", "unit_deadline"]

# The first-audio deadline of a new stream (seconds from its arrival): the 300 ms that voice agents ask of a
# server's first audio under load (BENCHMARKS.md, "Speech server").
FIRST_AUDIO_S = 0.3


class Schedulable(Protocol):
    deadline: float     # when its current unit is due (the clock's seconds)
    positions: int      # packed LM positions of its current unit (cond + uncond)
    seq: int            # arrival order: ties go to the earlier arrival


T = TypeVar("T", bound=Schedulable)


def unit_deadline(stream: bool, unit: int, arrived: float, first_done: Optional[float], audio_before: float,
                  unit_seconds: float, first_audio: float = FIRST_AUDIO_S) -> float:
    """The deadline of a request's unit `unit` (module docstring): `arrived` and `first_done` (when unit 0 was
    done; None before) in the clock's seconds, `audio_before` the seconds of audio of the units before it,
    `unit_seconds` its own."""
    if not stream:
        return arrived + first_audio + audio_before + unit_seconds
    if unit == 0 or first_done is None:
        return arrived + first_audio
    return first_done + audio_before


def select(running: Sequence[T], waiting: Sequence[T], max_requests: int,
           max_positions: Optional[int] = None) -> list[T]:
    """The requests of the next steps, by earliest deadline: at most `max_requests`, and packed positions within
    `max_positions` (None: no bound; the first taken is always taken, alone if it exceeds it). On equal deadlines
    a running request goes before a waiting one (no graph rebuilt for nothing), then the earlier arrival."""
    order = sorted([(t.deadline, 0, t.seq, i) for i, t in enumerate(running)]
                   + [(t.deadline, 1, t.seq, i) for i, t in enumerate(waiting)])
    chosen: list[T] = []
    used = 0
    for _, kind, _, i in order:
        if len(chosen) >= max_requests:
            break
        t = (running if kind == 0 else waiting)[i]
        if chosen and max_positions is not None and used + t.positions > max_positions:
            continue  # does not fit beside the earlier ones: a smaller later one may
        chosen.append(t)
        used += t.positions
    return chosen


def select_arrival(running: Sequence[T], waiting: Sequence[T], max_requests: int,
                   max_positions: Optional[int] = None) -> list[T]:
    """Arrival order: every running request, then waiting ones by `seq` while they fit (the first one that does
    not fit stops the rest, so that it is not overtaken; alone it always fits)."""
    chosen = list(running)
    used = sum(t.positions for t in chosen)
    for t in sorted(waiting, key=lambda t: t.seq):
        if len(chosen) >= max_requests or (chosen and max_positions is not None and used + t.positions > max_positions):
            break
        chosen.append(t)
        used += t.positions
    return chosen
