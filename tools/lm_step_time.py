"""Time one MaskGIT step of the LM (graph replay + read-back) per weight type, at the shapes of the benchmarks.

    python3 tools/lm_step_time.py --gguf-dir CKPT-gguf --quants f32,f16,bf16,q8_0 [--backend cpu] [--threads N]

auto5 is a 5 s auto-voice chunk (22 prompt tokens + 125 target frames, packed with its 125-frame unconditional
row: 272 positions); clone5 adds a 2.3 s voice prompt (49 text tokens, 47 reference frames: 346 positions).
Prints the median of --repeats steps after one warm-up step.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {"auto5": (22, 0, 125), "clone5": (49, 47, 125), "auto20": (40, 0, 500)}


def prompt(n_text: int, n_ref: int, n_target: int, seed: int = 0):
    from omnivoice.runners.lm import Prompt

    rng = np.random.default_rng(seed)
    text = np.repeat(rng.integers(0, 151_000, n_text)[None], 8, 0)
    ids = np.concatenate([text, rng.integers(0, 1024, (8, n_ref)), np.full((8, n_target), 1024)], 1)
    mask = np.arange(ids.shape[1]) >= n_text
    return Prompt(ids.astype(np.int32), mask, n_target)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf-dir", type=Path, required=True)
    p.add_argument("--quants", default="f32,bf16,q8_0")
    p.add_argument("--shapes", default="auto5,clone5")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--threads", type=int)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from omnivoice.ggml import Runtime
    from omnivoice.runners.lm import LanguageModel

    with Runtime(args.backend, args.threads) as rt:
        print(f"{rt}")
        for q in args.quants.split(","):
            lm = LanguageModel(rt, args.gguf_dir / f"omnivoice-base-{q.upper()}.gguf")
            for shape in args.shapes.split(","):
                pr = prompt(*SHAPES[shape])
                tokens = pr.input_ids[:, -pr.n_target:]
                with lm.session([pr], 2.0, greedy=True) as s:
                    s.step([tokens])
                    times = []
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        s.step([tokens])
                        times.append(time.perf_counter() - t0)
                print(f"{q:5s} {shape:7s} L={s.L:5d} {1000 * np.median(times):8.1f} ms/step", flush=True)
            lm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
