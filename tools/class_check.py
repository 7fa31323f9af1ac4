"""The LM's shape-class graphs against exact shapes, prompt by prompt, on any backend.

    python3 tools/class_check.py --model omnivoice-base-BF16.gguf --backend cuda [--sessions 300] [--json out.json]

Each session packs 1 to 4 random greedy prompts of one-sentence sizes (text, a voice reference, a target of 1 to 10
s; every other session the sizes of the one before with new content, so that it reuses that class's kept graph) and
runs one MaskGIT step on a shape-class graph (LanguageModel(shape_classes=True)) and on exact shapes. A session
fails where a class pick is -1 (a row of no finite logit), a score is not finite, fewer than `--agree` of the picks
equal the exact shapes' (the padding changes summation order only), or a row of the padded Q, K or V holds a value
that is not finite (the tail's rows once carried such values from the compute buffer, 3f6a352). Prints a line per
failure and a summary; exit status 1 if any failed. On CUDA, class graphs of 2 to 4 prompts once gave NaN logits
under load (BENCHMARKS.md, "Shape classes"): this checks the graphs without the server.

`--steps N` runs each class session's graph N times (under load a new graph's first runs were queued back to back)
and checks every run. `--poison` fills every class graph's compute buffer with NaN bits before each run
(poison_compute_buffer), as a new graph's cudaMalloc'd buffer may hold: under load only new class graphs failed
(docs/results/h100-2026-12-05-7e73021/class-defect/), so a class graph that reads compute memory no kernel of its run
wrote fails here at once rather than in one session of fifty. `--outputs-in-compute-buffer` puts a class graph's
attention outputs back in its compute buffer, as before 3f6a352 (the A of that fix's A/B): with `--poison` its tail
rows are then NaN, which on the CPU reach the spare Q/K/V row and no real row (every session fails on its padded
rows alone, every pick equal); a backend whose picks fail there too carries the tail into real rows.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omnivoice.ggml import Runtime, ffi, lib, types  # noqa: E402
from omnivoice.ggml.graph import read_tensor  # noqa: E402
from omnivoice.runners.lm import ChunkSession, LanguageModel, LMInput  # noqa: E402

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


def poison_compute_buffer(graph) -> None:
    """Fill every tensor the graph's compute buffer holds (not views, not weights or constants) with NaN bits, as
    memory left by earlier runs (or a new buffer) may hold: what a run reads before writing it then shows."""
    seen, todo = set(), [lib.ggml_graph_node(graph._gf, i) for i in range(graph.n_nodes)]
    while todo:
        t = todo.pop()
        if t == ffi.NULL or int(ffi.cast("uintptr_t", t)) in seen:
            continue
        seen.add(int(ffi.cast("uintptr_t", t)))
        todo += [s for s in t.src if s != ffi.NULL]
        if (t.view_src == ffi.NULL and t.buffer != ffi.NULL and t.type in (types.F32, types.F16, types.BF16)
                and lib.ggml_backend_buffer_get_usage(t.buffer) == lib.GGML_BACKEND_BUFFER_USAGE_COMPUTE):
            nan = np.full(lib.ggml_nbytes(t), 0xFF, np.uint8)
            lib.ggml_backend_tensor_set(t, ffi.from_buffer(nan), 0, nan.nbytes)


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
    p.add_argument("--steps", type=int, default=1,
                   help="runs of each class session's graph, each checked (1; on CUDA the second is captured into a "
                        "CUDA graph, later ones replay it)")
    p.add_argument("--poison", action="store_true",
                   help="fill each class graph's compute buffer with NaN bits before its step")
    p.add_argument("--outputs-in-compute-buffer", action="store_true",
                   help="a class graph's attention outputs in its compute buffer, as before 3f6a352 (A/Bs)")
    p.add_argument("--json", help="write the failures and the summary here")
    args = p.parse_args(argv)

    runtime = Runtime(args.backend)
    classes = LanguageModel(runtime, args.model, padded_attention=True, max_graphs=16, shape_classes=True)
    exact = LanguageModel(runtime, args.model, padded_attention=True, max_graphs=0, shape_classes=False)
    rng = np.random.default_rng(args.seed)
    padded_segments = ChunkSession._padded_segments
    if args.outputs_in_compute_buffer:  # no zeroed constant for the outputs: padded_attention makes a tensor
        ChunkSession._padded_segments = lambda s: dataclasses.replace(padded_segments(s), results={})
    failures, reused = [], 0
    try:
        sizes: list[tuple[int, int, int]] = []
        for i in range(args.sessions):
            if i % 2 == 0:  # every other session new sizes; the next one new content of the same sizes (its class)
                sizes = [sentence_sizes(rng) for _ in range(int(rng.integers(1, 5)))]
            prompts = [random_prompt(rng, *size) for size in sizes]
            tokens = [pr.input_ids[:, -pr.n_target:] for pr in prompts]
            steps = []  # per step: the picks, and how many padded Q/K/V rows are not finite after it
            with classes.session(prompts, 2.0, True) as s:
                for _ in range(args.steps):
                    if args.poison:
                        poison_compute_buffer(s.graph)
                    steps.append((s.step(tokens), sum(
                        int((~np.isfinite(read_tensor(s.constants[n]).astype(np.float32))).any(-1).sum())
                        for n in ("pad_q", "pad_k", "pad_v") if n in s.constants)))
                was_reused, L = s.reused, s.L
            reused += was_reused
            with exact.session(prompts, 2.0, True) as s:
                want = s.step(tokens)
            for step, (got, nonfinite_rows) in enumerate(steps):
                for j, (g, w) in enumerate(zip(got, want)):
                    bad = {"negative_picks": int((g["pred"] < 0).sum()),
                           "nonfinite_scores": int((~np.isfinite(g["score"])).sum()),
                           "agree": float(np.mean(g["pred"] == w["pred"]))}
                    bad["nonfinite_qkv_rows"] = nonfinite_rows
                    if bad["negative_picks"] or bad["nonfinite_scores"] or bad["agree"] < args.agree or nonfinite_rows:
                        f = {"session": i, "step": step, "prompt": j, "prompts": len(prompts), "L": L,
                             "reused": bool(was_reused), "lengths": [int(pr.input_ids.shape[1]) for pr in prompts],
                             "targets": [pr.n_target for pr in prompts], **bad}
                        failures.append(f)
                        print("FAIL", json.dumps(f), flush=True)
    finally:
        classes.close()
        exact.close()
        ChunkSession._padded_segments = padded_segments
    summary = {"backend": runtime.device.spec, "model": Path(args.model).name, "sessions": args.sessions,
               "class_graphs_reused": reused, "steps": args.steps, "poisoned": bool(args.poison),
               "outputs_in_compute_buffer": bool(args.outputs_in_compute_buffer), "failed_prompts": len(failures),
               "failed_sessions": len({f["session"] for f in failures})}
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "failures": failures}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
