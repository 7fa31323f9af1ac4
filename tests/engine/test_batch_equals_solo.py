"""A request's tokens (and audio) do not depend on what it is batched with: F32 on the CPU, bit for bit.

The mixed batch has auto, design and clone requests, two languages and a third script, different durations
and step counts, one long-form request (several chunks, chunk 0 voicing the rest), greedy position choice and
seeded Gumbel noise, one request sampling its classes. Each request's result equals its own synthesize() call.
"""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.engine import BatchEngine
from omnivoice.engine.offline import BatchFailed, prepare, run_batch

from .helpers import assert_same_result, solo

LONG = "The first sentence is here. A second one follows it. Then a third comes. And a fourth ends it. " * 2


def mixed(ref_clip, greedy: bool) -> list[dict]:
    ref, ref_text = ref_clip
    pos = {"position_temperature": 0.0} if greedy else {}
    return [
        dict(id="auto-en", text="Hello world, this is a test.", language="English", seed=11, num_step=6, **pos),
        dict(id="design-zh", text="今天天气很好，我们出去走走。", instruct="female, low pitch", language="zh",
             seed=12, num_step=5, duration=1.6, **pos),
        dict(id="clone-fr", text="Bonjour à tous, et bienvenue.", language="French", ref_audio=ref,
             ref_text=ref_text, seed=13, num_step=6, **pos),
        dict(id="long", text=LONG, language="en", seed=14, num_step=4, chunk_duration=2.5, chunk_threshold=4.0, **pos),
        dict(id="design-short", text="Short.", instruct="male, elderly", seed=15, num_step=7, duration=0.4,
             speed=1.3, guidance_scale=1.0, **pos),
        dict(id="clone-classes", text="Sampled classes.", ref_audio=ref, ref_text=ref_text, seed=16, num_step=4,
             class_temperature=0.7, denoise=False, **pos),
    ]


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "seeded-noise"])
def test_mixed_batch_equals_solo_runs(ov, ref_clip, greedy):
    requests = mixed(ref_clip, greedy)
    # three slots for six requests: slots are freed and refilled while others run, the long-form request
    # contributes one chunk at a time
    got = ov.synthesize_batch(requests, batch_size=3)
    assert len(got) == len(requests)
    assert len(got[3].tokens) > 2, "the long-form request should have several chunks"
    for req, result in zip(requests, got):
        assert_same_result(result, solo(ov, req), req["id"])


def test_pipelined_groups_equal_solo_runs(ov, ref_clip, monkeypatch):
    """Pipelined (two groups whose graph runs alternate with the host's choices, each launched without waiting;
    the GPU default, forced here on the CPU) every request's result still equals its solo run."""
    from omnivoice.engine import core

    monkeypatch.setattr(core, "PIPELINE_MIN_REQUESTS", 2)
    requests = mixed(ref_clip, greedy=False)
    prepared = prepare(requests)
    rounds = []
    with BatchEngine(ov, max_batch=4, pipeline=True, device_requests=1) as engine:
        assign = engine._assign

        def spy(tasks):
            assign(tasks)
            rounds.append([engine._member[id(t)] for t in tasks])

        engine._assign = spy
        outcomes = dict(run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine))
        assert engine.timings["lm_run"] > 0 and engine.timings["maskgit"] > 0
    assert sorted(rounds[0]) == [0, 0, 1, 1], rounds  # the first four split evenly between the two groups
    for i, req in enumerate(requests):
        assert_same_result(outcomes[i], solo(ov, req), req["id"])


def test_ctrl_c_while_waiting_for_a_pipelined_run(ov, monkeypatch):
    """Ctrl-C while the engine waits for a pipelined group's run (launched, not yet collected): closing the
    engine closes every session, each waiting for its run before freeing its graph, and the model serves the
    next request."""
    from omnivoice.engine import core
    from omnivoice.runners.lm import ChunkSession

    monkeypatch.setattr(core, "PIPELINE_MIN_REQUESTS", 2)
    events = []
    finish, close = ChunkSession.finish, ChunkSession.close

    def interrupted(self):
        events.append("finish")
        if events.count("finish") == 3:  # a Ctrl-C just before the first wait of the third round, both
            raise KeyboardInterrupt      # groups' runs launched
        return finish(self)

    def traced_close(self):
        events.append("close launched" if self._launched is not None else "close")
        close(self)

    monkeypatch.setattr(ChunkSession, "finish", interrupted)
    monkeypatch.setattr(ChunkSession, "close", traced_close)
    requests = [dict(text=f"Request {i}.", seed=i, num_step=4, duration=1.0) for i in range(4)]
    prepared = prepare(requests)
    engine = BatchEngine(ov, max_batch=4, pipeline=True, device_requests=1)
    with pytest.raises(KeyboardInterrupt):
        for _ in run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine):
            pass
    monkeypatch.setattr(ChunkSession, "finish", finish)
    engine.close()
    # both groups' sessions closed, the interrupted one with its run launched and never waited for (Graph.close
    # waits for it); the run_batch generator's cleanup collected the other group's run first
    closes = [e for e in events[3:] if e.startswith("close")]
    assert sorted(closes) == ["close", "close launched"], events
    assert not engine.busy
    assert_same_result(ov.synthesize_batch(requests[:1])[0], solo(ov, requests[0]), "after")


def test_one_graph_serves_many_steps(ov):
    """Requests that start together and share a step count are packed into one graph for all their steps."""
    requests = [dict(text=f"Request number {i}.", seed=i, num_step=5) for i in range(4)]
    prepared = prepare(requests)
    with BatchEngine(ov, max_batch=4) as engine:
        outcomes = dict(run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine))
        assert engine.stats["steps"] == 5 and engine.stats["graphs"] == 1
        assert engine.stats["packed_requests"] == 20
    for i, req in enumerate(requests):
        assert_same_result(outcomes[i], solo(ov, req), f"request {i}")


def test_packed_lm_step_equals_solo_bit_for_bit(ov):
    """The runner level: logits, guided log-probs, argmax and max of each prompt packed with others of other
    lengths and settings equal the prompt's own graph, bit for bit (every op works per column or per segment;
    the CPU's GEMM accumulates each output element in the same order whatever the packed width)."""
    from omnivoice.pipeline import Chunk

    settings = ov.settings()
    shapes = [("Hello world.", 37), ("Another, longer text for this one!", 61), ("x", 1), ("Hi", 2), ("z" * 40, 125)]
    prompts = [ov.pipeline.prompt(Chunk(text, T, None, None), settings)[1] for text, T in shapes]
    rng = np.random.default_rng(0)
    tokens = []
    for p in prompts:
        t = np.full((8, p.n_target), 1024, np.int32)
        known = rng.random(t.shape) < 0.5
        t[known] = rng.integers(0, 1024, int(known.sum()))
        tokens.append(t)
    greedy = [True, False, True, False, True]
    guidance = [2.0, 0.0, 1.5, 2.0, 3.0]
    alone = []
    for p, t, gr, gs in zip(prompts, tokens, greedy, guidance):
        with ov.lm.session([p], gs, gr, with_logits=True) as s:
            alone.append(s.step([t])[0])
    for order in ([0, 1, 2, 3, 4], [4, 2, 0], [3, 1]):
        with ov.lm.session([prompts[i] for i in order], [guidance[i] for i in order], [greedy[i] for i in order],
                           with_logits=True) as s:
            packed = s.step([tokens[i] for i in order])
        for j, i in enumerate(order):
            assert sorted(packed[j]) == sorted(alone[i])
            if ov.lm.runtime.is_gpu:  # GPU kernels pick tiles by width: equal up to rounding, not bit for bit
                assert_close_step(packed[j], alone[i], f"prompt {i} in {order}", gpu=True)
                continue
            for name, value in packed[j].items():
                np.testing.assert_array_equal(value, alone[i][name], err_msg=f"prompt {i} in {order}: {name}")


def assert_close_step(got: dict, want: dict, what: str, gpu: bool) -> None:
    """Logits within rounding, picks equal but for near-ties. The bound on GPUs: ggml's CUDA flash attention
    rounds K/V to F16 even for F32 weights (the full-size F32 parity run: 4.2e-3 at logit scale 8.3), and its
    F32 products of at most 16 columns run on tensor cores with TF32 inputs (mmf.cu), which a prompt of a few
    positions alone takes and the packed graph does not (the tiny model on the H200: 2.2e-3 of the scale)."""
    atol = 5e-3 if gpu else 2e-5
    for name in ("cond_logits", "uncond_logits"):
        if name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=atol * np.abs(want[name]).max(),
                                       err_msg=f"{what}: {name}")
    if "pred" in want:  # greedy prompts
        assert np.mean(got["pred"] == want["pred"]) > 0.99, what
    else:  # sampling prompts: their guided log-probs
        np.testing.assert_allclose(got["log_probs"], want["log_probs"], rtol=0,
                                   atol=atol * np.abs(want["log_probs"]).max(), err_msg=f"{what}: log_probs")


@pytest.mark.parametrize("kv", ["f32", "f16"])
def test_padded_attention_agrees_with_per_segment_attention(ov, tiny_gguf, kv):
    """The GPU's attention layout (segments of similar length padded into one call per bucket, K and V
    scattered into it in their flash-attention type, F16 on GPUs) computes the same logits as one call per
    segment (ggml's flash attention: the plain graph, not the CPU's FMA attention), up to summation order; the CPU
    default keeps per-segment calls."""
    from omnivoice.ggml import types
    from omnivoice.models.lm import Variant
    from omnivoice.pipeline import Chunk
    from omnivoice.runners.lm import LanguageModel, padded_buckets

    assert padded_buckets([5, 40, 6, 41, 100, 7, 23]) == [(7, [0, 2, 5]), (41, [6, 1, 3]), (100, [4])]
    # a five-second request's cond and uncond: within 1.25x, but 3 and 2 chunks of 64 keys
    assert padded_buckets([147, 125, 147, 125]) == [(125, [1, 3]), (147, [0, 2])]
    settings = ov.settings()
    shapes = [("Hello world.", 37), ("Another, longer text for this one!", 61), ("x", 3), ("Hi", 40),
              ("z" * 40, 125)]
    prompts = [ov.pipeline.prompt(Chunk(text, T, None, None), settings)[1] for text, T in shapes]
    tokens = [np.full((8, p.n_target), 1024, np.int32) for p in prompts]
    models = [LanguageModel(ov.lm.runtime, tiny_gguf["f32"], padded_attention=padded, variant=Variant())
              for padded in (False, True)]
    if not models[1].flash_attn:
        for lm in models:
            lm.close()
        pytest.skip(f"the padded layout needs flash attention, which {ov.lm.runtime.device.spec} lacks for this "
                    "model (head size 16, F32 K/V)")
    assert models[1].padded_attention and not models[0].padded_attention
    results, nodes = [], []
    try:
        for lm in models:
            lm.flash_kv = types.F16 if kv == "f16" else types.F32
            with lm.session(prompts, 2.0, True, with_logits=True) as s:
                results.append(s.step(tokens))
                nodes.append(s.graph.n_nodes)
    finally:
        for lm in models:
            lm.close()
    expected, got = results
    assert nodes[1] < nodes[0]
    for i, (a, b) in enumerate(zip(got, expected)):
        assert_close_step(a, b, f"prompt {i}", gpu=ov.lm.runtime.is_gpu)


def test_padded_outputs_scattered_in_the_products_type_equal_the_gather(ov, tiny_gguf):
    """Under attn_cast the padded buckets' outputs go back into packed order by set_rows in the output product's
    type (BF16 here: one pass instead of a gather of the joined F32 outputs and then the product's conversion):
    the logits equal the gather's to the bit, since both round each value to BF16 once, to nearest even."""
    from omnivoice.ggml import types
    from omnivoice.models.lm import Variant
    from omnivoice.pipeline import Chunk
    from omnivoice.runners.lm import LanguageModel

    settings = ov.settings()
    shapes = [("Hello world.", 37), ("Another, longer text for this one!", 61), ("x", 3), ("z" * 40, 125)]
    prompts = [ov.pipeline.prompt(Chunk(text, T, None, None), settings)[1] for text, T in shapes]
    tokens = [np.full((8, p.n_target), 1024, np.int32) for p in prompts]
    # ggml's own products (a package kernel would take the F32 outputs where the BF16 ones fall back to ggml)
    models = [LanguageModel(ov.lm.runtime, tiny_gguf["bf16"], padded_attention=True, cpu_products="ggml",
                            variant=Variant(attn_cast=cast)) for cast in (False, True)]
    if not models[0].flash_attn:
        for lm in models:
            lm.close()
        pytest.skip(f"the padded layout needs flash attention, which {ov.lm.runtime.device.spec} lacks for this "
                    "model (head size 16)")
    assert models[0].weights.layers[0].o.type == types.BF16
    results = []
    try:
        for lm in models:
            with lm.session(prompts, 2.0, True, with_logits=True) as s:
                results.append(s.step(tokens))
    finally:
        for lm in models:
            lm.close()
    for i, (a, b) in enumerate(zip(*results)):
        for name in a:
            np.testing.assert_array_equal(b[name], a[name], err_msg=f"prompt {i}: {name}")


def test_a_batch_that_does_not_fit_is_halved(ov, monkeypatch):
    """A packed graph that cannot be allocated puts half of its requests back (their state kept) and lowers
    the position budget; a request that does not fit alone fails with MemoryError, the others finish."""
    real = ov.lm.session

    def session(prompts, *args, **kwargs):
        if len(prompts) > 2 or any(p.n_target > 60 for p in prompts):
            raise MemoryError("could not allocate the compute graph (test)")
        return real(prompts, *args, **kwargs)

    requests = [dict(text=f"Request {i} fits.", seed=i, num_step=4, duration=1.0) for i in range(5)]
    requests.append(dict(text="This one is too long to fit.", seed=9, num_step=4, duration=3.0))
    prepared = prepare(requests)
    monkeypatch.setattr(ov.lm, "session", session)
    with BatchEngine(ov, max_batch=8) as engine:
        outcomes = dict(run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine))
        assert engine.limits.max_positions is not None
    monkeypatch.undo()
    assert isinstance(outcomes[5], MemoryError)
    for i, req in enumerate(requests[:5]):
        assert_same_result(outcomes[i], solo(ov, req), f"request {i}")


def test_a_batch_over_the_gpu_position_limit_is_split(ov, monkeypatch):
    """On a GPU a packed graph holds at most MAX_GPU_POSITIONS (ggml's CUDA kernels abort past 65 535): a
    session asked for more raises MemoryError (which the engine answers by halving its batch, as above), and
    the engine's limits keep its batches below it. Checked with the limit lowered and the CPU runtime taken
    for a GPU."""
    from omnivoice.engine import memory
    from omnivoice.runners import lm as runner

    requests = [dict(text=f"Request {i} fits.", seed=i, num_step=3, duration=1.0) for i in range(4)]
    prepared = prepare(requests)
    monkeypatch.setattr(type(ov.lm.runtime), "is_gpu", property(lambda self: True))
    monkeypatch.setattr(runner, "MAX_GPU_POSITIONS", 150)
    monkeypatch.setattr(memory, "MAX_GPU_POSITIONS", 150)
    with pytest.raises(MemoryError, match="at most 150"):
        ov.lm.session([_prompt(ov, "Too long for one graph.", 100)], 2.0, True)
    sizes = []
    real = ov.lm.session

    def session(prompts, *args, **kwargs):
        sizes.append(len(prompts))
        return real(prompts, *args, **kwargs)

    monkeypatch.setattr(ov.lm, "session", session)
    with BatchEngine(ov, max_batch=4, pipeline=False) as engine:
        assert engine.limits.max_positions == 150
        outcomes = dict(run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine))
    monkeypatch.undo()
    assert max(sizes) < 4, sizes   # never all four (about 60 positions each) in one graph
    for i, req in enumerate(requests):
        assert_same_result(outcomes[i], solo(ov, req), f"request {i}")


def _prompt(ov, text: str, n_target: int):
    from omnivoice.pipeline import Chunk

    return ov.pipeline.prompt(Chunk(text, n_target, None, None), ov.settings())[1]


def test_warm_up_leaves_the_engine_as_it_was(ov, ref_clip):
    """The warm-up batch a GPU actor runs at load (auto, design, clone) leaves nothing behind: the engine is
    idle after it and the next batch still equals each request's solo run."""
    from omnivoice.engine.offline import warm_up

    requests = mixed(ref_clip, greedy=False)[:3]
    prepared = prepare(requests)
    with BatchEngine(ov, max_batch=4) as engine:
        assert warm_up(ov, engine) > 0
        assert not engine.busy
        outcomes = dict(run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine))
    for i, req in enumerate(requests):
        assert_same_result(outcomes[i], solo(ov, req), req["id"])


def test_a_failed_batched_decode_falls_back_to_each_request_alone(ov, monkeypatch):
    """Requests finishing together are decoded together and each finished as soon as its audio is back. A batched
    decode that fails after the first came back leaves it finished; the others are decoded alone, so only a bad
    one fails, and every request finishes once."""
    from omnivoice.codec import AudioCodec

    real, calls = AudioCodec.decode_iter, []

    def decode_iter(self, codes_list):
        calls.append(len(codes_list))
        if len(calls) == 2:
            raise ValueError("a bad request (test)")
        it = real(self, codes_list)
        yield next(it)
        if len(calls) == 1:
            raise RuntimeError("the batched decode failed (test)")
        yield from it

    requests = [dict(text=f"Request {i} ends here.", seed=i, num_step=3, duration=1.0) for i in range(3)]
    prepared = prepare(requests)
    monkeypatch.setattr(AudioCodec, "decode_iter", decode_iter)
    with BatchEngine(ov, max_batch=4) as engine:
        outcomes = list(run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine))
    monkeypatch.undo()
    assert calls == [3, 1, 1]  # one batch of three; the two not given decoded alone, the first one not again
    assert sorted(i for i, _ in outcomes) == [0, 1, 2]
    failed = [i for i, r in outcomes if isinstance(r, ValueError)]
    assert len(failed) == 1 and failed[0] != outcomes[0][0]
    for i, result in outcomes:
        if i not in failed:
            assert_same_result(result, solo(ov, requests[i]), f"request {i}")


def test_a_lone_failed_decode_fails_its_request_and_the_engine_goes_on(ov, monkeypatch):
    """A request whose tokens are decoded alone (the others still stepping) and whose decode fails fails alone:
    the error was raised out of the engine's step, which lost the batch (and stopped the serving engine's
    thread, failing every request it held)."""
    from omnivoice.codec import AudioCodec

    real, calls = AudioCodec.decode_iter, []

    def decode_iter(self, codes_list):
        calls.append(len(codes_list))
        if len(calls) == 1:
            raise ValueError("a bad request (test)")
        yield from real(self, codes_list)

    requests = [dict(text="Short one.", seed=0, num_step=2, duration=1.0),
                dict(text="A longer one ends later.", seed=1, num_step=6, duration=1.0)]
    want = solo(ov, requests[1])
    prepared = prepare(requests)
    monkeypatch.setattr(AudioCodec, "decode_iter", decode_iter)
    with BatchEngine(ov, max_batch=4) as engine:
        outcomes = dict(run_batch(ov, [(i, r, s) for i, (r, s) in enumerate(prepared)], engine=engine))
    monkeypatch.undo()
    assert calls == [1, 1]  # each decoded when its last step was taken, the short one's first
    assert isinstance(outcomes[0], ValueError) and "a bad request" in str(outcomes[0])
    assert_same_result(outcomes[1], want, "the other request")


def test_a_pick_of_minus_one_fails_its_request_and_its_batch_mates_finish(ov, ref_clip, monkeypatch):
    """The host's MaskGIT (no device step): one request's guided pick comes back as rows of all-NaN logits give it
    (prediction -1, score -FLT_MAX, which is no NaN) for codebooks 1-6 of every frame. That request fails with an
    error naming the LM; the others packed with it finish with their solo tokens."""
    from omnivoice.runners.lm import ChunkSession

    monkeypatch.setattr(ov.lm, "maskgit_step", None)  # the host path on every backend
    requests = mixed(ref_clip, greedy=True)[:3]
    want = [solo(ov, r) for r in requests]
    frames = [w.tokens[0].shape[1] for w in want]
    victim = 1  # told by its frame count
    assert frames.count(frames[victim]) == 1 and all(len(w.tokens) == 1 for w in want)
    real = ChunkSession.finish

    def finish(self):
        out = real(self)
        for r in out:
            if "pred" in r and r["pred"].shape[1] == frames[victim]:
                r["pred"][1:7] = -1
                r["score"][1:7] = -np.finfo(np.float32).max
        return out

    monkeypatch.setattr(ChunkSession, "finish", finish)
    with pytest.raises(BatchFailed) as failed:
        ov.synthesize_batch(requests, batch_size=3)
    assert list(failed.value.errors) == [victim]
    error = failed.value.errors[victim]
    assert isinstance(error, ValueError) and "no finite score" in str(error) and "NaN or -inf" in str(error)
    for i, (req, result) in enumerate(zip(requests, failed.value.results)):
        if i != victim:
            assert_same_result(result, want[i], req["id"])
