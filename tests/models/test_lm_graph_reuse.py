"""Graphs kept across sessions (LanguageModel.max_graphs): a session of a shape seen before takes over the
graph a closed one left, with the new prompts' content, and computes what a fresh graph computes."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.ggml import Graph, Runtime, types
from omnivoice.runners.lm import LanguageModel

from .test_lm import random_prompt
from class_check import poison_compute_buffer  # noqa: E402  (tools/: .test_lm put it on the path)


@pytest.fixture(scope="module")
def fresh(runtime, tiny_gguf):
    """A model that keeps nothing: every session builds its graph."""
    model = LanguageModel(runtime, tiny_gguf["f32"], max_graphs=0)
    yield model
    model.close()


@pytest.fixture
def keeping(runtime, tiny_gguf):
    model = LanguageModel(runtime, tiny_gguf["f32"], max_graphs=4, shape_classes=False)
    yield model
    model.close()


def run(model, prompts, tokens, guidance=2.0, greedy=True, with_logits=True):
    with model.session(prompts, guidance, greedy, with_logits=with_logits) as s:
        return s.reused, s.step(tokens)


def assert_same(got, want, runtime):
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for name in g:
            if runtime.is_gpu and name.endswith("logits"):
                np.testing.assert_allclose(g[name], w[name], rtol=0, atol=1e-5 * np.abs(w[name]).max())
            else:
                np.testing.assert_array_equal(g[name], w[name], err_msg=name)


def test_a_kept_graph_computes_the_new_prompts_content(keeping, fresh, rng, runtime):
    # same packed shape (43 cond + 21 target positions), different text, reference and so audio-mask layout
    a, b = random_prompt(rng, 13, 9, 21), random_prompt(rng, 20, 2, 21)
    tok_a, tok_b = [rng.integers(0, 1024, (8, 21)).astype(np.int32) for _ in range(2)]
    reused, _ = run(keeping, [a], [tok_a])
    assert not reused and keeping.kept_graphs == 1 and keeping.kept_bytes > 0
    reused, got = run(keeping, [b], [tok_b])
    assert reused and keeping.kept_graphs == 1
    _, want = run(fresh, [b], [tok_b])
    assert_same(got, want, runtime)


def test_a_sessions_build_is_timed_by_phase(keeping, rng):
    """ChunkSession.build_times (what tools/lm_step_time.py reports): a new graph's constants, nodes and allocation;
    a kept graph's rewritten constants alone."""
    p = random_prompt(rng, 13, 9, 21)
    for reused in (False, True):
        with keeping.session([p], 2.0, True) as s:
            assert s.reused is reused and set(s.build_times) == {"constants", "nodes", "allocate"}
            assert s.build_times["constants"] > 0
            if reused:
                assert s.build_times["nodes"] == s.build_times["allocate"] == 0
            else:
                assert s.build_times["nodes"] > 0 and s.build_times["allocate"] > 0


def test_a_kept_packed_graph_and_sampled_prompts(keeping, fresh, rng, runtime):
    """Several prompts with their own settings (a guidance scale per column, a sampled prompt's log-probs)."""
    shapes = [(11, 0, 17), (9, 5, 13)]
    tokens = [rng.integers(0, 1024, (8, t)).astype(np.int32) for _, _, t in shapes]
    settings = dict(guidance=[2.0, 3.0], greedy=[True, False])
    run(keeping, [random_prompt(rng, *s) for s in shapes], tokens, **settings)
    prompts = [random_prompt(rng, *s) for s in shapes]
    reused, got = run(keeping, prompts, tokens, **settings)
    assert reused
    assert_same(got, run(fresh, prompts, tokens, **settings)[1], runtime)


@pytest.mark.parametrize("change", ["shape", "guidance", "greedy", "logits"])
def test_what_the_graph_holds_is_part_of_its_shape(keeping, rng, change):
    p = random_prompt(rng, 13, 9, 21)
    tok = [p.input_ids[:, -21:]]
    run(keeping, [p], tok)
    other = {"shape": dict(prompts=[random_prompt(rng, 13, 9, 22)], tokens=[rng.integers(0, 1024, (8, 22))]),
             "guidance": dict(guidance=2.5), "greedy": dict(greedy=False), "logits": dict(with_logits=False)}[change]
    args = dict(prompts=[p], tokens=tok) | other
    assert run(keeping, args.pop("prompts"), args.pop("tokens"), **args)[0] is False
    assert keeping.kept_graphs == 2


def test_open_sessions_never_share_a_graph(keeping, rng):
    p, q = random_prompt(rng, 10, 0, 16), random_prompt(rng, 6, 4, 16)
    run(keeping, [p], [p.input_ids[:, -16:]], with_logits=False)
    with keeping.session([p], 2.0, True) as s1, keeping.session([q], 2.0, True) as s2:
        assert s1.reused and not s2.reused and s1.graph is not s2.graph
        assert keeping.kept_graphs == 0
    assert keeping.kept_graphs == 2  # both kept for the next two sessions of the shape


def test_the_least_recent_graphs_go_first(runtime, tiny_gguf, rng):
    model = LanguageModel(runtime, tiny_gguf["f32"], max_graphs=2, shape_classes=False)
    try:
        prompts = [random_prompt(rng, 10, 0, t) for t in (11, 12, 13)]
        for p in prompts:
            run(model, [p], [p.input_ids[:, -p.n_target:]])
        assert model.kept_graphs == 2
        assert not run(model, prompts[:1], [prompts[0].input_ids[:, -11:]])[0]   # evicted
        assert run(model, prompts[2:], [prompts[2].input_ids[:, -13:]])[0]       # kept
        # Over the memory bound, the oldest goes. The bound is crossed by a graph kept again, not by a new one:
        # a new graph's buffers may be a kept scheduler's (Runtime.schedulers on GPUs), sized by whatever graph
        # had it before, so its bytes need not grow with its positions.
        model.max_graph_bytes = model.kept_bytes - 1
        assert run(model, prompts[2:], [prompts[2].input_ids[:, -13:]])[0]       # taken, then kept again
        assert model.kept_graphs == 1
        assert run(model, prompts[2:], [prompts[2].input_ids[:, -13:]])[0]       # 13 kept, 11 gone
        assert model.kept_graphs == 1
        assert not run(model, prompts[:1], [prompts[0].input_ids[:, -11:]])[0]
    finally:
        model.close()
    assert model.kept_graphs == 0  # close frees them (their graphs point at the weights)


def test_a_closed_session_refuses_steps(keeping, rng):
    p = random_prompt(rng, 10, 0, 16)
    with keeping.session([p], 2.0, True) as s:
        pass
    with pytest.raises(RuntimeError, match="session is closed"):  # its graph is another session's now
        s.step([p.input_ids[:, -16:]])


def test_a_session_closed_with_a_run_in_flight_is_kept_whole(keeping, fresh, rng, runtime):
    p = random_prompt(rng, 10, 0, 16)
    tok = rng.integers(0, 1024, (8, 16)).astype(np.int32)
    with keeping.session([p], 2.0, True) as s:
        s.launch([tok])
    assert keeping.kept_graphs == 1
    q = random_prompt(rng, 3, 7, 16)
    reused, got = run(keeping, [q], [tok], with_logits=False)
    assert reused
    assert_same(got, run(fresh, [q], [tok], with_logits=False)[1], runtime)


def test_out_of_memory_frees_the_kept_graphs_and_builds_again(keeping, rng, monkeypatch):
    p = random_prompt(rng, 10, 0, 16)
    run(keeping, [p], [p.input_ids[:, -16:]])
    allocate = Graph.allocate

    def short_of_memory(self):  # memory held by kept graphs is what a new one lacks
        if keeping.kept_graphs:
            raise MemoryError("out of device memory")
        allocate(self)

    monkeypatch.setattr(Graph, "allocate", short_of_memory)
    q = random_prompt(rng, 10, 0, 17)
    assert run(keeping, [q], [q.input_ids[:, -17:]])[0] is False
    assert keeping.kept_graphs == 1  # the new one


def test_default_keeps_graphs_on_gpus_only(runtime, tiny_gguf, monkeypatch):
    monkeypatch.delenv("OMNIVOICE_LM_GRAPHS", raising=False)
    monkeypatch.delenv("OMNIVOICE_SHAPE_CLASSES", raising=False)
    model = LanguageModel(runtime, tiny_gguf["f32"])
    assert model.max_graphs == (16 if runtime.is_gpu else 0)
    assert model.shape_classes == (runtime.is_gpu and model.padded_attention)
    model.close()
    monkeypatch.setenv("OMNIVOICE_LM_GRAPHS", "3")
    monkeypatch.setenv("OMNIVOICE_SHAPE_CLASSES", "0")  # exact shapes where classes would be the default
    model = LanguageModel(runtime, tiny_gguf["f32"])
    assert (model.max_graphs, model.shape_classes) == (3, False)
    model.close()


# ---------------------------------------------------------------------------------------------- shape classes
# Padded attention runs on ggml's flash attention, so these tests take the k256 model: its head size, 128, is one
# CUDA's kernels take (the tiny model's 16 is not, and the tests skipped there). Its vocabularies and codebooks are
# the tiny model's (151676 text ids, 8 x 1025 audio ids), which random_prompt's ids fit.
@pytest.fixture(scope="module")
def fa_runtime(runtime):
    """The runtime padded attention is tested on: the suite's own on the CPU; on a GPU one whose K/V are F16, as in
    a user's process, since the suite's asks for float32 and CUDA's flash attention takes no F32 K/V
    (Runtime.supports_flash_attn)."""
    if not runtime.is_gpu:
        yield runtime
        return
    with Runtime(runtime.device.spec, exact_f32=False) as rt:
        yield rt


def padded_model(runtime, gguf, variant=None, **kw):
    """The GPU's attention layout (padded buckets, ggml's flash attention) on this runtime, in the plain graph or
    `variant`; skips where the runtime has no flash attention for the model's head size and K/V type."""
    from omnivoice.models.lm import Variant
    probe = LanguageModel(runtime, gguf, padded_attention=True, variant=Variant(), max_graphs=0, shape_classes=False)
    padded, head_dim = probe.padded_attention, probe.cfg.head_dim
    probe.close()
    if not padded:
        pytest.skip(f"padded attention needs flash attention, which {runtime.device.spec} lacks for head size "
                    f"{head_dim} with {'F16' if probe.flash_kv == types.F16 else 'F32'} K/V")
    return LanguageModel(runtime, gguf, padded_attention=True, variant=variant or Variant(), **kw)


@pytest.fixture
def classes(fa_runtime, k256_gguf):
    model = padded_model(fa_runtime, k256_gguf["f32"], max_graphs=4, shape_classes=True)
    yield model
    model.close()


@pytest.fixture(scope="module")
def exact(fa_runtime, k256_gguf):
    model = padded_model(fa_runtime, k256_gguf["f32"], max_graphs=0, shape_classes=False)
    yield model
    model.close()


def test_class_layout_rounds_the_packed_length_segments_and_targets():
    from omnivoice.runners.lm import CLASS_POSITIONS, class_layout, padded_constants
    lengths = [147, 125, 30, 10, 64]
    L, buckets = class_layout(lengths)
    assert L == 384 and L % CLASS_POSITIONS == 0           # 376 positions and one tail row at least
    assert buckets == [(64, [2, 3, 4]), (128, [1]), (192, [0])]
    assert class_layout([63])[0] == 64 and class_layout([64])[0] == 128
    c = padded_constants(buckets, lengths, L)
    R = 3 * 64 + 128 + 192
    rows, scatter = c["pad_rows"], c["pad_scatter"]
    assert rows.shape == (L,) and scatter.shape == (R,)
    assert (rows[sum(lengths):] == R).all()                 # the tail: the spare row after the buckets
    real = rows < R
    assert (scatter[rows[real]] == np.arange(L)[real]).all() and (np.sort(rows[real]) == np.unique(rows[real])).all()
    assert (scatter == L).sum() == R - sum(lengths)         # every other padded row: left out of the result
    assert np.isneginf(c["pad_mask_0"][1, 0, :, 10:]).all() and (c["pad_mask_0"][1, 0, :, :10] == 0).all()


@pytest.mark.parametrize("shapes", [[(13, 9, 21)], [(13, 9, 21), (7, 0, 40), (20, 3, 5)]])
def test_a_class_graph_computes_the_exact_shapes_picks(classes, exact, rng, runtime, shapes):
    """A shape class's padding (tail rows, queries and spare head columns) changes no real position's result
    beyond summation order: the picks and scores of the exact-shape graph (ggml's flash attention tiles its
    queries by the bucket's length, 5e-6 off on the CPU)."""
    prompts = [random_prompt(rng, *s) for s in shapes]
    tokens = [p.input_ids[:, -p.n_target:] for p in prompts]
    guidance = [2.0, 3.0, 1.5][:len(prompts)]
    with classes.session(prompts, guidance, True) as s:
        assert s.L % 64 == 0 and s.L > sum(p.input_ids.shape[1] + p.n_target for p in prompts)
        got = s.step(tokens)
    with exact.session(prompts, guidance, True) as s:
        want = s.step(tokens)
    for g, w in zip(got, want):
        assert g.keys() == w.keys() == {"pred", "score"}
        assert np.mean(g["pred"] == w["pred"]) > 0.99
        np.testing.assert_allclose(g["score"], w["score"], rtol=0, atol=(1e-3 if runtime.is_gpu else 1e-4)
                                   * np.abs(w["score"]).max())


def test_a_class_tail_stays_finite_whatever_the_compute_buffer_held(classes, exact, rng):
    """A shape class's tail rows are no segment's: nothing writes their attention outputs. Those live in a zeroed
    constant, so the tail's activations, and the spare K/V row they are scattered to, stay finite however the
    compute buffer was left (NaN here); left to the compute buffer, the spare row went non-finite in 11 of 300
    class sessions on the CPU, and on CUDA class graphs of 2 to 4 prompts gave NaN logits under load."""
    from omnivoice.ggml.graph import read_tensor

    prompts = [random_prompt(rng, *s) for s in [(13, 9, 21), (7, 0, 40), (20, 3, 5)]]
    tokens = [p.input_ids[:, -p.n_target:] for p in prompts]
    with classes.session(prompts, 2.0, True) as s:
        poison_compute_buffer(s.graph)
        got = s.step(tokens)
        for name in ("pad_q", "pad_k", "pad_v"):
            assert np.isfinite(read_tensor(s.constants[name]).astype(np.float32)).all(), name
    with exact.session(prompts, 2.0, True) as s:
        want = s.step(tokens)
    for g, w in zip(got, want):
        assert np.mean(g["pred"] == w["pred"]) > 0.99 and np.isfinite(g["score"]).all()


def test_a_class_graphs_later_runs_keep_its_spare_row_finite(fa_runtime, k256_gguf):
    """The graph a GPU runs (BF16 weights; the attention outputs written by their set_rows in the output product's
    BF16; ggml's products, which carry a non-finite input into their result), nothing poisoned. Were the outputs a
    tensor of the compute buffer, the allocator would free it once the last layer's product has read it and hand
    its memory to the logits and the guided pick: from the second run on its tail rows hold those F32 bits, read
    as BF16, non-finite ones among them, and the spare Q/K/V row goes non-finite (here at the second run; the
    first run's is finite, as every CUDA failure's first pick was good)."""
    from omnivoice.ggml.graph import read_tensor
    from omnivoice.models.lm import Variant

    model = padded_model(fa_runtime, k256_gguf["bf16"], Variant(fused_casts=True, cast_scratch=True, attn_cast=True),
                         max_graphs=0, shape_classes=True, cpu_products="ggml")
    try:
        p = random_prompt(np.random.default_rng(1), 13, 9, 21)
        with model.session([p], 2.0, True) as s:
            assert s.L > p.input_ids.shape[1] + p.n_target                  # a tail
            for run in range(3):
                assert np.isfinite(s.step([p.input_ids[:, -p.n_target:]])[0]["score"]).all(), run
                for name in ("pad_q", "pad_k", "pad_v"):
                    assert np.isfinite(read_tensor(s.constants[name]).astype(np.float32)).all(), (run, name)
    finally:
        model.close()


def test_requests_of_one_class_share_a_kept_graph(classes, rng, fa_runtime, k256_gguf):
    a, b = random_prompt(rng, 13, 9, 21), random_prompt(rng, 30, 0, 17)   # 43 + 21 and 47 + 17: one class
    c = random_prompt(rng, 13, 9, 80)                                      # targets past the class's
    for p, reused in ((a, False), (b, True), (c, False)):
        tok = [rng.integers(0, 1024, (8, p.n_target)).astype(np.int32)]
        was, got = run(classes, [p], tok, with_logits=False)
        assert was is reused
        fresh_class = padded_model(fa_runtime, k256_gguf["f32"], max_graphs=0, shape_classes=True)
        try:  # a kept graph given new content computes what a new graph of the class computes
            assert_same(got, run(fresh_class, [p], tok, with_logits=False)[1], fa_runtime)
        finally:
            fresh_class.close()
    assert classes.kept_graphs == 2


def test_a_kept_class_graph_starts_from_zeroed_padded_rows(classes, exact, rng):
    """A kept class graph serves prompts of other lengths: rows that were the last session's real ones are padding
    or tail rows now, which no set_rows of the new session writes. They are zeroed again, as a new graph's are, so
    that what a session left there (non-finite values here, as a session whose outputs went non-finite leaves them)
    reaches neither the spare Q/K/V row nor, through a masked key's weight of 0, a real row."""
    from omnivoice.ggml import ffi, lib
    from omnivoice.ggml.graph import read_tensor

    padded = ("pad_q", "pad_k", "pad_v", "pad_out")
    longer, shorter = random_prompt(rng, 20, 0, 30), random_prompt(rng, 13, 9, 21)  # 50 + 30 and 43 + 21: one class
    with classes.session([longer], 2.0, True) as s:
        s.step([longer.input_ids[:, -longer.n_target:]])
        for name in padded:
            t = s.constants[name]
            nan = np.full(lib.ggml_nbytes(t), 0xFF, np.uint8)
            lib.ggml_backend_tensor_set(t, ffi.from_buffer(nan), 0, nan.nbytes)
    tokens = [shorter.input_ids[:, -shorter.n_target:]]
    with classes.session([shorter], 2.0, True) as s:
        assert s.reused
        got = s.step(tokens)
        for name in padded:
            assert np.isfinite(read_tensor(s.constants[name]).astype(np.float32)).all(), name
    with exact.session([shorter], 2.0, True) as s:
        want = s.step(tokens)
    assert np.mean(got[0]["pred"] == want[0]["pred"]) > 0.99 and np.isfinite(got[0]["score"]).all()


def test_sampled_prompts_logits_and_large_batches_keep_exact_shapes(classes, rng):
    """...and their graphs are not kept: only classes are, where classes are on."""
    from omnivoice.runners.lm import CLASS_MAX_PROMPTS
    p = random_prompt(rng, 13, 9, 21)
    exact_length = p.input_ids.shape[1] + p.n_target
    for kw in (dict(greedy=False), dict(with_logits=True)):
        with classes.session([p], 2.0, kw.get("greedy", True), with_logits=kw.get("with_logits", False)) as s:
            assert s.L == exact_length
    with classes.session([p] * (CLASS_MAX_PROMPTS + 1), 2.0, True) as s:
        assert s.L == exact_length * (CLASS_MAX_PROMPTS + 1)
    assert classes.kept_graphs == 0
    with classes.session([p], 2.0, True):
        pass
    assert classes.kept_graphs == 1


def test_shape_classes_need_padded_attention(runtime, tiny_gguf, monkeypatch):
    with pytest.raises(ValueError, match="padded attention"):
        LanguageModel(runtime, tiny_gguf["f32"], padded_attention=False, shape_classes=True)
    monkeypatch.setenv("OMNIVOICE_SHAPE_CLASSES", "1")  # the variable asks what the argument would
    with pytest.raises(ValueError, match="padded attention"):
        LanguageModel(runtime, tiny_gguf["f32"], padded_attention=False)


def test_a_class_graph_sizes_its_own_buffers(fa_runtime, k256_gguf, rng, monkeypatch):
    """A class's graph is kept for many sessions: it takes a new scheduler, not a pooled one whose buffers a large
    graph grew (which would hold that memory for as long as the class is kept, or exceed max_graph_bytes)."""
    from omnivoice.ggml.backend import SchedulerPool
    from omnivoice.runners.lm import CLASS_MAX_PROMPTS
    monkeypatch.setattr(fa_runtime, "schedulers", SchedulerPool(max_kept=2, max_bytes=1 << 40,
                                                                size_of=fa_runtime.sched_buffer_size))
    model = padded_model(fa_runtime, k256_gguf["f32"], max_graphs=4, shape_classes=True)
    try:
        big = [random_prompt(rng, 40, 0, 200) for _ in range(CLASS_MAX_PROMPTS + 1)]  # exact shapes
        with model.session(big, 2.0, True) as s:
            big_bytes = s.graph.buffer_size()
        model.clear_graphs()  # its scheduler, buffers and all, goes to the pool
        assert len(fa_runtime.schedulers) == 1
        p = random_prompt(rng, 10, 0, 20)
        with model.session([p], 2.0, True) as s:
            assert s.graph.buffer_size() < big_bytes / 4
        assert len(fa_runtime.schedulers) == 1  # not taken
    finally:
        model.close()
        fa_runtime.schedulers.clear()
