#!/usr/bin/env python3
"""The host's share of a MaskGIT step: generate.batch.step_many on N requests of T frames, no LM.

    python3 tools/maskgit_host_time.py [--requests 1,64] [--frames 40,125] [--repeats 3] [--class-temperature T]

Each request gets its own MaskGitState (default sampler: greedy classes, position temperature 5, so every
step draws Philox numbers and Gumbel noise for the masked positions) and random LM outputs (`pred`, `score`);
all 32 steps run; with --class-temperature > 0 the classes are sampled too, from random guided log-probs
[8, T, 1025] (class noise of that size every step). Prints milliseconds per step (best of --repeats), what the engine's driving thread spends
between two graph runs for that many requests, and the first step's position noise alone (N * 8 * T positions:
Philox, and the noise in float64; its exact value is evaluated later, in the step, where it decides).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", default="1,64")
    p.add_argument("--frames", default="40,125")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--class-temperature", type=float, default=0.0)
    args = p.parse_args()
    from omnivoice.generate.batch import draw_position_noise, step_many
    from omnivoice.generate.maskgit import MaskGitState
    from omnivoice.pipeline import Settings, make_rng

    sampler = replace(Settings().sampler, class_temperature=args.class_temperature)
    for n in map(int, args.requests.split(",")):
        for T in map(int, args.frames.split(",")):
            rng = np.random.default_rng(0)
            if sampler.class_temperature > 0:
                outs = [{"log_probs": -10 * rng.random((8, T, 1025)).astype(np.float32)} for _ in range(n)]
            else:
                outs = [{"pred": rng.integers(0, 1024, (8, T)).astype(np.int32),
                         "score": rng.random((8, T)).astype(np.float32)} for _ in range(n)]
            best = np.inf
            for _ in range(args.repeats):
                states = [MaskGitState(T, sampler, make_rng(i), 8, 1024) for i in range(n)]
                steps, t0 = 0, time.perf_counter()
                while not states[0].done:
                    step_many(states, outs)
                    steps += 1
                best = min(best, (time.perf_counter() - t0) / steps)
            noise = np.inf  # the position noise alone: Philox and the float64 noise (draw_position_noise)
            for _ in range(args.repeats):
                states = [MaskGitState(T, sampler, make_rng(i), 8, 1024) for i in range(n)]
                t0 = time.perf_counter()
                draw_position_noise(states)
                noise = min(noise, time.perf_counter() - t0)
            print(f"{n:3d} requests x {T:3d} frames: {1000 * best:7.2f} ms per step; the first step's position "
                  f"noise ({n * 8 * T} positions) {1000 * noise:6.2f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
