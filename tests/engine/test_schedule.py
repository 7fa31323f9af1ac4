"""The deadline schedule (engine.schedule): its choices on made-up requests with a fake clock, and the engine
under it on the tiny model: deadlines honoured in order, nothing starved, a cancelled request's slot freed, and
every request's tokens its solo run's however often it was parked."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from omnivoice.engine import BatchEngine, Task
from omnivoice.engine.offline import prepare
from omnivoice.engine.schedule import select, select_arrival, unit_deadline
from omnivoice.pipeline import Cancelled

from .helpers import assert_same_result, solo


@pytest.fixture
def ov(cpu_ov):
    """On the CPU whatever the test backend: a parked request resumes with its solo run's tokens and audio bit for
    bit only where every op works per column, and on CUDA a lone greedy task runs its chunk whole on the device
    (the engine's fast path), so the steps these tests count are the host loop's."""
    return cpu_ov


def job(name, deadline, positions=10, seq=0):
    return SimpleNamespace(name=name, deadline=deadline, positions=positions, seq=seq)


def names(tasks):
    return [t.name for t in tasks]


# ------------------------------------------------------------------------------------------- the policy
def test_earliest_deadlines_first_within_the_request_bound():
    running = [job("r-late", 9.0, seq=0), job("r-soon", 2.0, seq=1)]
    waiting = [job("w-first", 1.0, seq=2), job("w-mid", 5.0, seq=3), job("w-last", 20.0, seq=4)]
    assert names(select(running, waiting, 3)) == ["w-first", "r-soon", "w-mid"]  # r-late is parked
    assert names(select(running, waiting, 10)) == ["w-first", "r-soon", "w-mid", "r-late", "w-last"]


def test_a_step_is_filled_by_smaller_later_units_and_the_earliest_always_runs():
    big = job("big", 1.0, positions=900, seq=0)
    waiting = [job("mid", 2.0, positions=200, seq=1), job("small", 3.0, positions=50, seq=2)]
    # the earliest runs even alone beyond the cap; what does not fit beside it is skipped, not the rest
    assert names(select([], [big] + waiting, 8, max_positions=500)) == ["big"]
    assert names(select([], [job("a", 1.0, 300, 0), job("b", 2.0, 300, 1), job("c", 3.0, 150, 2)], 8, 500)) == [
        "a", "c"]
    assert names(select([], waiting, 8, max_positions=None)) == ["mid", "small"]


def test_equal_deadlines_keep_the_running_request_then_arrival_order():
    assert names(select([job("run", 1.0, seq=5)], [job("new", 1.0, seq=1)], 1)) == ["run"]
    assert names(select([], [job("b", 1.0, seq=2), job("a", 1.0, seq=1)], 1)) == ["a"]


def test_arrival_order_keeps_what_runs_and_stops_at_the_first_that_does_not_fit():
    running = [job("r", 50.0, positions=300, seq=0)]
    waiting = [job("w2", 1.0, 300, seq=2), job("w1", 9.0, 100, seq=1), job("w3", 0.5, 10, seq=3)]
    assert names(select_arrival(running, waiting, 8, max_positions=500)) == ["r", "w1"]
    assert names(select_arrival(running, waiting, 2)) == ["r", "w1"]


def test_unit_deadlines():
    # a stream: first piece due first_audio after arrival; piece k when the audio before it has played
    assert unit_deadline(True, 0, 10.0, None, 0.0, 2.0, 0.3) == pytest.approx(10.3)
    assert unit_deadline(True, 2, 10.0, 10.2, 3.5, 2.0, 0.3) == pytest.approx(13.7)
    # a whole answer: as a real-time stream of it would have played its chunk
    assert unit_deadline(False, 0, 10.0, None, 0.0, 2.0, 0.3) == pytest.approx(12.3)
    assert unit_deadline(False, 3, 10.0, 10.5, 6.0, 2.0, 0.3) == pytest.approx(18.3)


def test_nothing_starves_under_a_steady_stream_of_arrivals():
    """One slot, a fake clock of 0.25 s ticks, one unit run a tick: a new one-piece stream arrives every other
    tick (due 0.3 s later). A long whole answer of 40 two-second chunks that arrived first gets every tick the
    newcomers leave, chunk after chunk, and finishes; every newcomer runs before its deadline."""
    long = job("long", 0.0, seq=0)
    long.unit, long.units = 0, 40
    long.deadline = unit_deadline(False, 0, 0.0, None, 0.0, 2.0, 0.3)
    waiting, late, turns = [long], [], []
    for tick in range(400):
        now = tick * 0.25
        if tick % 2 == 0:
            waiting.append(job(f"s{tick}", unit_deadline(True, 0, now, None, 0.0, 1.0, 0.3), seq=tick + 1))
        (t,) = select([], waiting, 1)
        if t is long:
            turns.append(tick)
            long.unit += 1
            if long.unit == long.units:
                waiting.remove(long)
                break
            long.deadline = unit_deadline(False, long.unit, 0.0, None, 2.0 * long.unit, 2.0, 0.3)
        else:
            waiting.remove(t)
            late.append(now - t.deadline)
    assert long.unit == long.units, f"the long answer got {long.unit} of its {long.units} chunks"
    assert turns[0] == 1 and max(np.diff(turns)) <= 8  # a chunk at least every 2 s: real time for 2 s chunks
    assert len(late) == 40 and max(late) < 0


# ------------------------------------------------------------------------------------------- the engine
def _task(request: dict, stream: bool = False, t_added: float = 0.0) -> Task:
    (prepared,) = prepare([request])
    req, settings = prepared
    task = Task(req, settings, sentences=[req.text] if stream else None)
    task.t_added = t_added
    return task


def _run(engine: BatchEngine, done: list, steps: int = 10_000) -> None:
    for _ in range(steps):
        if not engine.busy:
            return
        done += engine.step()


LONG = dict(text="A long answer that takes its time to say.", seed=3, num_step=6, duration=3.0)


def test_deadlines_in_order_and_tokens_kept_when_parked(ov):
    """One slot. A long whole answer starts; two requests arrive with earlier deadlines (a stream's first piece
    and a short whole answer): the long one is parked mid-chunk, they run by deadline, it resumes, and each
    result is its solo run's."""
    clock = SimpleNamespace(now=0.0)
    engine = BatchEngine(ov, max_batch=1, deadlines=True, clock=lambda: clock.now)
    long = _task(LONG, t_added=0.0)
    engine.add(long)
    done: list[Task] = []
    for _ in range(2):
        done += engine.step()
    assert long.steps_done == 2 and long.deadline == pytest.approx(0.3 + 3.0)
    short = _task(dict(text="Short answer.", seed=4, num_step=4, duration=0.8), t_added=1.0)  # due 2.1
    streamed = _task(dict(text="First words.", seed=5, num_step=4), stream=True, t_added=1.5)  # due 1.8
    engine.add(short)
    engine.add(streamed)
    done += engine.step()
    assert engine.active == [streamed] and long in engine.pending and long.state is not None  # parked
    assert long.steps_done == 2
    _run(engine, done)
    engine.close()
    assert [t.request.text for t in done] == [streamed.request.text, short.request.text, long.request.text]
    assert_same_result(long.result, solo(ov, LONG), "parked")
    assert_same_result(short.result, solo(ov, dict(text="Short answer.", seed=4, num_step=4, duration=0.8)), "short")
    pieces = list(ov.stream("First words.", seed=5, num_step=4))
    np.testing.assert_array_equal(streamed.result.audio, np.concatenate(pieces))


def test_a_600_second_request_does_not_hold_the_others(ov):
    """A request for a long duration (one huge chunk) and short ones that arrive after it, under a step cap the
    long one exceeds alone: the short ones go first (the long one's chunk is due when its audio would have
    played), the long one finishes after them with its solo tokens."""
    clock = SimpleNamespace(now=0.0)
    engine = BatchEngine(ov, max_batch=4, deadlines=True, max_step_positions=400, clock=lambda: clock.now)
    huge = dict(text="Hallo.", seed=1, num_step=3, duration=20.0)
    big = _task(huge, t_added=0.0)
    engine.add(big)
    done: list[Task] = []
    done += engine.step()
    assert big.positions > 400 and engine.active == [big]
    shorts = [dict(text=f"Quick {w}.", seed=10 + i, num_step=3, duration=0.6) for i, w in enumerate("abc")]
    for i, r in enumerate(shorts):
        engine.add(_task(r, t_added=1.0 + i))
    _run(engine, done)
    engine.close()
    assert [t.request.text for t in done] == [r["text"] for r in shorts] + ["Hallo."]
    assert_same_result(big.result, solo(ov, huge), "huge")
    for t, r in zip(done, shorts):
        assert_same_result(t.result, solo(ov, r), r["text"])


def test_cancelling_a_running_request_frees_its_slot(ov):
    engine = BatchEngine(ov, max_batch=1, deadlines=True)
    first, second = _task(LONG, t_added=0.0), _task(dict(text="Next in line.", seed=8, num_step=3), t_added=5.0)
    engine.add(first)
    engine.add(second)
    engine.step()
    assert engine.active == [first] and engine.waiting == [second]
    first.cancel()
    done = engine.step()
    assert done == [first] and isinstance(first.error, Cancelled)
    assert engine.active == [second] and not engine.pending
    rest: list[Task] = []
    _run(engine, rest)
    engine.close()
    assert_same_result(second.result, solo(ov, dict(text="Next in line.", seed=8, num_step=3)), "after cancel")


def test_parking_with_pipelined_runs_in_flight_keeps_every_solo_result(ov, ref_clip, monkeypatch):
    """Pipelined (two groups, each graph run launched and collected a round later: the GPU default, forced on the
    CPU), three slots, and requests arriving with earlier deadlines while runs are in flight: the runs are collected
    before anything is parked, and every request's result is its solo run's."""
    from omnivoice.engine import core

    monkeypatch.setattr(core, "PIPELINE_MIN_REQUESTS", 2)
    ref, ref_text = ref_clip
    first = [dict(text=f"An early whole answer {i}.", seed=20 + i, num_step=6, duration=2.0 + i) for i in range(3)]
    later = [dict(text="A stream arrives.", seed=30, num_step=4),
             dict(text="A clone arrives.", ref_audio=ref, ref_text=ref_text, seed=31, num_step=4, duration=0.8),
             dict(text="Another stream.", seed=32, num_step=5, class_temperature=0.7)]
    engine = BatchEngine(ov, max_batch=3, pipeline=True, deadlines=True, device_requests=1)
    tasks = [_task(r, t_added=0.0) for r in first]
    for t in tasks:
        engine.add(t)
    done: list[Task] = []
    for _ in range(3):
        done += engine.step()
    assert any(g.inflight for g in engine._groups), "no run in flight to park around"
    streams = [_task(later[0], stream=True, t_added=0.5), _task(later[1], t_added=0.6),
               _task(later[2], stream=True, t_added=0.7)]
    for t in streams:
        engine.add(t)
    done += engine.step()
    assert sum(t in engine.pending and t.state is not None for t in tasks) >= 2  # parked mid-chunk
    _run(engine, done)
    engine.close()
    assert len(done) == 6 and all(t.error is None for t in done)
    for t, r in zip(tasks, first):
        assert_same_result(t.result, solo(ov, r), r["text"])
    assert_same_result(streams[1].result, solo(ov, later[1]), "clone")
    for t, r in ((streams[0], later[0]), (streams[2], later[2])):
        opts = {k: v for k, v in r.items() if k != "text"}
        np.testing.assert_array_equal(t.result.audio, np.concatenate(list(ov.stream(r["text"], **opts))))
