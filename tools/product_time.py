"""Time one matrix product W x on a backend per weight type, with and without the CPU's repacked layout.

    python3 tools/product_time.py --types f32,bf16,q8_0,q4_0 --shape 1024:3072:272 [--backend cpu] [--threads N]

Shape IN:OUT:N is the LM's gate/up product at a 5 s chunk's 272 packed positions by default. W is random,
quantized by gguf-py where the type asks for it; `repacked` rows put it in the CPU backend's repack buffer
(Runtime.repacks: Q4_0, Q4_K, IQ4_NL with AVX2 on x86; Arm also Q8_0). Prints the median of --repeats runs
after one warm-up, in ms and GFLOP/s (2 IN OUT N flops).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--types", default="f32,bf16,q8_0,q4_0")
    p.add_argument("--shape", default="1024:3072:272", help="IN:OUT:N")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--threads", type=int)
    p.add_argument("--repeats", type=int, default=10)
    args = p.parse_args()
    from omnivoice.ggml import Graph, Runtime, WeightStore, lib, types

    n_in, n_out, n = (int(v) for v in args.shape.split(":"))
    rng = np.random.default_rng(0)
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    with Runtime(args.backend, args.threads) as rt:
        print(rt)
        for name in args.types.split(","):
            value = w if name == "f32" else (name, w)
            ways = [True, False] if rt.repacks(types.by_name(name), [n_in, n_out]) else [False]
            for repack in ways:
                with WeightStore.from_arrays(rt, {"w": value}, repack=(lambda _: True) if repack else None) as store, \
                        Graph(rt) as g:
                    t = g.input("x", np.float32, x.shape)
                    g.output("y", lib.ggml_mul_mat(g.ctx, store["w"], t))
                    g.compute(x=x)
                    times = []
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        g.compute(x=x)
                        times.append(time.perf_counter() - t0)
                ms = 1000 * float(np.median(times))
                print(f"{name:5s} {'repacked' if repack else 'plain':8s} {args.shape}: {ms:8.2f} ms "
                      f"{2 * n_in * n_out * n / ms / 1e6:7.1f} GFLOP/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
