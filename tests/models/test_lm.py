"""The LM graph against an independent float64 numpy forward on the tiny random checkpoint.

Covers the packed cond/uncond layout (attention per segment, positions restarting at 0), the hybrid text/audio
input embedding, the in-graph guidance + log-softmax + greedy pick, several prompts in one chunk, and the
stacked q/k/v and gate/up matrices that GPU runtimes load.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from omnivoice.ggml import types
from omnivoice.runners.lm import LanguageModel

from .lm_reference import forward, guided

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from class_check import random_prompt  # noqa: E402  (a prompt of given sizes: tools/class_check.py draws them too)


@pytest.fixture(scope="module")
def ref_weights(tiny_checkpoint):
    return {k: v.astype(np.float64) for k, v in load_file(str(tiny_checkpoint / "model.safetensors")).items()
            if v.dtype.kind == "f"}


@pytest.fixture(scope="module")
def lm(runtime, tiny_gguf):
    model = LanguageModel(runtime, tiny_gguf["f32"])
    yield model
    model.close()


def ref_cfg(lm):
    c = lm.cfg
    return dict(n_layer=c.n_layer, n_head=c.n_head, n_head_kv=c.n_head_kv, head_dim=c.head_dim, eps=c.rms_eps,
                theta=c.rope_theta, n_codebook=c.n_codebook, audio_vocab=c.audio_vocab)


@pytest.mark.parametrize("flash", [False, True])
def test_step0_logits_match_numpy(lm, ref_weights, rng, runtime, flash):
    if flash and not runtime.supports_flash_attn(lm.cfg.head_dim, lm.flash_kv):
        pytest.skip(f"no flash attention for head_dim {lm.cfg.head_dim} on {runtime.device.spec}")
    lm.flash_attn, saved = flash, lm.flash_attn
    try:
        p = random_prompt(rng, 23, 17, 31)
        with lm.session([p], guidance_scale=2.0, greedy=True, with_logits=True) as s:
            out = s.step([p.input_ids[:, -p.n_target:]])[0]
    finally:
        lm.flash_attn = saved
    cfg = ref_cfg(lm)
    cond = forward(ref_weights, cfg, p.input_ids.astype(np.int64), p.audio_mask)[:, -p.n_target:]
    T = p.n_target
    uncond = forward(ref_weights, cfg, p.input_ids[:, -T:].astype(np.int64), p.audio_mask[-T:])
    scale = np.abs(cond).max()
    # F32 end to end, unless flash attention keeps K and V in F16 (GPUs)
    exact = not flash or lm.flash_kv == types.F32
    bound = 1e-5 if exact else 2e-3
    assert np.abs(out["cond_logits"] - cond).max() / scale < bound
    assert np.abs(out["uncond_logits"] - uncond).max() / scale < bound

    lp = guided(cond, uncond, 2.0)
    lp[..., 1024] = -np.inf
    if exact:
        np.testing.assert_array_equal(out["pred"], lp.argmax(-1))
    np.testing.assert_allclose(out["score"], lp.max(-1), atol=1e-4 if exact else 2e-2)


@pytest.mark.parametrize("quant", ["f32", "bf16", "q8_0"])  # stacking joins raw rows, blocks included
def test_stacked_projections_compute_the_same(runtime, tiny_gguf, rng, quant):
    p = random_prompt(rng, 13, 9, 21)
    outs = []
    for stack in (False, True):
        model = LanguageModel(runtime, tiny_gguf[quant], stack_projections=stack)
        try:
            layer = model.weights.layers[0]
            assert (layer.qkv is not None, layer.q is None, layer.gate_up is not None) == (stack,) * 3
            with model.session([p], guidance_scale=2.0, greedy=True, with_logits=True) as s:
                outs.append(s.step([p.input_ids[:, -p.n_target:]])[0])
        finally:
            model.close()
    separate, stacked = outs
    scale = np.abs(separate["cond_logits"]).max()
    for name in ("cond_logits", "uncond_logits"):
        assert np.abs(stacked[name] - separate[name]).max() / scale < 1e-6
    np.testing.assert_array_equal(stacked["pred"], separate["pred"])


def test_a_closed_model_refuses_new_sessions(runtime, tiny_gguf, rng):
    model = LanguageModel(runtime, tiny_gguf["f32"])
    model.close()
    with pytest.raises(RuntimeError, match="is closed"):   # its weight records point at freed memory
        model.session([random_prompt(rng, 13, 9, 21)], 2.0, True)


@pytest.mark.parametrize("n_ref", [0, 1])  # an even and an odd packed length
def test_matrix_product_inputs_are_64_byte_aligned(tiny_gguf, rng, n_ref, runtime):
    """ggml's products (cpu_products="ggml": the CPU's F32 default is the package's FMA kernel, which reads any
    address)."""
    from omnivoice.ggml import ffi, lib

    if runtime.is_gpu:
        # The 64-byte lines are the CPU's (AVX-512 loads of host memory). A GPU tensor's `data` is an offset in
        # device memory, which ggml's allocator aligns to the device's own requirement (Vulkan: the buffer
        # type's alignment, minStorageBufferOffsetAlignment) whatever the tensor sizes.
        pytest.skip(f"host-memory alignment of the CPU backend; {runtime.device.spec} aligns its own buffers")
    p = random_prompt(rng, 12, n_ref, 20)
    lm = LanguageModel(runtime, tiny_gguf["f32"], cpu_products="ggml")
    with lm.session([p], guidance_scale=2.0, greedy=True) as s:
        assert s.L % 2 == n_ref
        g = s.graph._gf
        nodes = [lib.ggml_graph_node(g, i) for i in range(lib.ggml_graph_n_nodes(g))]
        inputs = [n.src[1] for n in nodes if n.op == lib.GGML_OP_MUL_MAT]
        assert len(inputs) >= lm.cfg.n_layer * 4
        misaligned = [ffi.string(t.name).decode() for t in inputs if int(ffi.cast("uintptr_t", t.data)) % 64]
    lm.close()
    assert not misaligned


def _strided_f32_product_operands(graph) -> list[str]:
    """MUL_MAT operands in F32 that are not contiguous in their first two dimensions (ggml-vulkan's
    ggml_vk_dim01_contiguous): ggml-vulkan converts those to F16 before the product."""
    from omnivoice.ggml import ffi, lib

    def dim01(t) -> bool:
        return (t.nb[0] == lib.ggml_type_size(t.type) and t.nb[1] == t.nb[0] * t.ne[0]
                and (t.ne[3] == 1 or t.nb[3] == t.nb[2] * t.ne[2]))

    g = graph._gf
    nodes = [lib.ggml_graph_node(g, i) for i in range(lib.ggml_graph_n_nodes(g))]
    return [f"src{j} of {ffi.string(n.name).decode()}" for n in nodes if n.op == lib.GGML_OP_MUL_MAT
            for j in (0, 1) if n.src[j].type == types.F32 and not dim01(n.src[j])]


def test_plain_attention_multiplies_contiguous_operands_where_the_backend_needs_it(lm, rng, monkeypatch):
    """With Runtime.products_need_contiguous (Vulkan) no F32 operand of a product in the LM graph is strided;
    without it (CPU, CUDA) the plain path multiplies Q and K in place. Forced here, so the CPU checks both."""
    from omnivoice.ggml import Runtime

    a, b = random_prompt(rng, 9, 5, 12), random_prompt(rng, 14, 0, 7)
    lm.flash_attn, saved = False, lm.flash_attn
    try:
        for need in (True, False):
            monkeypatch.setattr(Runtime, "products_need_contiguous", property(lambda self, need=need: need))
            with lm.session([a, b], 2.0, greedy=True) as s:
                strided = _strided_f32_product_operands(s.graph)
            if need:
                assert not strided, strided
            elif not lm.runtime.is_gpu:  # the CPU graph: Q and K of 4 segments in every layer, multiplied in place
                assert len(strided) == 2 * 4 * lm.cfg.n_layer, strided
    finally:
        lm.flash_attn = saved


def test_sampled_path_returns_guided_log_probs(lm, ref_weights, rng):
    p = random_prompt(rng, 11, 0, 20)
    with lm.session([p], guidance_scale=3.0, greedy=False, with_logits=True) as s:
        out = s.step([p.input_ids[:, -p.n_target:]])[0]
    want = guided(out["cond_logits"].astype(np.float64), out["uncond_logits"].astype(np.float64), 3.0)
    np.testing.assert_allclose(out["log_probs"], want, atol=1e-4)


def test_several_prompts_in_one_chunk_are_independent(lm, rng):
    """Packing prompts side by side must not let them see each other (plain attention: exact in F32)."""
    lm.flash_attn, saved = False, lm.flash_attn
    a, b = random_prompt(rng, 9, 5, 12), random_prompt(rng, 14, 0, 7)
    tok = lambda p: p.input_ids[:, -p.n_target:]  # noqa: E731
    with lm.session([a, b], 2.0, greedy=True, with_logits=True) as s:
        both = s.step([tok(a), tok(b)])
    for p, got in zip((a, b), both):
        with lm.session([p], 2.0, greedy=True, with_logits=True) as s:
            alone = s.step([tok(p)])[0]
        np.testing.assert_allclose(got["cond_logits"], alone["cond_logits"], atol=1e-5)
        np.testing.assert_array_equal(got["pred"], alone["pred"])
    lm.flash_attn = saved


def test_replay_updates_only_the_target(lm, rng):
    """A replayed graph with new tokens equals a freshly built one."""
    p = random_prompt(rng, 10, 0, 16)
    new = rng.integers(0, 1024, (8, 16)).astype(np.int32)
    with lm.session([p], 2.0, greedy=True) as s:
        s.step([p.input_ids[:, -16:]])
        replayed = s.step([new])[0]
    with lm.session([p], 2.0, greedy=True) as s:
        fresh = s.step([new])[0]
    np.testing.assert_array_equal(replayed["pred"], fresh["pred"])
    np.testing.assert_allclose(replayed["score"], fresh["score"], atol=1e-6)


def test_launch_then_finish_equals_step(lm, rng):
    """A run started by launch and collected by finish (host work in between) gives step's outputs; a finish
    without a launch, or a second launch before the finish, is a clear error."""
    p = random_prompt(rng, 10, 0, 16)
    new = rng.integers(0, 1024, (8, 16)).astype(np.int32)
    with lm.session([p], 2.0, greedy=True) as s:
        stepped = s.step([new])[0]
        with pytest.raises(RuntimeError, match="no run was launched"):
            s.finish()
        s.launch([new])
        with pytest.raises(RuntimeError, match="previous run was not finished"):
            s.launch([new])
        finished = s.finish()[0]
        s.launch([new])  # closed with a run still queued: close waits for it
    np.testing.assert_array_equal(finished["pred"], stepped["pred"])
    np.testing.assert_array_equal(finished["score"], stepped["score"])


def test_two_sessions_in_flight_give_their_own_outputs(lm, rng):
    """The pipelined engine's order: two sessions launched, each finished while the other's run is queued
    (launch A, launch B, finish A, launch A, finish B, finish A) give step's outputs."""
    pa, pb = random_prompt(rng, 10, 0, 16), random_prompt(rng, 7, 0, 12)
    ta = [rng.integers(0, 1024, (8, 16)).astype(np.int32) for _ in range(2)]
    tb = rng.integers(0, 1024, (8, 12)).astype(np.int32)
    with lm.session([pa], 2.0, greedy=True) as a, lm.session([pb], 2.0, greedy=True) as b:
        want = [a.step([t])[0] for t in ta] + [b.step([tb])[0]]
        a.launch([ta[0]])
        b.launch([tb])
        got = [a.finish()[0]]
        a.launch([ta[1]])
        got_b = b.finish()[0]
        got.append(a.finish()[0])
    for g, w in zip(got + [got_b], want):
        np.testing.assert_array_equal(g["pred"], w["pred"])
        np.testing.assert_array_equal(g["score"], w["score"])


def test_bad_tokens_shape_is_a_clear_error(lm, rng):
    p = random_prompt(rng, 5, 0, 6)
    with lm.session([p], 2.0, greedy=True) as s:
        with pytest.raises(ValueError, match="tokens of shape"):
            s.step([np.zeros((8, 5), np.int32)])


def graph_names(graph) -> set[str]:
    from omnivoice.ggml import ffi, lib

    g = graph._gf
    return {ffi.string(lib.ggml_graph_node(g, i).name).decode() for i in range(lib.ggml_graph_n_nodes(g))}


def test_graph_nodes_are_named(lm, rng):
    """A dump or profile of the graph says which tensor each node is (llama.cpp's names, layer after the dash)."""
    p = random_prompt(rng, 5, 0, 6)
    with lm.session([p], guidance_scale=2.0, greedy=True) as s:
        names = graph_names(s.graph)
    want = {"inp_embd", "result_norm", "result_output"} | {
        f"{n}-{i}" for i in range(lm.cfg.n_layer)
        for n in ("attn_norm", "Qcur", "Kcur", "kqv_out", "attn_out", "ffn_inp", "ffn_norm", "ffn_out", "l_out")}
    assert want <= names, sorted(want - names)
