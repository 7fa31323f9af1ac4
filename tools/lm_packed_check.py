#!/usr/bin/env python3
"""How close a packed LM step (the batched engine's graph) is to each prompt's own step, on a real model.

    python3 tools/lm_packed_check.py --gguf MODEL.gguf --backend cuda [--batch 16] [--shapes auto5,clone5]

Packs `--batch` prompts (the shapes of tools/lm_step_time.py, cycled, each with its own random ids) into one
session, the way the engine does (on GPUs: padded attention, K and V scattered into the padded layout), runs
one step with half of the targets masked, and compares each prompt's conditional and unconditional logits and
greedy picks with the same prompt in a session of its own. Prints, per prompt, the largest difference relative
to the logits' scale and the share of equal picks; the tests do the same on the tiny model, where GPUs lack
the flash-attention kernels the padded layout needs (head size 16).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lm_step_time import SHAPES, prompt  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", type=Path, required=True)
    p.add_argument("--backend", default="cpu")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--shapes", default="auto5,clone5")
    args = p.parse_args()
    from omnivoice.ggml import Runtime
    from omnivoice.runners.lm import LanguageModel

    shapes = args.shapes.split(",")
    rng = np.random.default_rng(0)
    prompts = [prompt(*SHAPES[shapes[i % len(shapes)]], seed=i) for i in range(args.batch)]
    tokens = []
    for pr in prompts:
        t = np.full((8, pr.n_target), 1024, np.int32)
        known = rng.random(t.shape) < 0.5
        t[known] = rng.integers(0, 1024, int(known.sum()))
        tokens.append(t)
    with Runtime(args.backend) as rt:
        lm = LanguageModel(rt, args.gguf)
        print(f"{rt}; flash attention {lm.flash_attn}, padded attention {lm.padded_attention}, "
              f"variant {lm.variant}")
        with lm.session(prompts, 2.0, True, with_logits=True) as s:
            packed = s.step(tokens)
        worst, agree = 0.0, []
        for i, (pr, t) in enumerate(zip(prompts, tokens)):
            with lm.session([pr], 2.0, True, with_logits=True) as s:
                alone = s.step([t])[0]
            diff = max(float(np.abs(packed[i][k] - alone[k]).max() / np.abs(alone[k]).max())
                       for k in ("cond_logits", "uncond_logits"))
            same = float(np.mean(packed[i]["pred"] == alone["pred"]))
            worst, agree = max(worst, diff), agree + [same]
            print(f"prompt {i:3d} ({shapes[i % len(shapes)]}): logits within {diff:.2e} of the scale, "
                  f"picks equal {100 * same:.1f} %")
        print(f"all {args.batch}: worst {worst:.2e} of the scale, picks equal {100 * np.mean(agree):.2f} % "
              f"(lowest {100 * min(agree):.1f} %)")
        lm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
