"""The LM's shape-class graphs against exact shapes, prompt by prompt, on any backend.

    python3 tools/class_check.py --model omnivoice-base-BF16.gguf --backend cuda [--sessions 300] [--json out.json]

Each session packs 1 to 4 random greedy prompts of one-sentence sizes (text, a voice reference, a target of 1 to 10
s; every other session the sizes of the one before with new content, so that it reuses that class's kept graph) and
runs one MaskGIT step on a shape-class graph (LanguageModel(shape_classes=True)) and on exact shapes. A session
fails where a class pick is -1 (a row of no finite logit), a score is not finite, fewer than `--agree` of the picks
equal the exact shapes' (the padding changes summation order only), or a row of the padded Q, K or V holds a value
that is not finite (the tail's rows once carried such values from the compute buffer, 3f6a352). Prints a line per
failure and a summary; exit status 1 if any failed. On CUDA, class graphs of 2 to 4 prompts gave NaN logits under
load (BENCHMARKS.md, "Shape classes off"): this checks the graphs without the server.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omnivoice.ggml import Runtime  # noqa: E402
from omnivoice.ggml.graph import read_tensor  # noqa: E402
from omnivoice.runners.lm import LanguageModel, LMInput  # noqa: E402

FRAMES_PER_S = 25


def random_prompt(rng: np.random.Generator, n_text: int, n_ref: int, n_target: int, C: int = 8,
                  mask_id: int = 1024) -> LMInput:
    """Text ids broadcast over the codebooks, optional reference codes, then the (partly unmasked) target."""
    text = np.repeat(rng.integers(0, 151_000, n_text)[None], C, 0)
    ref = rng.integers(0, 1024, (C, n_ref))
    target = np.where(rng.random((C, n_target)) < 0.6, mask_id, rng.integers(0, 1024, (C, n_target)))
    ids = np.concatenate([text, ref, target], 1).astype(np.int32)
    mask = np.zeros(ids.shape[1], bool)
    mask[n_text:] = True
    return LMInput(ids, mask, n_target)


def sentence_sizes(rng: np.random.Generator) -> tuple[int, int, int]:
    """A one-sentence request's prompt sizes: 5-40 text ids, a 0-5 s reference, a 1-10 s target."""
    return (int(rng.integers(5, 40)), int(rng.integers(0, 5 * FRAMES_PER_S)),
            int(rng.integers(FRAMES_PER_S, 10 * FRAMES_PER_S)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="LM GGUF")
    p.add_argument("--backend", default="auto")
    p.add_argument("--sessions", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--agree", type=float, default=0.98, help="least share of picks equal to exact shapes' (0.98)")
    p.add_argument("--json", help="write the failures and the summary here")
    args = p.parse_args(argv)

    runtime = Runtime(args.backend)
    classes = LanguageModel(runtime, args.model, padded_attention=True, max_graphs=16, shape_classes=True)
    exact = LanguageModel(runtime, args.model, padded_attention=True, max_graphs=0, shape_classes=False)
    rng = np.random.default_rng(args.seed)
    failures, reused = [], 0
    try:
        sizes: list[tuple[int, int, int]] = []
        for i in range(args.sessions):
            if i % 2 == 0:  # every other session new sizes; the next one new content of the same sizes (its class)
                sizes = [sentence_sizes(rng) for _ in range(int(rng.integers(1, 5)))]
            prompts = [random_prompt(rng, *size) for size in sizes]
            tokens = [pr.input_ids[:, -pr.n_target:] for pr in prompts]
            with classes.session(prompts, 2.0, True) as s:
                got, was_reused, L = s.step(tokens), s.reused, s.L
                nonfinite_rows = sum(int((~np.isfinite(read_tensor(s.constants[n]).astype(np.float32))).any(-1).sum())
                                     for n in ("pad_q", "pad_k", "pad_v") if n in s.constants)
            reused += was_reused
            with exact.session(prompts, 2.0, True) as s:
                want = s.step(tokens)
            for j, (g, w) in enumerate(zip(got, want)):
                bad = {"negative_picks": int((g["pred"] < 0).sum()),
                       "nonfinite_scores": int((~np.isfinite(g["score"])).sum()),
                       "agree": float(np.mean(g["pred"] == w["pred"]))}
                bad["nonfinite_qkv_rows"] = nonfinite_rows
                if bad["negative_picks"] or bad["nonfinite_scores"] or bad["agree"] < args.agree or nonfinite_rows:
                    f = {"session": i, "prompt": j, "prompts": len(prompts), "L": L, "reused": bool(was_reused),
                         "lengths": [int(pr.input_ids.shape[1]) for pr in prompts],
                         "targets": [pr.n_target for pr in prompts], **bad}
                    failures.append(f)
                    print("FAIL", json.dumps(f), flush=True)
    finally:
        classes.close()
        exact.close()
    summary = {"backend": runtime.device.spec, "model": Path(args.model).name, "sessions": args.sessions,
               "class_graphs_reused": reused, "failed_prompts": len(failures),
               "failed_sessions": len({f["session"] for f in failures})}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "failures": failures}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
