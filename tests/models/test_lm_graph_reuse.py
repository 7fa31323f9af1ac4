"""Graphs kept across sessions (LanguageModel.max_graphs): a session of a shape seen before takes over the
graph a closed one left, with the new prompts' content, and computes what a fresh graph computes."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.ggml import Graph
from omnivoice.runners.lm import LanguageModel

from .test_lm import random_prompt


@pytest.fixture(scope="module")
def fresh(runtime, tiny_gguf):
    """A model that keeps nothing: every session builds its graph."""
    model = LanguageModel(runtime, tiny_gguf["f32"], max_graphs=0)
    yield model
    model.close()


@pytest.fixture
def keeping(runtime, tiny_gguf):
    model = LanguageModel(runtime, tiny_gguf["f32"], max_graphs=4)
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
    model = LanguageModel(runtime, tiny_gguf["f32"], max_graphs=2)
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
    model = LanguageModel(runtime, tiny_gguf["f32"])
    assert model.max_graphs == (8 if runtime.is_gpu else 0)
    model.close()
    monkeypatch.setenv("OMNIVOICE_LM_GRAPHS", "3")
    model = LanguageModel(runtime, tiny_gguf["f32"])
    assert model.max_graphs == 3
    model.close()
