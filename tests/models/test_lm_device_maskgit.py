"""A lone greedy chunk's MaskGIT steps run on the device (CUDA with patch 0024; MaskGitState.run_on_device through
runners.lm.GuidedChunk, ChunkSession.run_on_device):
every step's choice made where the LM ran, the steps queued back to back. Its tokens must be the host loop's, bit for
bit, and its generator must end where the host's does. Elsewhere (the CPU, Vulkan, a build without the patch) the
session declines and the host steps, which these tests check too."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.generate import CudaPhiloxGenerator, GenerationConfig, MaskGitState
from omnivoice.generate.batch import run_on_device, step_many
from omnivoice.ggml import lib, read_tensor
from omnivoice.ggml.graph import shape_of, write_tensor
from omnivoice.runners.lm import GuidedChunk
from omnivoice.runners.lm import LanguageModel

from .test_lm import random_prompt

MASK_ID = 1024


@pytest.fixture(scope="module")
def model(runtime, tiny_gguf):
    m = LanguageModel(runtime, tiny_gguf["f32"])
    yield m
    m.close()


def on_device(model) -> None:
    if model.maskgit_step is None:
        pytest.skip(f"{model.runtime.device.spec} has no device MaskGIT step (CUDA with patch 0024)")


def masked_prompt(rng, n_text: int, n_ref: int, T: int):
    p = random_prompt(rng, n_text, n_ref, T)
    p.input_ids[:, -T:] = MASK_ID
    return p


@pytest.mark.parametrize("n_ref, position_temperature, T, num_step",
                         [(0, 0.0, 23, 12), (0, 5.0, 23, 12), (9, 5.0, 23, 12), (9, 0.0, 23, 12),
                          (5, 5.0, 1290, 4)])  # 8 x 1290 positions: the kernel's keys past shared memory
def test_device_steps_equal_the_host_loop(model, rng, n_ref, position_temperature, T, num_step):
    on_device(model)
    prompt = masked_prompt(rng, 11, n_ref, T)
    config = GenerationConfig(num_step=num_step, position_temperature=position_temperature, class_temperature=0.0)
    for seed in (0, 7):
        host = MaskGitState(T, config, CudaPhiloxGenerator(seed, 64), mask_id=MASK_ID)
        with model.session([prompt], config.guidance_scale, True) as s:
            guided = GuidedChunk(s, MASK_ID)
            while not host.done:
                host.advance(guided)
        dev = MaskGitState(T, config, CudaPhiloxGenerator(seed, 64), mask_id=MASK_ID)
        with model.session([prompt], config.guidance_scale, True, device_steps=True) as s:
            steps = dev.run_on_device(GuidedChunk(s, MASK_ID))
        assert steps is not None and len(steps) == num_step and dev.done
        np.testing.assert_array_equal(dev.tokens, host.tokens, err_msg=f"seed {seed}")
        assert dev.rng.offset == host.rng.offset


@pytest.mark.parametrize("position_temperature", [0.0, 5.0])
def test_one_device_choice_ties_and_writes_the_ids_like_the_host(model, rng, position_temperature):
    """One step's choice from scores with many ties (the lower flat index wins), some positions already unmasked:
    the device's tokens and the next run's ids against the host's choice (MaskGitState.choose)."""
    on_device(model)
    C, T = 8, 37
    prompt = masked_prompt(rng, 7, 5, T)
    config = GenerationConfig(num_step=4, position_temperature=position_temperature, class_temperature=0.0)
    host = MaskGitState(T, config, CudaPhiloxGenerator(3), mask_id=MASK_ID)
    host.tokens[rng.random((C, T)) < 0.3] = 5  # unmasked already
    dev = MaskGitState(T, config, CudaPhiloxGenerator(3), mask_id=MASK_ID)
    dev.tokens[...] = host.tokens
    pred = rng.integers(0, 1024, (C, T)).astype(np.int32)
    score = rng.choice(np.float32([-1.0, -2.0, -2.5]), (C, T))
    with model.session([prompt], config.guidance_scale, True, device_steps=True) as s:
        plan = dev.device_plan(256)
        args = s._device_args([dev.tokens], [plan], [config.layer_penalty_factor], [config.position_temperature],
                              MASK_ID)[0]
        # the graph's outputs as the guided pick leaves them: frame-major [T, C]
        for name, value in (("pred", pred), ("score", score)):
            t = s.graph.tensor(name)
            write_tensor(t, value.T.reshape(shape_of(t)), name)
        assert model.maskgit_step(model.runtime.backend, args) == 0
        lib.ggml_backend_synchronize(model.runtime.backend)
        tokens = read_tensor(s.constants["mg_tokens"]).reshape(C, T)
        ids = read_tensor(s.graph.tensor("audio_ids"))
        assert list(read_tensor(s.constants["mg_state"])) == [1, 0]
        choice = host.choose(pred=pred, score=score)
        host.apply(choice)
        np.testing.assert_array_equal(tokens, host.tokens)
        np.testing.assert_array_equal(ids, s._audio_ids([host.tokens]))


def test_packed_device_steps_equal_the_host_loop(model, rng):
    """Two prompts of other lengths and voices packed in one graph, each step's two choices on the device (one kernel
    a prompt, each on its share of the outputs; generate.batch.run_on_device): the host loop's tokens and draws."""
    on_device(model)
    prompts = [masked_prompt(rng, 11, 0, 23), masked_prompt(rng, 7, 9, 41)]
    config = GenerationConfig(num_step=8, position_temperature=5.0, class_temperature=0.0)

    def states():
        return [MaskGitState(p.n_target, config, CudaPhiloxGenerator(seed), mask_id=MASK_ID)
                for seed, p in zip((1, 2), prompts)]

    host = states()
    with model.session(prompts, config.guidance_scale, True) as s:
        while not host[0].done:
            step_many(host, s.step([h.tokens for h in host]))
    dev = states()
    with model.session(prompts, config.guidance_scale, True, device_steps=True) as s:
        ran = run_on_device(dev, s)
    assert [len(r) for r in ran] == [8, 8] and all(d.done for d in dev)
    for d, h in zip(dev, host):
        np.testing.assert_array_equal(d.tokens, h.tokens)
        assert d.rng.offset == h.rng.offset


def test_the_session_declines_what_the_device_cannot_run(model, rng):
    """Sessions not opened for device steps, sampled classes, several prompts, a graph with logits out, and any
    backend without the step: the host steps (None), and nothing is drawn from the generator."""
    T = 9
    prompt = masked_prompt(rng, 5, 0, T)
    sampled = MaskGitState(T, GenerationConfig(num_step=4, class_temperature=1.0), CudaPhiloxGenerator(1),
                           mask_id=MASK_ID)
    greedy = MaskGitState(T, GenerationConfig(num_step=4, position_temperature=5.0), CudaPhiloxGenerator(1),
                          mask_id=MASK_ID)
    with model.session([prompt], 2.0, True) as s:
        assert s.device_steps == 0 and greedy.run_on_device(GuidedChunk(s, MASK_ID)) is None
    with model.session([prompt], 2.0, True, device_steps=True) as s:
        assert sampled.run_on_device(GuidedChunk(s, MASK_ID)) is None
        if model.maskgit_step is None:
            assert s.device_steps == 0 and greedy.run_on_device(GuidedChunk(s, MASK_ID)) is None
            with pytest.raises(ValueError, match="this session runs"):
                s.run_on_device([greedy.tokens], [np.zeros((1, 6), np.int32)], [5.0], [5.0], MASK_ID)
    with model.session([prompt, prompt], 2.0, [True, False], device_steps=True) as s:
        assert s.device_steps == 0  # a prompt that samples its classes
    with model.session([prompt], 2.0, True, with_logits=True, device_steps=True) as s:
        assert s.device_steps == 0 and greedy.run_on_device(GuidedChunk(s, MASK_ID)) is None
    assert sampled.rng.offset == 0 and greedy.rng.offset == 0 and not greedy.done
