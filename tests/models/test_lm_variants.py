"""The LM graph variants (models.lm.Variant, issue 18) compute what the default graph computes.

They exist for speed on GPUs (fewer kernels per step, measured with tools/lm_step_time.py --variant); here,
on the tiny checkpoint with two prompts (four packed segments), each must give the default graph's logits:
bit for bit on the CPU where the same kernels see the same numbers in the same order, and to float32 rounding
where the order of the sums changes (one attention call over all positions tiles the keys differently).
"""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.ggml import types
from omnivoice.ggml.backend import EMBED_SUM, FATTN_TYPED_OUT, QKV_ROPE_BY_POSITION
from omnivoice.models.lm import Variant
from omnivoice.runners.lm import LanguageModel

from .test_lm import random_prompt

ALL = "qk_rope,kv_rows,one_attention,typed_inputs,fused_casts,fma_attention,attn_cast,cast_scratch"


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(18)
    return [random_prompt(rng, 23, 17, 31), random_prompt(rng, 11, 0, 20)]


def step(runtime, path, prompts, variant: Variant | None, kv_type: int | None = None):
    lm = LanguageModel(runtime, path, stack_projections=True, variant=variant)
    try:
        if kv_type is not None:
            lm.flash_kv = kv_type
        with lm.session(prompts, 2.0, greedy=True, with_logits=True) as s:
            return s.step([p.input_ids[:, -p.n_target:] for p in prompts])
    finally:
        lm.close()


def assert_same(out, base, bitwise: bool, bound: float = 1e-6):
    for o, b in zip(out, base):
        if bitwise:
            np.testing.assert_array_equal(o["pred"], b["pred"])
        else:  # sums in another order may flip a near-tie of the random model's flat logits (1 of 160 with BF16
            # weights on the 16-core Xeon, one_attention)
            assert np.mean(o["pred"] == b["pred"]) >= 0.99
        for key in ("cond_logits", "uncond_logits"):
            if bitwise:
                np.testing.assert_array_equal(o[key], b[key])
            else:
                assert np.abs(o[key] - b[key]).max() / np.abs(b[key]).max() < bound


@pytest.mark.parametrize("quant", ["f32", "bf16"])
@pytest.mark.parametrize("names", ["qk_rope", "kv_rows", "one_attention", "typed_inputs", "kv_rows,fused_casts",
                                   "fma_attention", "attn_cast", "kv_rows,fused_casts,cast_scratch",
                                   "typed_inputs,attn_cast,cast_scratch", ALL])
def test_variant_computes_what_the_default_graph_does(runtime, tiny_gguf, prompts, quant, names):
    base = step(runtime, tiny_gguf[quant], prompts, Variant())
    out = step(runtime, tiny_gguf[quant], prompts, Variant.parse(names))
    # one attention call, or the FMA kernel's attention (CPU), sums in another order
    bitwise = runtime.device.kind == "cpu" and "one_attention" not in names and "fma_attention" not in names
    bound = 1e-6 if runtime.device.kind == "cpu" else 1e-5
    if quant == "bf16" and not bitwise and runtime.device.kind == "cpu":
        # the next layer's BF16 products round their inputs to 8 bits: an activation 1e-7 away may round to the
        # neighbouring BF16 value (measured on the tiny model: 1.8e-3 of the logits' scale with fma_attention,
        # 2.9e-3 with one_attention on a Zen 4, whose AVX-512 BF16 products ggml's CPU backend uses)
        bound = 1e-2
    assert_same(out, base, bitwise, bound)


def test_kv_rows_convert_as_the_cast_does(runtime, tiny_gguf, prompts):
    """With F16 K/V (GPUs' flash attention type), set_rows rounds K and V as the default graph's cast."""
    if not runtime.supports_flash_attn(16, types.F16):
        pytest.skip(f"no F16 flash attention for head size 16 on {runtime.device.spec}")
    base = step(runtime, tiny_gguf["f32"], prompts, Variant(), types.F16)
    out = step(runtime, tiny_gguf["f32"], prompts, Variant(kv_rows=True), types.F16)
    assert_same(out, base, bitwise=runtime.device.kind == "cpu", bound=1e-5)


def test_variant_names():
    assert Variant.parse("") == Variant() == Variant.parse("none")
    assert Variant.parse("qk_rope, one_attention") == Variant(qk_rope=True, one_attention=True)
    with pytest.raises(ValueError, match="qk_ropes"):
        Variant.parse("qk_ropes")


def test_qk_rope_needs_stacked_projections(runtime, tiny_gguf):
    with pytest.raises(ValueError, match="stacked"):
        LanguageModel(runtime, tiny_gguf["f32"], stack_projections=False, variant=Variant(qk_rope=True))


@pytest.fixture(scope="module")
def k256_bf16(k256_checkpoint, tmp_path_factory):
    from omnivoice.convert import convert_checkpoint

    return convert_checkpoint(k256_checkpoint, tmp_path_factory.mktemp("k256-bf16"), "bf16", progress=False)[0]


@pytest.mark.parametrize("n_prompts", [1, 2])
def test_attention_written_as_its_products_input(runtime, k256_bf16, n_prompts):
    """ggml patch 0013 (CUDA): the short-sequence attention kernel writes its result as the output product's BF16
    input (attn_cast; one prompt: its pair of segments, fused with the concat and the cast; two: the concat of
    four, cast by a kernel of its own). The k256 model's head size 128 is the kernel's. The default graph's
    logits: the product's own conversion rounds as the kernel does (to nearest even)."""
    if not runtime.has(FATTN_TYPED_OUT):
        pytest.skip(f"patch 0013's kernel is CUDA's; {runtime.device.spec} has none of this build")
    rng = np.random.default_rng(13)
    prompts = [random_prompt(rng, 23, 17, 31), random_prompt(rng, 11, 0, 20)][:n_prompts]
    base = step(runtime, k256_bf16, prompts, Variant(kv_rows=True, fused_casts=True, cast_scratch=True))
    out = step(runtime, k256_bf16, prompts, Variant(kv_rows=True, fused_casts=True, cast_scratch=True, attn_cast=True))
    assert_same(out, base, bitwise=False, bound=1e-5)


def logits_without(runtime, path, prompts, switch: str, tmp_path):
    """step()'s outputs of the default graph on `runtime`'s device, not asked for exact float32 (the tests' runtime
    is: CUDA then keeps F32 K/V and plain attention), in a second process with ggml's `switch` set (ggml reads its
    switches once a process), as a fused kernel's test compares them with its own outputs."""
    import os
    import pickle
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "prompts.pkl").write_bytes(pickle.dumps(prompts))
    code = ("import sys, pickle; from omnivoice.ggml import Runtime; from tests.models.test_lm_variants import step; "
            "prompts = pickle.loads(open(sys.argv[3], 'rb').read()); "
            "rt = Runtime(sys.argv[1], exact_f32=False); "
            "open(sys.argv[4], 'wb').write(pickle.dumps(step(rt, sys.argv[2], prompts, None)))")
    subprocess.run([sys.executable, "-c", code, runtime.device.spec, str(path), str(tmp_path / "prompts.pkl"),
                    str(tmp_path / "out.pkl")], env=dict(os.environ, **{switch: "1"}),
                   cwd=Path(__file__).resolve().parents[2], check=True, timeout=300)
    return pickle.loads((tmp_path / "out.pkl").read_bytes())


def step_and_kernels(runtime, path, prompts):
    """step()'s outputs of the default graph and the names of the CUDA kernels it ran (torch's profiler: CUPTI sees
    ggml's kernels too), None for the names where torch or its CUDA is missing (the H200 image has both)."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return step(runtime, path, prompts, None), None
    if not torch.cuda.is_available():
        return step(runtime, path, prompts, None), None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = step(runtime, path, prompts, None)
    return out, {ev.name for ev in prof.events() if ev.device_type.name == "CUDA"}


def assert_fused(runtime, path, prompts, switch: str, kernel: str, tmp_path):
    """The default graph as a user's process runs it (F16 K/V, flash attention, padded buckets for several prompts)
    gives the logits it gives with the fusion switched off, bit for bit, and (where the kernels can be seen) runs
    the fused kernel."""
    from omnivoice.ggml import Runtime

    base = logits_without(runtime, path, prompts, switch, tmp_path)
    with Runtime(runtime.device.spec, exact_f32=False) as rt:
        out, kernels = step_and_kernels(rt, path, prompts)
    assert_same(out, base, bitwise=True)
    if kernels is not None:
        assert any(kernel in name for name in kernels), f"no {kernel} among {sorted(kernels)}"


def three_prompts():
    rng = np.random.default_rng(22)
    return [random_prompt(rng, 23, 17, 31), random_prompt(rng, 11, 0, 20), random_prompt(rng, 30, 5, 40)]


@pytest.mark.parametrize("n_prompts", [1, 3])
def test_qkv_rope_by_position_equals_the_kernels_it_replaces(runtime, k256_bf16, n_prompts, tmp_path):
    """ggml patch 0022 (CUDA): a layer's q and k RMSNorm x weight + RoPE and V's F16 rows computed a position a block
    give the logits of the kernels they replace bit for bit. One prompt: q as its own tensor; three: q, K and V
    into the padded buckets' rows. The default CUDA graph; the k256 model's head size 128 is one the kernel takes."""
    if not runtime.has(QKV_ROPE_BY_POSITION):
        pytest.skip(f"patch 0022's kernel is CUDA's; {runtime.device.spec} has none of this build")
    assert_fused(runtime, k256_bf16, three_prompts()[:n_prompts], "GGML_CUDA_DISABLE_QKV_ROPE_POSITION",
                 "rms_norm_mul_rope_qkv_pos_f32", tmp_path)


@pytest.mark.parametrize("model", ["tiny_f32", "k256_bf16"])
def test_embedding_in_one_kernel_equals_its_kernels(runtime, tiny_gguf, k256_bf16, model, tmp_path):
    """ggml patch 0023 (CUDA): the input embedding (the text row, the sum of the eight codebooks' rows, the masks) as
    one kernel gives the logits of its twelve kernels bit for bit, with F32 tables (tiny) and BF16 ones (k256)."""
    if not runtime.has(EMBED_SUM):
        pytest.skip(f"patch 0023's kernel is CUDA's; {runtime.device.spec} has none of this build")
    path = tiny_gguf["f32"] if model == "tiny_f32" else k256_bf16
    assert_fused(runtime, path, three_prompts(), "GGML_CUDA_DISABLE_EMBED_SUM", "k_embed_sum", tmp_path)
