"""How fast cuBLAS can run the LM's products at one request's sizes, with its default algorithm and with the best
of all it offers (PyTorch's TunableOp times every cuBLAS / cuBLASLt algorithm of a shape and keeps the fastest).

The products of one LM step (Qwen3-0.6B: hidden 1024, 16 query and 8 K/V heads of 128, FFN 3072; the audio heads
8 x 1025), BF16 weights and activations with F32 accumulation (as ggml's cuBLAS calls), N positions: 346 (a 5 s
clone), 1040 and 1090 (20 s). Against the step profile's cuBLAS kernels (`tools/lm_step_time.py --profile`), this
says whether choosing algorithms per shape could shorten the step. Needs torch with CUDA (the device image's).

    python3 tools/device/gemm_tunable.py --json OUT.json

Superseded by tools/device/gemm_lt_bench.cu: this loop of torch calls took 16-18 us a product where the same
kernels take 6-9 us in ggml's CUDA graph, so what it timed was torch's launch path more than cuBLAS (BENCHMARKS.md,
"cuBLAS's products at one request's sizes, timed in CUDA graphs").
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F

SHAPES = [("qkv", 4096, 1024), ("o", 1024, 2048), ("gate_up", 6144, 1024), ("down", 1024, 3072)]


def time_us(fn, reps: int = 200) -> float:
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--positions", default="346,1040,1090")
    ap.add_argument("--json")
    args = ap.parse_args()
    os.environ.setdefault("PYTORCH_TUNABLEOP_FILENAME", "/tmp/tunableop_results.csv")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # F32 accumulation, as ggml asks
    dev = torch.device("cuda")
    cases = []
    for n in map(int, args.positions.split(",")):
        for name, m, k in SHAPES + [("heads", 8 * 1025, 1024)]:
            rows = n if name != "heads" else 2 * (125 if n < 500 else 500)  # heads: both segments' target rows
            x = torch.randn(rows, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            cases.append((name, rows, m, k, x, w))
    results = {}
    for tuned in (False, True):
        torch.cuda.tunable.enable(tuned)
        torch.cuda.tunable.tuning_enable(tuned)
        for name, n, m, k, x, w in cases:
            if tuned:
                F.linear(x, w)  # the first call of a shape tunes it
            row = results.setdefault((name, n), {"name": name, "n": n, "m": m, "k": k})
            row["tuned_us" if tuned else "default_us"] = time_us(lambda: F.linear(x, w))
    rows = list(results.values())
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, TunableOp "
          f"{os.environ.get('PYTORCH_TUNABLEOP_ENABLED', 'by API')}")
    print("| product | N | M x K | default us | TFLOP/s | best of all us | TFLOP/s | best / default |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        flop = 2.0 * r["m"] * r["k"] * r["n"]
        d, t = r["default_us"], r["tuned_us"]
        print(f"| {r['name']} | {r['n']} | {r['m']} x {r['k']} | {d:.1f} | {flop / d / 1e6:.0f} | {t:.1f} | "
              f"{flop / t / 1e6:.0f} | {t / d:.2f} |")
    for n in sorted({r["n"] for r in rows if r["name"] != "heads"}):
        layer = [r for r in rows if r["n"] == n and r["name"] != "heads"]
        d, t = sum(r["default_us"] for r in layer), sum(r["tuned_us"] for r in layer)
        print(f"N={n}: a layer's four products {d:.1f} -> {t:.1f} us; "
              f"28 layers {28 * d / 1e3:.3f} -> {28 * t / 1e3:.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
