"""The engine's device fast path (BatchEngine._on_device: a few greedy tasks' steps run on the device, a lone
task's whole chunk; CUDA with patch 0024) exercised on the CPU with the device's MaskGIT step emulated.

Everything but the CUDA kernel is the real code: the engine's choice of the path, the session opened with
device_steps (its graph and device-side state), generate.batch.run_on_device, MaskGitState.device_plan /
finish_on_device and ChunkSession.run_on_device with each prompt's kernel arguments (its share of the packed
outputs, tokens, plans and states). The kernel is replaced by `FakeMaskGitStep`, which makes
each step's choice in numpy from what the kernel is given (the graph's pred and score, the plan row's k, Philox
seed and offset) and writes the tokens and the next run's ids where the kernel writes them. Its results must
equal the host loop's, bit for bit, as the CUDA kernel's do on the GPU (tests/models/test_lm_device_maskgit.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.engine import BatchEngine, BatchFailed, Task
from omnivoice.engine.offline import prepare
from omnivoice.generate import (CudaPhiloxGenerator, GenerationConfig, MaskGitState, gumbel_noise,
                                top_k_positions)
from omnivoice.ggml import ffi
from omnivoice.pipeline import Cancelled
from omnivoice.runners.lm import GuidedChunk
from tests.models.test_lm import random_prompt

from .helpers import assert_same_result, solo
from .test_batch_equals_solo import LONG

MASK_ID = 1024


def view(ptr, dtype, n):
    """n values of a kernel argument's buffer (host memory on the CPU backend), writable in place."""
    return np.frombuffer(ffi.buffer(ptr, n * np.dtype(dtype).itemsize), dtype)


class FakeMaskGitStep:
    """ggml_backend_cuda_maskgit_step's contract in numpy, on the CPU backend's host memory."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, backend, a) -> int:
        C, T, L, V = a.C, a.T, a.L, a.audio_vocab
        state = view(a.state, np.int32, 2)
        row = view(a.plan, np.uint32, 6 * (state[0] + 1))[-6:].astype(np.uint64)
        tokens = view(a.tokens, np.int32, C * T)
        pred = view(a.pred, np.int32, C * T).reshape(T, C).T.reshape(-1)  # the guided pick's frame-major order
        score = view(a.score, np.float32, C * T).reshape(T, C).T
        scores = (score - (np.arange(C, dtype=np.float32) * np.float32(a.penalty))[:, None]).reshape(-1)
        if row[5]:
            u = CudaPhiloxGenerator(int(row[1] | row[2] << 32), 4 * int(row[3] | row[4] << 32)).rand(C * T)
            scores = scores * np.float32(a.inv_temp) + gumbel_noise(u)
        scores = np.where(tokens == a.mask_id, scores, np.float32(-np.inf))
        if np.isnan(scores).any():
            state[1] |= 1
            return 0
        chosen = top_k_positions(scores, int(row[0]))
        if (pred[chosen] == a.mask_id).any():
            state[1] |= 2
            return 0
        tokens[chosen] = pred[chosen]
        ids = view(a.ids, np.int32, C * L).reshape(C, L)
        # a pick of -1 writes row 0's ids, as patch 0024's kernel does (row -1 lies before the embedding table)
        shifted = np.maximum(tokens, 0).reshape(C, T) + (np.arange(C, dtype=np.int32) * V)[:, None]
        ids[:, a.cond0:a.cond0 + T] = shifted
        ids[:, a.uncond0:a.uncond0 + T] = shifted
        state[0] += 1
        self.calls += 1
        return 0


class UnscoredRows(FakeMaskGitStep):
    """The kernel given, for chunks of `frames` target frames, the guided pick of rows whose logits were all NaN
    or -inf (prediction -1, score -FLT_MAX: no NaN, so no error bit) for codebooks 1-6 of every frame, as CUDA's
    class graphs gave it under load; like the kernel, it writes the -1 it picks into the tokens."""

    def __init__(self, frames: int) -> None:
        super().__init__()
        self.frames = frames

    def __call__(self, backend, a) -> int:
        if a.T == self.frames:  # the guided pick's frame-major [T, C]
            view(a.pred, np.int32, a.C * a.T).reshape(a.T, a.C)[:, 1:7] = -1
            view(a.score, np.float32, a.C * a.T).reshape(a.T, a.C)[:, 1:7] = -np.finfo(np.float32).max
        return super().__call__(backend, a)


@pytest.fixture
def ov(cpu_ov):
    """On the CPU whatever the test backend: the fake step reads the kernel's buffers through host pointers (on
    CUDA they are device memory, and the fake segfaulted there)."""
    return cpu_ov


@pytest.fixture
def device(ov, monkeypatch):
    step = FakeMaskGitStep()
    monkeypatch.setattr(ov.lm, "maskgit_step", step)
    return step


def requests(ref_clip) -> list[dict]:
    ref, ref_text = ref_clip
    return [
        dict(text="Hello world, this is a test.", language="English", seed=11, num_step=6),
        dict(text="Greedy and without noise.", seed=3, num_step=5, position_temperature=0.0),
        dict(text="Bonjour à tous.", language="French", ref_audio=ref, ref_text=ref_text, seed=13, num_step=6),
        dict(text=LONG, language="en", seed=14, num_step=4, chunk_duration=2.5, chunk_threshold=4.0),
    ]


def test_a_lone_request_runs_on_the_device_with_the_host_loops_tokens(ov, ref_clip, monkeypatch):
    reqs = requests(ref_clip)
    want = [solo(ov, r) for r in reqs]  # the host loop (no device step on the CPU)
    step = FakeMaskGitStep()
    monkeypatch.setattr(ov.lm, "maskgit_step", step)
    for req, expected in zip(reqs, want):
        before = step.calls
        got = solo(ov, req)
        assert_same_result(got, expected, req["text"][:20])
        assert step.calls - before == req["num_step"] * len(expected.tokens), "every step ran on the device"


def test_a_packed_group_runs_on_the_device_with_the_host_loops_tokens(ov, ref_clip, monkeypatch):
    """Three greedy requests of different lengths and step counts, and a long-form one, packed: each run covers
    the steps they have left in common, each prompt's choice from its own share of the packed outputs."""
    reqs = requests(ref_clip)
    want = [solo(ov, r) for r in reqs]
    step = FakeMaskGitStep()
    monkeypatch.setattr(ov.lm, "maskgit_step", step)
    got = ov.synthesize_batch(reqs, batch_size=4)
    for req, g, w in zip(reqs, got, want):
        assert_same_result(g, w, req["text"][:20])
    assert step.calls == sum(r["num_step"] * len(w.tokens) for r, w in zip(reqs, want))


def test_sampled_classes_step_on_the_host(ov, ref_clip, device):
    sampled = dict(text="Sampled classes.", seed=16, num_step=8, class_temperature=0.7)  # the last to finish
    solo(ov, sampled)
    assert device.calls == 0
    reqs = requests(ref_clip)[:2] + [sampled]
    want = [solo(ov, r) for r in reqs[:2]]
    device.calls = 0
    got = ov.synthesize_batch(reqs, batch_size=3)
    for req, g, w in zip(reqs, got, want):
        assert_same_result(g, w, req["text"][:20])
    assert device.calls == 0  # a sampling task in the group: the host steps them all


def test_progress_counts_each_step_of_a_device_chunk(ov, device):
    seen = []
    ov.synthesize("One. " * 3, num_step=3, seed=0, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 3), (2, 3), (3, 3)] and device.calls == 3


def test_an_arrival_joins_at_the_device_chunks_end(ov, ref_clip, device):
    """A long-form request alone runs its first chunk whole on the device; a request added meanwhile is admitted
    at that chunk's end, and the two then run packed on the device. Both results equal their solo runs."""
    long_form, other = requests(ref_clip)[3], requests(ref_clip)[0]
    (req_a, set_a), (req_b, set_b) = prepare([long_form, other])
    a, b = Task(req_a, set_a), Task(req_b, set_b)
    with BatchEngine(ov, max_batch=4) as engine:
        engine.add(a)
        engine.step()
        assert a.unit == 1 and engine.stats["device_runs"] == 1 and device.calls == long_form["num_step"]
        engine.add(b)
        engine.step()
        assert b.t_started is not None and engine.stats["device_runs"] == 2  # admitted, the two on the device
        while engine.busy:
            engine.step()
    assert a.error is None and b.error is None
    assert_same_result(a.result, solo(ov, long_form), "long form")
    assert_same_result(b.result, solo(ov, other), "arrival")


def test_the_devices_error_bits_fail_the_request(ov, device, monkeypatch):
    def nan_scores(backend, a):
        np.frombuffer(ffi.buffer(a.state, 8), np.int32)[1] |= 1
        return 0

    monkeypatch.setattr(ov.lm, "maskgit_step", nan_scores)
    with pytest.raises(ValueError, match="NaN"):
        ov.synthesize("Fails on the device.", num_step=3, seed=0)
    monkeypatch.setattr(ov.lm, "maskgit_step", device)
    assert len(ov.synthesize("And the next one works.", num_step=2, seed=0, position_temperature=0.0).tokens) == 1
    assert device.calls == 2


def test_a_pick_of_minus_one_fails_its_request_and_its_batch_mates_finish(ov, ref_clip, monkeypatch):
    """A packed device run in which one prompt's picks include -1: that request fails with an error naming the LM
    (not the codec's later complaint about its codes); the others finish with their solo tokens."""
    reqs = requests(ref_clip)[:3]
    want = [solo(ov, r) for r in reqs]
    frames = [w.tokens[0].shape[1] for w in want]
    victim = 2  # the fake tells its chunks by their frame count
    assert frames.count(frames[victim]) == 1 and all(len(w.tokens) == 1 for w in want)
    step = UnscoredRows(frames[victim])
    monkeypatch.setattr(ov.lm, "maskgit_step", step)
    with pytest.raises(BatchFailed) as failed:
        ov.synthesize_batch(reqs, batch_size=3)
    assert list(failed.value.errors) == [victim] and step.calls > 0
    error = failed.value.errors[victim]
    assert isinstance(error, ValueError) and "no finite score" in str(error) and "NaN or -inf" in str(error)
    for i, (req, result) in enumerate(zip(reqs, failed.value.results)):
        if i != victim:
            assert_same_result(result, want[i], req["text"][:20])
    # alone, through the serving engine's path and through the one-prompt loop (GuidedChunk.run_steps)
    with pytest.raises(ValueError, match="no finite score"):
        solo(ov, reqs[victim])
    prompt = random_prompt(np.random.default_rng(0), 7, 0, frames[victim])
    prompt.input_ids[:, -frames[victim]:] = MASK_ID
    state = MaskGitState(frames[victim], GenerationConfig(num_step=4, position_temperature=0.0), mask_id=MASK_ID)
    with ov.lm.session([prompt], 2.0, True, device_steps=True) as s:
        with pytest.raises(ValueError, match="no finite score"):
            state.run_on_device(GuidedChunk(s, MASK_ID))


def test_a_request_cancelled_during_a_device_run_is_cancelled(ov, device):
    """The device path polls cancel() before and after its run: a request cancelled while its steps ran on the
    device fails with Cancelled, its tokens discarded, rather than finishing."""
    polls = []

    def cancel():
        polls.append(device.calls)
        return device.calls > 0  # set while the run was queued

    with pytest.raises(Cancelled):
        ov.synthesize("Stop me on the device.", seed=5, num_step=6, cancel=cancel)
    assert device.calls == 6 and polls == [0, 6]
