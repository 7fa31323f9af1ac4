"""The LM with its products on the int16 kernel (nn.int16; runners.lm.use_int16_products): every product
matrix packed at load, the step's logits as close to float32's as ggml's F16 products bring them, and the rule
that picks the kernel by default."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from omnivoice.ggml import Runtime, types
from omnivoice.nn import int16
from omnivoice.runners.lm import LanguageModel, use_int16_products

from .test_lm import random_prompt


@pytest.fixture(scope="module")
def k256_gguf(k256_checkpoint, tmp_path_factory) -> dict[str, object]:
    from omnivoice.convert import convert_checkpoint

    out = tmp_path_factory.mktemp("k256-gguf")
    return {q: convert_checkpoint(k256_checkpoint, out, q, progress=False)[0] for q in ("f32", "f16")}


def logits(runtime, path, prompts, cpu_products: str) -> tuple[np.ndarray, LanguageModel]:
    lm = LanguageModel(runtime, path, cpu_products=cpu_products)
    try:
        with lm.session(prompts, 2.0, greedy=True, with_logits=True) as s:
            out = s.step([p.input_ids[:, -p.n_target:] for p in prompts])
        return np.concatenate([np.concatenate([o["cond_logits"], o["uncond_logits"]]).ravel() for o in out]), lm
    finally:
        lm.close()


@pytest.mark.skipif(not int16.available(), reason="no AVX2 int16 kernel on this CPU or build")
def test_int16_logits_are_as_close_as_f16s(k256_gguf):
    rng = np.random.default_rng(16)
    prompts = [random_prompt(rng, 23, 17, 31), random_prompt(rng, 11, 0, 20)]
    with Runtime("cpu") as rt:
        exact, _ = logits(rt, k256_gguf["f32"], prompts, "ggml")
        f16, _ = logits(rt, k256_gguf["f16"], prompts, "ggml")
        got, lm = logits(rt, k256_gguf["f16"], prompts, "i16")
    assert lm.int16_products
    assert len(lm.weights.int16) == 7 * lm.cfg.n_layer + 1  # every projection and the audio heads
    err = lambda y: float(np.sqrt(np.mean((y - exact) ** 2)) / np.sqrt(np.mean(exact ** 2)))  # noqa: E731
    # measured: F16 8.3e-4, int16 1.0e-3 (the F16 file's values rounded again to 13 bits; 8.1e-4 from F32 weights)
    assert 0 < err(got) < 2 * err(f16)


def test_the_rule_that_picks_int16_products(monkeypatch):
    """auto: i16 for every weight type but F32 on a CPU runtime with AVX2 and no AVX-512, never for exact_f32;
    an explicit choice wins, and i16 where it cannot run is an error."""
    from omnivoice.ggml import backend

    monkeypatch.delenv("OMNIVOICE_CPU_PRODUCTS", raising=False)
    monkeypatch.setattr(int16, "available", lambda: True)
    cpu = SimpleNamespace(is_gpu=False, exact_f32=False, device=SimpleNamespace(spec="cpu:0"))
    gpu = SimpleNamespace(is_gpu=True, exact_f32=False, device=SimpleNamespace(spec="cuda:0"))
    monkeypatch.setattr(backend, "cpu_features", lambda: frozenset({"AVX2", "FMA", "F16C"}))
    assert all(use_int16_products(cpu, t) for t in (types.F16, types.BF16, types.Q8_0, types.Q4_0))
    assert not use_int16_products(cpu, types.F32)
    assert not use_int16_products(SimpleNamespace(**(vars(cpu) | {"exact_f32": True})), types.F16)
    assert not use_int16_products(gpu, types.F16)
    assert not use_int16_products(cpu, types.F16, stacked=True)
    with pytest.raises(ValueError, match="unstacked"):
        use_int16_products(cpu, types.F16, "i16", stacked=True)
    assert use_int16_products(cpu, types.F32, "i16") and not use_int16_products(cpu, types.F16, "ggml")
    monkeypatch.setenv("OMNIVOICE_CPU_PRODUCTS", "ggml")
    assert not use_int16_products(cpu, types.F16)
    monkeypatch.setattr(backend, "cpu_features", lambda: frozenset({"AVX2", "FMA", "AVX512"}))
    assert not use_int16_products(cpu, types.F16, "auto")
    with pytest.raises(ValueError, match="CPU backend"):
        use_int16_products(gpu, types.F16, "i16")
    with pytest.raises(ValueError, match="one of auto, ggml, i16"):
        use_int16_products(cpu, types.F16, "int8")
    monkeypatch.setattr(int16, "available", lambda: False)
    with pytest.raises(ValueError, match="AVX2"):
        use_int16_products(cpu, types.F16, "i16")
    assert not use_int16_products(cpu, types.F16, "auto")
