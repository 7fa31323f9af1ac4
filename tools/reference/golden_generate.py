"""Write the golden files of tests/generate/ from the PyTorch reference (omnivoice 0.2.1).

Run from the repository root with the reference's venv (a few seconds on two cores):

    .venv-ref/bin/python tools/reference/golden_generate.py

Writes
  tests/golden/generate_schedule.npz  the reference's time steps and per-step unmask counts:
                                      T = 1..3000 at the defaults (32 steps, t_shift 0.1), and
                                      T = 1..300 for other step counts and shifts.
  tests/golden/generate_loop.npz      the reference's ``_generate_iterative`` run on the fake LM
                                      of tests/generate/fake_lm.py: the tokens fed to the LM at
                                      every step, the final tokens, step-0 predictions and scores.

The loop runs the reference's own ``OmniVoice._generate_iterative`` and
``_predict_tokens_with_scoring`` with a stub ``self`` whose forward pass is the fake LM (same file,
same weights as our tests). In the stochastic cases ``torch.rand_like`` is replaced by draws from
our ``CudaPhiloxGenerator`` (loaded by path, pure numpy), i.e. the reference is run as if on the
CUDA generator that our port re-creates; the reference's own Gumbel code, draw order and shapes
are what is under test there.

The reference runs on the CPU here, so its arithmetic is torch's CPU arithmetic (true division by
the temperature, the CPU log), while our port reproduces the CUDA arithmetic; the two differ by an
ulp at most, which the margin below absorbs.

Each case must be decided with margin: at every step the chosen tokens lead the runner-up class
and the k-th unmasked position leads the (k+1)-th by more than MARGIN, so float32 rounding
differences between numpy and torch cannot flip a decision. A case whose fake-LM seed gives a
smaller margin moves to the next seed (the seed used is recorded).

The schedule counts replicate the reference's inline loop from ``_generate_iterative`` over the
reference's own ``_get_time_steps``; the loop cases cross-check them on the real code.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
import types

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Our package shares the import name `omnivoice`: keep the repo off sys.path so that the
# reference's package is the one imported.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) not in (REPO, os.path.dirname(__file__))]

if __name__ == "__main__" and {"-h", "--help"} & set(sys.argv[1:]):  # help without the reference's environment
    print(__doc__)
    sys.exit(0)
import numpy as np  # noqa: E402
import torch  # noqa: E402

import omnivoice.models.omnivoice as ref  # noqa: E402

if os.path.abspath(ref.__file__).startswith(REPO + os.sep + "omnivoice"):
    raise SystemExit(f"imported our own package instead of the reference: {ref.__file__}")

MARGIN = 2e-4
NUM_CODEBOOKS = 8
MASK_ID = 1024
VOCAB = 1025


def _load(name: str, path: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fake_lm = _load("_fake_lm", "tests/generate/fake_lm.py")
philox = _load("_ov_philox", "omnivoice/generate/philox.py")


# --------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------


def reference_schedule(t_len: int, num_step: int, t_shift: float) -> list[int]:
    """The schedule loop of ``_generate_iterative`` (copied), on the reference's time steps."""
    timesteps = ref._get_time_steps(t_start=0.0, t_end=1.0, num_step=num_step, t_shift=t_shift).tolist()
    total_mask = t_len * NUM_CODEBOOKS
    rem = total_mask
    sched = []
    for step in range(num_step):
        num = (
            rem
            if step == num_step - 1
            else min(math.ceil(total_mask * (timesteps[step + 1] - timesteps[step])), rem)
        )
        sched.append(int(num))
        rem -= int(num)
    return sched


SCHEDULE_GRID = [(32, 0.1, 3000)] + [
    (num_step, t_shift, 300) for num_step in (4, 10, 16, 25, 50, 64) for t_shift in (0.1, 0.5, 1.0)
]


def write_schedule(path: str) -> None:
    out = {}
    grid = []
    for num_step, t_shift, t_max in SCHEDULE_GRID:
        key = f"s{num_step}_shift{t_shift}"
        ts = ref._get_time_steps(t_start=0.0, t_end=1.0, num_step=num_step, t_shift=t_shift)
        out[key + "__time_steps"] = ts.numpy().astype(np.float32)
        out[key + "__counts"] = np.array(
            [reference_schedule(t, num_step, t_shift) for t in range(1, t_max + 1)], dtype=np.int16
        )
        grid.append({"key": key, "num_step": num_step, "t_shift": t_shift, "t_max": t_max})
    out["grid_json"] = np.array(json.dumps(grid))
    # The reference's sampler defaults, for GenerationConfig's defaults.
    defaults = ref.OmniVoiceGenerationConfig()
    names = ("num_step", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
             "class_temperature")
    out["defaults_json"] = np.array(json.dumps({n: getattr(defaults, n) for n in names}))
    np.savez_compressed(path, **out)


# --------------------------------------------------------------------------------------------
# Loop
# --------------------------------------------------------------------------------------------

CASES = [
    # Deterministic (both temperatures 0).
    dict(name="det_t7_s32", T=7, num_step=32, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.0, seed=11, prefix=5),
    dict(name="det_t25_s16_noguide", T=25, num_step=16, guidance_scale=0.0, t_shift=0.1,
         layer_penalty_factor=5.0, position_temperature=0.0, class_temperature=0.0, seed=21, prefix=9),
    dict(name="det_t60_s32", T=60, num_step=32, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.0, seed=31, prefix=12),
    dict(name="det_t40_s10_shift", T=40, num_step=10, guidance_scale=3.0, t_shift=0.5,
         layer_penalty_factor=0.5, position_temperature=0.0, class_temperature=0.0, seed=41, prefix=3),
    dict(name="det_t2_s32", T=2, num_step=32, guidance_scale=1.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.0, seed=51, prefix=4),
    # Stochastic, on the re-created CUDA generator.
    dict(name="pos_t20_s16", T=20, num_step=16, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=0.0, seed=61, prefix=6, rng_seed=1234, rng_offset=0),
    dict(name="both_t12_s8", T=12, num_step=8, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=1.0, seed=71, prefix=7, rng_seed=42, rng_offset=0),
    dict(name="class_t9_s12", T=9, num_step=12, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=0.0, class_temperature=0.7, seed=81, prefix=2, rng_seed=7, rng_offset=4096),
    # 16 positions over 32 steps: the last steps unmask nothing and must draw nothing.
    dict(name="both_t2_s32", T=2, num_step=32, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=0.5, seed=101, prefix=3, rng_seed=99, rng_offset=0),
    # 8 * 40 * 1025 = 328,000 class draws per step: more than one grid-stride round on an H200.
    dict(name="both_t40_s6", T=40, num_step=6, guidance_scale=2.0, t_shift=0.1, layer_penalty_factor=5.0,
         position_temperature=5.0, class_temperature=1.0, seed=91, prefix=8, rng_seed=2**40 + 3, rng_offset=64),
]


class _Stub:
    """Just enough of an OmniVoice instance for ``_generate_iterative``."""

    def __init__(self, lm, prefix_len: int, rng_seed: int):
        self.lm = lm
        self.prefix_len = prefix_len
        self.config = types.SimpleNamespace(audio_mask_id=MASK_ID, num_audio_codebook=NUM_CODEBOOKS)
        self.device = torch.device("cpu")
        self.inputs = []  # tokens of the target window at each forward call
        self.predictions = []  # per call: (log_probs, pred, conf)
        self.gumbel_calls = []  # (kind, output) in call order
        self._predict = types.MethodType(ref.OmniVoice._predict_tokens_with_scoring, self)

    def _prepare_inference_inputs(self, text, num_target_tokens, ref_text, ref_audio_tokens, lang, instruct, denoise):
        # A prompt of `prefix_len` text positions (audio mask off) followed by the masked target.
        length = self.prefix_len + num_target_tokens
        ids = torch.full((1, NUM_CODEBOOKS, length), MASK_ID, dtype=torch.long)
        ids[:, :, : self.prefix_len] = torch.arange(self.prefix_len) + 100
        audio_mask = torch.zeros((1, length), dtype=torch.bool)
        audio_mask[:, self.prefix_len :] = True
        return {"input_ids": ids, "audio_mask": audio_mask}

    def __call__(self, input_ids, audio_mask, attention_mask):
        T = self.lm.num_target_tokens
        c_len = self.prefix_len + T
        cond = input_ids[0, :, c_len - T : c_len]
        uncond = input_ids[1, :, :T]
        assert torch.equal(cond, uncond), "cond and uncond target windows differ"
        tokens = cond.numpy().astype(np.int64)
        self.inputs.append(tokens.copy())
        logits = torch.zeros((2, NUM_CODEBOOKS, input_ids.shape[2], VOCAB), dtype=torch.float32)
        logits[0, :, c_len - T : c_len] = torch.from_numpy(self.lm.cond_logits(tokens))
        logits[1, :, :T] = torch.from_numpy(self.lm.uncond_logits(tokens))
        return types.SimpleNamespace(logits=logits)

    def _predict_tokens_with_scoring(self, c_logits, u_logits, gen_config):
        pred, conf = self._predict(c_logits, u_logits, gen_config)
        # The log-probs as the reference forms them, for the margin checks only.
        g = gen_config.guidance_scale
        c = torch.log_softmax(c_logits, dim=-1)
        if g != 0:
            u = torch.log_softmax(u_logits, dim=-1)
            lp = torch.log_softmax(c + g * (c - u), dim=-1)
        else:
            lp = c
        lp[..., MASK_ID] = -float("inf")
        self.predictions.append((lp[0].numpy().copy(), pred[0].numpy().copy(), conf[0].numpy().copy()))
        return pred, conf


def _gap_top2(values: np.ndarray) -> np.ndarray:
    """Top-1 minus top-2 along the last axis."""
    part = np.sort(values, axis=-1)
    return part[..., -1] - part[..., -2]


def run_case(case: dict, seed: int) -> tuple[dict, float]:
    """Run the reference loop for one case and fake-LM seed; return its record and its margin."""
    T = case["T"]
    lm = fake_lm.FakeGuidedLM(seed, T, guidance_scale=case["guidance_scale"])
    stub = _Stub(lm, case["prefix"], case.get("rng_seed", 0))
    gen_config = ref.OmniVoiceGenerationConfig(
        num_step=case["num_step"],
        guidance_scale=case["guidance_scale"],
        t_shift=case["t_shift"],
        layer_penalty_factor=case["layer_penalty_factor"],
        position_temperature=case["position_temperature"],
        class_temperature=case["class_temperature"],
    )
    task = ref.GenerationTask(
        batch_size=1, texts=["x"], target_lens=[T], langs=[None], instructs=[None], ref_texts=[None],
        ref_audio_tokens=[None], ref_rms=[None],
    )
    rng = None
    orig_rand_like, orig_gumbel = torch.rand_like, ref._gumbel_sample
    if "rng_seed" in case:
        rng = philox.CudaPhiloxGenerator(case["rng_seed"], case["rng_offset"])

        def rand_like(t, *args, **kwargs):
            assert t.dtype == torch.float32 and t.is_contiguous()
            return torch.from_numpy(rng.rand(t.numel()).reshape(tuple(t.shape)))

        def gumbel(logits, temperature):
            out = orig_gumbel(logits, temperature)
            stub.gumbel_calls.append(("class" if logits.dim() == 4 else "position", out[0].numpy().copy()))
            return out

        torch.rand_like = rand_like
        ref._gumbel_sample = gumbel
    try:
        with torch.no_grad():
            final = ref.OmniVoice._generate_iterative(stub, task, gen_config)[0].numpy()
    finally:
        torch.rand_like, ref._gumbel_sample = orig_rand_like, orig_gumbel

    sched = reference_schedule(T, case["num_step"], case["t_shift"])
    steps = stub.inputs + [final]
    margin = np.inf
    penalty = (torch.arange(NUM_CODEBOOKS).view(-1, 1) * case["layer_penalty_factor"]).numpy()
    active = [s for s in range(case["num_step"]) if sched[s] > 0]
    assert len(stub.predictions) == len(active), (len(stub.predictions), len(active))
    gumbels = list(stub.gumbel_calls)
    for (step, (lp, pred, conf)) in zip(active, stub.predictions):
        before, after = steps[step], steps[step + 1]
        chosen = before != after
        assert chosen.sum() == sched[step], (step, chosen.sum(), sched[step])
        masked = before == MASK_ID
        if case["class_temperature"] > 0:
            kind, perturbed = gumbels.pop(0)
            assert kind == "class"
            margin = min(margin, _gap_top2(perturbed)[chosen].min())
        else:
            margin = min(margin, _gap_top2(lp)[chosen].min())
        if case["position_temperature"] > 0:
            kind, scores = gumbels.pop(0)
            assert kind == "position"
        else:
            scores = conf - penalty
        ranked = np.sort(scores[masked])[::-1]
        k = sched[step]
        if k < ranked.size:
            margin = min(margin, ranked[k - 1] - ranked[k])
    assert not gumbels, "unconsumed Gumbel draws"

    step0_lp, step0_pred, step0_conf = stub.predictions[0]
    record = {
        "inputs": np.stack(stub.inputs).astype(np.int16),  # [num_step, C, T]: every forward call
        "final": final.astype(np.int16),
        "step0_pred": step0_pred.astype(np.int16),
        "step0_conf": step0_conf.astype(np.float32),
    }
    if rng is not None:
        record["rng_offset_end"] = np.array(rng.offset, dtype=np.uint64)
    return record, float(margin)


def write_loop(path: str) -> None:
    out = {}
    meta = []
    for case in CASES:
        for seed in range(case["seed"], case["seed"] + 50):
            record, margin = run_case(case, seed)
            if margin > MARGIN:
                break
            print(f"  {case['name']}: fake-LM seed {seed} has margin {margin:.2e}, trying the next", flush=True)
        else:
            raise SystemExit(f"{case['name']}: no seed with margin > {MARGIN}")
        print(f"{case['name']}: seed {seed}, margin {margin:.3e}", flush=True)
        for key, value in record.items():
            out[f"{case['name']}__{key}"] = value
        meta.append(dict(case, seed=seed, margin=margin))
    out["cases_json"] = np.array(json.dumps(meta))
    np.savez_compressed(path, **out)


def main() -> None:
    torch.set_num_threads(1)
    golden = os.path.join(REPO, "tests", "golden")
    os.makedirs(golden, exist_ok=True)
    write_schedule(os.path.join(golden, "generate_schedule.npz"))
    write_loop(os.path.join(golden, "generate_loop.npz"))
    for name in ("generate_schedule.npz", "generate_loop.npz"):
        print(name, os.path.getsize(os.path.join(golden, name)), "bytes")


if __name__ == "__main__":
    main()
