"""Decodes overlapped with the next LM steps (BatchEngine(overlap_decode=True), the CUDA default, forced here on
whatever backend the tests run on): every request's tokens and audio are the synchronous path's, a stream's
pieces come in order, a failed decode fails its own request only, a cancelled request's pending audio is dropped,
and close() waits for the decode thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from omnivoice.engine import BatchEngine, SynthesisRequest, Task
from omnivoice.pipeline import Cancelled
from omnivoice.text.streaming import stream_sentences

from .helpers import assert_same_result, solo

LONG = "The first sentence is here. A second one follows it. Then a third comes. And a fourth ends it."


def specs(ref_clip) -> list[tuple[dict, bool]]:
    """(request, streamed): auto, clone and long-form requests, whole and streamed."""
    ref, ref_text = ref_clip
    return [(dict(text="Hello there. How are you today? Fine, thanks.", seed=1, num_step=4), True),
            (dict(text="A whole answer, auto voice.", seed=2, num_step=5), False),
            (dict(text="Cloned, and streamed. Two sentences.", ref_audio=ref, ref_text=ref_text, seed=3,
                  num_step=4), True),
            (dict(text=LONG, seed=4, num_step=3, chunk_duration=2.5, chunk_threshold=4.0), False),
            (dict(text="Short.", seed=5, num_step=6, duration=0.6), False)]


def make_tasks(items: list[tuple[dict, bool]]) -> tuple[list[Task], dict[int, list[np.ndarray]]]:
    """Tasks as the service makes them; each stream's on_audio collects its pieces."""
    tasks, pieces = [], {}
    for i, (fields, streamed) in enumerate(items):
        req = SynthesisRequest(**fields)
        pieces[i] = []
        tasks.append(Task(req, req.settings(), index=i, sentences=stream_sentences(req.text) if streamed else None,
                          on_audio=pieces[i].append if streamed else None))
    return tasks, pieces


def run(ov, tasks: list[Task], overlap: bool, max_batch: int = 3) -> tuple[list[Task], BatchEngine]:
    """Every task run to its end; the tasks in the order the steps returned them, and the (closed) engine."""
    done: list[Task] = []
    with BatchEngine(ov, max_batch=max_batch, overlap_decode=overlap) as engine:
        assert engine.overlap_decode is overlap
        for t in tasks:
            engine.add(t)
        while engine.busy:
            done += engine.step()
    return done, engine


def decode_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("omnivoice-decode")]


def assert_like_solo(ov, got, request: dict) -> None:
    """A request run beside others equals its solo run: bit for bit on the CPU; on a GPU, where a near-tie may
    flip a token between batched and alone (test_service), the same texts and lengths."""
    want = solo(ov, request)
    if not ov.runtime.is_gpu:
        assert_same_result(got, want, request["text"])
        return
    assert got.texts == want.texts and [t.shape for t in got.tokens] == [t.shape for t in want.tokens]
    assert got.audio.shape == want.audio.shape


def test_overlapped_decodes_equal_the_synchronous_path(ov, ref_clip):
    assert ov.codec.runtime is not ov.runtime and ov.codec.runtime.backend != ov.runtime.backend
    items = specs(ref_clip)
    sync_tasks, sync_pieces = make_tasks(items)
    done, engine = run(ov, sync_tasks, overlap=False)
    assert engine.timings["decode_overlap"] == 0 and len(done) == len(items)
    tasks, pieces = make_tasks(items)
    done, engine = run(ov, tasks, overlap=True)
    assert engine.timings["decode_overlap"] > 0  # the decodes ran on the decode thread
    assert sorted(t.index for t in done) == list(range(len(items)))  # each task returned once
    assert not decode_threads()
    for t, want in zip(tasks, sync_tasks):
        assert t.error is None and want.error is None, (t.error, want.error)
        assert_same_result(t.result, want.result, t.request.text)
        assert len(pieces[t.index]) == len(sync_pieces[want.index]) == (len(t.sentences) if t.stream else 0)
        for got, expected in zip(pieces[t.index], sync_pieces[want.index]):
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=0, atol=0 if not ov.runtime.is_gpu else 1e-2)
        if t.stream:  # the pieces in order: together they are the result's audio
            np.testing.assert_array_equal(np.concatenate(pieces[t.index]), t.result.audio)


def test_a_failed_decode_fails_only_its_request(ov, ref_clip, monkeypatch):
    """The second piece of one stream fails to post-process: that stream keeps its first piece, gets no more and
    fails with the error; every other request is the synchronous path's."""
    items = specs(ref_clip)[:3]
    sync_tasks, _ = make_tasks(items)
    run(ov, sync_tasks, overlap=False)
    tasks, pieces = make_tasks(items)
    bad, real, calls = tasks[0], ov.pipeline.finish, []

    def finish(chunks, voice, settings):
        if settings is bad.settings:
            calls.append(threading.current_thread().name)
            if len(calls) == 2:
                raise ValueError("a bad piece (test)")
        return real(chunks, voice, settings)

    monkeypatch.setattr(ov.pipeline, "finish", finish)
    done, _ = run(ov, tasks, overlap=True)
    monkeypatch.undo()
    assert all(name.startswith("omnivoice-decode") for name in calls) and len(calls) == 2
    assert sorted(t.index for t in done) == [0, 1, 2]
    assert isinstance(bad.error, ValueError) and bad.result is None
    assert len(bad.sentences) == 3 and len(pieces[0]) == 1
    np.testing.assert_array_equal(pieces[0][0], sync_tasks[0].pieces[0])
    for t, want in zip(tasks[1:], sync_tasks[1:]):
        assert t.error is None, t.error
        assert_same_result(t.result, want.result, t.request.text)


def test_cancelling_drops_the_audio_being_decoded(ov):
    """A stream cancelled while its first piece waits for the codec gets no piece and fails with Cancelled; the
    request beside it is its solo run. (The test holds the codec's lock: the decode thread waits for it.)"""
    beside = dict(text="The other request goes on.", seed=2, num_step=8)
    tasks, pieces = make_tasks([(dict(text="First piece. Second piece. Third piece.", seed=1, num_step=3), True),
                                (beside, False)])
    stream, other = tasks
    done: list[Task] = []
    with BatchEngine(ov, max_batch=2, overlap_decode=True) as engine:
        for t in tasks:
            engine.add(t)
        with ov._codec_lock:
            while stream.unit == 0:  # until its first piece is handed to the decode thread
                done += engine.step()
            assert engine.busy and not stream.finished
            stream.cancel()
        while engine.busy:
            done += engine.step()
    assert sorted(t.index for t in done) == [0, 1]
    assert isinstance(stream.error, Cancelled) and pieces[0] == []
    assert_like_solo(ov, other.result, beside)


def test_close_waits_for_the_decodes_in_flight(ov, monkeypatch):
    """close() with a decode on the decode thread returns once it is done: the request being decoded gets its
    audio, the one still generating fails with Cancelled, and no decode thread is left."""
    tasks, _ = make_tasks([(dict(text="Decoded at close.", seed=1, num_step=2), False),
                           (dict(text="Still generating at close, with many steps to go.", seed=2, num_step=64),
                            False)])
    quick, slow = tasks
    gate, real = threading.Event(), ov.pipeline.finish

    def finish(chunks, voice, settings):
        gate.wait(30)  # the decode is still in flight when close() is called
        return real(chunks, voice, settings)

    engine = BatchEngine(ov, max_batch=2, overlap_decode=True)
    monkeypatch.setattr(ov.pipeline, "finish", finish)
    try:
        for t in tasks:
            engine.add(t)
        while quick.t_generated is None:
            engine.step()
        assert engine.busy and not quick.finished and decode_threads()
        threading.Timer(0.2, gate.set).start()
        engine.close()
    finally:
        gate.set()
        monkeypatch.undo()
    done = engine.step()
    assert sorted(t.index for t in done) == [0, 1] and not engine.busy
    assert quick.result is not None and quick.result.audio.size > 0
    assert isinstance(slow.error, Cancelled)
    assert not decode_threads()


def test_the_default_is_by_device_and_the_environment_forces_it(ov, monkeypatch):
    monkeypatch.delenv("OMNIVOICE_OVERLAP_DECODE", raising=False)
    with BatchEngine(ov) as engine:
        assert engine.overlap_decode is (ov.runtime.device.backend.lower() == "cuda")
    for value, expected in (("1", True), ("0", False)):
        monkeypatch.setenv("OMNIVOICE_OVERLAP_DECODE", value)
        with BatchEngine(ov) as engine:
            assert engine.overlap_decode is expected
        with BatchEngine(ov, overlap_decode=not expected) as engine:  # the argument wins
            assert engine.overlap_decode is not expected


def test_the_service_delivers_every_stream_in_order(ov):
    """ov.engine() with overlapped decodes: each stream's pieces, in order, are OmniVoice.stream's, and a whole
    request beside them is its solo run (on a GPU: their lengths, see assert_like_solo)."""
    texts = ["Hello there. How are you today? Fine, thanks.", "One, and two. Three and four.",
             "A single sentence."]
    expected = [list(ov.stream(text, num_step=4, seed=i)) for i, text in enumerate(texts)]
    whole = dict(text="A whole answer beside the streams.", seed=9, num_step=5)
    with ov.engine(max_batch=4, max_wait_ms=0, overlap_decode=True) as engine:
        jobs = [engine.submit({"text": text, "num_step": 4, "seed": i}, stream=True) for i, text in enumerate(texts)]
        other = engine.submit(whole)
        result = other.result(timeout=300)
        for job in jobs:  # (a decode that came back and did not wake the engine's thread would time out here)
            job.result(timeout=300)
        got = [list(job.chunks()) for job in jobs]
        assert engine.counters()["seconds"]["decode_overlap"] > 0
    assert not decode_threads()
    for pieces, want, job in zip(got, expected, jobs):
        assert [p.shape for p in pieces] == [p.shape for p in want]
        if not ov.runtime.is_gpu:
            for a, b in zip(pieces, want):
                np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(job.result().audio, np.concatenate(pieces))  # every piece, in order
    assert_like_solo(ov, result, whole)


@pytest.mark.parametrize("overlap", [True, False])
def test_a_failed_lone_decode_fails_its_request_not_the_engine(ov, monkeypatch, overlap):
    """A decode of one request alone that fails fails that request (it raised out of the engine's step before)."""
    from omnivoice.codec import AudioCodec

    def decode_iter(self, codes_list):
        raise RuntimeError("the codec failed (test)")
        yield  # a generator, as the real one

    tasks, _ = make_tasks([(dict(text="Alone.", seed=1, num_step=2), False)])
    monkeypatch.setattr(AudioCodec, "decode_iter", decode_iter)
    done, _ = run(ov, tasks, overlap=overlap)
    assert done == tasks and isinstance(tasks[0].error, RuntimeError)
