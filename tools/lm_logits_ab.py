#!/usr/bin/env python3
"""Step-0 logits of the full-size LM, written by one process and compared with another's: an A/B of a kernel
switch that only an environment variable read once per process can make (e.g. GGML_CUDA_DISABLE_FATTN_SHORT).

    python3 tools/lm_logits_ab.py dump --gguf MODEL.gguf --backend cuda --out A.npz [--shapes auto5,clone5,auto20]
    GGML_CUDA_DISABLE_FATTN_SHORT=1 python3 tools/lm_logits_ab.py dump --gguf MODEL.gguf --backend cuda --out B.npz
    python3 tools/lm_logits_ab.py compare A.npz B.npz

`dump` runs one greedy step per shape (tools/lm_step_time.py's shapes, fixed random ids, half of the targets
masked) alone, then the shapes packed together as the batched engine packs them (16 prompts, shapes cycled),
and saves the conditional and unconditional logits, the picks and their scores. `compare` prints, per entry, the
largest difference relative to the logits' scale, their cosine, the share of equal picks and of scores equal bit
for bit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lm_step_time import SHAPES, prompt  # noqa: E402


def targets(pr, rng) -> np.ndarray:
    tok = rng.integers(0, 1024, (8, pr.n_target)).astype(np.int32)
    tok[:, rng.random(pr.n_target) < 0.5] = 1024  # the mask id: half of the targets still to decode
    return tok


def dump(args) -> None:
    from omnivoice.ggml import Runtime
    from omnivoice.runners.lm import LanguageModel

    shapes = args.shapes.split(",")
    out = {}
    with Runtime(args.backend) as rt:
        lm = LanguageModel(rt, args.gguf, max_graphs=0)
        rng = np.random.default_rng(0)
        dims = [SHAPES[s] if s in SHAPES else tuple(map(int, s.split(":"))) for s in shapes]  # or TEXT:REF:TARGET
        alone = [prompt(*d, seed=i) for i, d in enumerate(dims)]
        packed = [prompt(*dims[i % len(dims)], seed=100 + i) for i in range(args.batch)]
        for name, prs in [(s, [p]) for s, p in zip(shapes, alone)] + [(f"packed{args.batch}", packed)]:
            toks = [targets(p, rng) for p in prs]
            with lm.session(prs, 2.0, greedy=True, with_logits=True) as s:
                res = s.step(toks)
            for i, r in enumerate(res):
                for k in ("cond_logits", "uncond_logits", "pred", "score"):
                    out[f"{name}/{i}/{k}"] = r[k]
        lm.close()
    np.savez(args.out, **out)
    print(f"{len(out)} arrays to {args.out}")


def compare(args) -> None:
    a, b = np.load(args.a), np.load(args.b)
    groups = sorted({k.rsplit("/", 2)[0] for k in a.files})
    print("| entry | prompts | max diff / scale | cosine (min) | equal picks | scores equal bit for bit |\n"
          "|---|---|---|---|---|---|")
    for g in groups:
        idx = sorted({k.split("/")[1] for k in a.files if k.startswith(g + "/")}, key=int)
        diffs, coss, eq, same, n = [], [], 0, 0, 0
        for i in idx:
            for k in ("cond_logits", "uncond_logits"):
                x, y = a[f"{g}/{i}/{k}"].astype(np.float64), b[f"{g}/{i}/{k}"].astype(np.float64)
                diffs.append(np.abs(x - y).max() / np.abs(x).max())
                coss.append(float((x * y).sum() / np.sqrt((x * x).sum() * (y * y).sum())))
            pa, pb = a[f"{g}/{i}/pred"], b[f"{g}/{i}/pred"]
            sa, sb = (np.ascontiguousarray(x[f"{g}/{i}/score"], np.float32).view(np.uint32) for x in (a, b))
            eq, same, n = eq + int((pa == pb).sum()), same + int((sa == sb).sum()), n + pa.size
        print(f"| {g} | {len(idx)} | {max(diffs):.2e} | {min(coss):.7f} | {100 * eq / n:.2f} % "
              f"| {100 * same / n:.2f} % |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--gguf", type=Path, required=True)
    d.add_argument("--backend", default="cuda")
    d.add_argument("--shapes", default="auto5,clone5,auto20",
                   help="comma list of tools/lm_step_time.py's shapes or TEXT:REF:TARGET token counts")
    d.add_argument("--batch", type=int, default=16)
    d.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = ap.parse_args()
    dump(args) if args.cmd == "dump" else compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
