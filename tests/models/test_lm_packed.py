"""The LM with its products on the package's CPU kernels (nn.int16, nn.amx, nn.fma; runners.lm.products_kernel):
every product matrix packed at load, the step's logits as close to float32's as ggml's F16 (BF16) products bring
them (fma: float32's own, to its rounding), and the rule that picks the kernel by default."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from omnivoice.ggml import Runtime, types
from omnivoice.nn import amx, fma, int8, int16
from omnivoice.runners.lm import LanguageModel, products_kernel

from .test_lm import random_prompt


def step_logits(lm: LanguageModel, prompts) -> np.ndarray:
    with lm.session(prompts, 2.0, greedy=True, with_logits=True) as s:
        out = s.step([p.input_ids[:, -p.n_target:] for p in prompts])
    return np.concatenate([np.concatenate([o["cond_logits"], o["uncond_logits"]]).ravel() for o in out])


def logits(runtime, path, prompts, cpu_products: str) -> tuple[np.ndarray, LanguageModel]:
    lm = LanguageModel(runtime, path, cpu_products=cpu_products)
    try:
        return step_logits(lm, prompts), lm
    finally:
        lm.close()


# (kernel, weights file, the ggml products of the same rounding, how much further from float32 it may be)
# measured: F16 8.3e-4, int16 1.0e-3 (the F16 file's values rounded again to 13 bits; 8.1e-4 from F32 weights);
# the AMX kernel rounds both operands to BF16 and sums in F32, as ggml's BF16 products do; int8 on the Q4_K_M file
# (its default) 0.170 against ggml's 0.167: the 4-bit weights' error dominates (on Q8_0 it is 1.8x ggml's: the
# weights lose their 8th bit)
KERNELS = [pytest.param(int16, "f16", 2.0, marks=pytest.mark.skipif(
               not int16.available(), reason="no AVX2 int16 kernel on this CPU or build"), id="i16"),
           pytest.param(int8, "q4_k_m", 1.2, marks=pytest.mark.skipif(
               not int8.available(), reason="no AVX2 int8 kernel on this CPU or build"), id="i8"),
           pytest.param(amx, "bf16", 1.5, marks=pytest.mark.skipif(
               not amx.available(), reason="no AMX-BF16 on this CPU (Intel Xeon since Sapphire Rapids)"), id="amx")]


@pytest.mark.parametrize("kernel,quant,ratio", KERNELS)
def test_packed_logits_are_as_close_as_ggmls(k256_gguf, kernel, quant, ratio):
    rng = np.random.default_rng(16)
    prompts = [random_prompt(rng, 23, 17, 31), random_prompt(rng, 11, 0, 20)]
    with Runtime("cpu") as rt:
        exact, _ = logits(rt, k256_gguf["f32"], prompts, "ggml")
        ggml, _ = logits(rt, k256_gguf[quant], prompts, "ggml")
        got, lm = logits(rt, k256_gguf[quant], prompts, kernel.KERNEL.name)
    assert lm.cpu_products == kernel.KERNEL.name
    assert len(lm.weights.packed) == 7 * lm.cfg.n_layer + 1  # every projection and the audio heads
    err = lambda y: float(np.sqrt(np.mean((y - exact) ** 2)) / np.sqrt(np.mean(exact ** 2)))  # noqa: E731
    assert 0 < err(got) < ratio * err(ggml)


@pytest.mark.skipif(not fma.available(), reason="no AVX2/FMA kernel on this CPU or build")
def test_fma_logits_are_float32s(k256_gguf):
    """The F32 file on the FMA kernel: float32 products summed in another order than ggml's, so the logits agree
    with ggml's F32 ones to float32's rounding (what the parity tests' tokens then rest on)."""
    rng = np.random.default_rng(17)
    prompts = [random_prompt(rng, 23, 17, 31), random_prompt(rng, 11, 0, 20)]
    with Runtime("cpu") as rt:
        exact, _ = logits(rt, k256_gguf["f32"], prompts, "ggml")
        got, lm = logits(rt, k256_gguf["f32"], prompts, "fma")
    assert lm.cpu_products == "fma" and len(lm.weights.packed) == 7 * lm.cfg.n_layer + 1
    assert 0 < np.max(np.abs(got - exact)) < 1e-5 * np.max(np.abs(exact))


@pytest.mark.skipif(not amx.available(), reason="no AMX-BF16 on this CPU (Intel Xeon since Sapphire Rapids)")
def test_amx_beside_ggmls_amx_kernels(k256_gguf):
    """ggml's AMX kernels (Q8_0 matrices in its AMX buffer on these CPUs) configure a thread's tiles once, on
    their first product there; the package's kernel puts a thread's configuration back after each product. So
    both run in one process on the same threads, each model's logits the same before and after the other's step
    (releasing the tiles instead killed the process with SIGILL at ggml's next tile load)."""
    rng = np.random.default_rng(18)
    prompts = [random_prompt(rng, 23, 17, 31)]
    with Runtime("cpu") as rt:
        if not rt.multiplies_in("AMX", types.Q8_0, [256, 512]):  # where ggml puts the Q8_0 file's matrices
            # (a ggml CPU module compiled for another CPU, e.g. a carried GPU build made on an AVX2 host, has none)
            pytest.skip("this build of ggml's CPU backend has no AMX kernels")
        q8 = LanguageModel(rt, k256_gguf["q8_0"], cpu_products="ggml")
        bf = LanguageModel(rt, k256_gguf["bf16"], cpu_products="amx")
        try:
            first = step_logits(q8, prompts), step_logits(bf, prompts)
            again = step_logits(q8, prompts), step_logits(bf, prompts)
        finally:
            q8.close()
            bf.close()
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])


def test_files_take_the_rules_kernel(k256_gguf, monkeypatch):
    """The rule applied to real files: the type of the first product matrix decides (the Q4_K_M file's q_proj is
    Q4_K, its v_proj and down_proj in some layers Q6_K), whatever this CPU has."""
    from omnivoice.ggml import lib

    monkeypatch.delenv("OMNIVOICE_CPU_PRODUCTS", raising=False)
    want = {}
    with Runtime("cpu", exact_f32=False) as rt:  # the suite's runtimes ask for float32, which keeps ggml's
        for quant, weight_type in (("q4_k_m", lib.GGML_TYPE_Q4_K), ("q8_0", types.Q8_0), ("f16", types.F16)):
            kernel = products_kernel(rt, weight_type)
            want[quant] = kernel.name if kernel is not None else None
            lm = LanguageModel(rt, k256_gguf[quant])
            try:
                assert lm.cpu_products == want[quant], quant
            finally:
                lm.close()
    if int8.available() and not amx.available():
        assert want == {"q4_k_m": "i8", "q8_0": "i8", "f16": "i8"}


def test_the_rule_that_picks_the_products(monkeypatch):
    """auto on a CPU runtime: fma for F32 weights (exact_f32 too: it is float32; with AVX-512 only on up to four
    threads); for the other types, never for exact_f32, amx where the CPU has AMX-BF16, else with AVX2 i8 (i16 in a
    build without the int8 kernel) but for BF16 weights where ggml has AVX512-BF16 dot products; an explicit choice
    wins, and a kernel where it cannot run is an error."""
    from omnivoice.ggml import backend

    monkeypatch.delenv("OMNIVOICE_CPU_PRODUCTS", raising=False)
    monkeypatch.setattr(int16, "available", lambda: True)
    monkeypatch.setattr(int8, "available", lambda: True)
    monkeypatch.setattr(amx, "available", lambda: False)
    monkeypatch.setattr(fma, "available", lambda: True)
    cpu = SimpleNamespace(is_gpu=False, exact_f32=False, n_threads=2, device=SimpleNamespace(spec="cpu:0"))
    gpu = SimpleNamespace(is_gpu=True, exact_f32=False, n_threads=2, device=SimpleNamespace(spec="cuda:0"))
    monkeypatch.setattr(backend, "cpu_features", lambda: frozenset({"AVX2", "FMA", "F16C"}))
    quantized = (types.F16, types.BF16, types.Q8_0, types.Q4_0, *types.K_QUANTS)
    assert all(products_kernel(cpu, t) is int8.KERNEL for t in quantized)
    assert products_kernel(cpu, types.F16, "i16") is int16.KERNEL
    monkeypatch.setattr(int8, "available", lambda: False)
    assert all(products_kernel(cpu, t) is int16.KERNEL for t in quantized)
    monkeypatch.setattr(int8, "available", lambda: True)
    assert products_kernel(cpu, types.F32) is fma.KERNEL
    exact = SimpleNamespace(**(vars(cpu) | {"exact_f32": True}))
    assert products_kernel(exact, types.F16) is None and products_kernel(exact, types.F32) is fma.KERNEL
    assert products_kernel(gpu, types.F16) is None
    assert products_kernel(cpu, types.F16, stacked=True) is None
    with pytest.raises(ValueError, match="unstacked"):
        products_kernel(cpu, types.F16, "i16", stacked=True)
    assert products_kernel(cpu, types.F32, "i16") is int16.KERNEL and products_kernel(cpu, types.F16, "ggml") is None
    monkeypatch.setenv("OMNIVOICE_CPU_PRODUCTS", "ggml")
    assert products_kernel(cpu, types.F16) is None
    monkeypatch.delenv("OMNIVOICE_CPU_PRODUCTS")
    monkeypatch.setattr(backend, "cpu_features", lambda: frozenset({"AVX2", "FMA", "AVX512"}))
    assert all(products_kernel(cpu, t, "auto") is int8.KERNEL for t in quantized)
    monkeypatch.setattr(backend, "cpu_features", lambda: frozenset({"AVX2", "FMA", "AVX512", "AVX512_BF16"}))
    assert products_kernel(cpu, types.BF16) is None
    assert all(products_kernel(cpu, t) is int8.KERNEL for t in quantized if t != types.BF16)
    # F32 on AVX-512: fma on few threads, ggml's on many
    assert products_kernel(cpu, types.F32) is fma.KERNEL
    assert products_kernel(SimpleNamespace(**(vars(cpu) | {"n_threads": 16})), types.F32) is None
    with pytest.raises(ValueError, match="CPU backend"):
        products_kernel(gpu, types.F16, "i16")
    with pytest.raises(ValueError, match="one of auto, ggml, i16, i8, amx"):
        products_kernel(cpu, types.F16, "int8")
    with pytest.raises(ValueError, match="AMX-BF16"):
        products_kernel(cpu, types.F16, "amx")
    monkeypatch.setattr(amx, "available", lambda: True)  # AMX wins over everything else
    assert products_kernel(cpu, types.Q8_0) is amx.KERNEL and products_kernel(cpu, types.F16, "amx") is amx.KERNEL
    assert products_kernel(cpu, types.F32) is fma.KERNEL and products_kernel(gpu, types.F32) is None
    monkeypatch.setattr(amx, "available", lambda: False)
    monkeypatch.setattr(int16, "available", lambda: False)
    monkeypatch.setattr(int8, "available", lambda: False)
    monkeypatch.setattr(fma, "available", lambda: False)
    with pytest.raises(ValueError, match="AVX2"):
        products_kernel(cpu, types.F16, "i16")
    with pytest.raises(ValueError, match="AVX2"):
        products_kernel(cpu, types.F32, "fma")
    assert products_kernel(cpu, types.F16, "auto") is None and products_kernel(cpu, types.F32) is None
