"""Time the LM's matrix products alone: ggml (this build, by weight type and thread count) against numpy
(OpenBLAS) and torch on the same CPU.

    python3 tools/matmul_bench.py [--shapes down,gate,q,kv,o,heads] [--n 272] [--types f32,bf16,q8_0,q4_k]
        [--threads 1,2] [--repeats 7] [--repack] [--numpy] [--torch /work/refvenv/bin/python] [--json OUT]

Every row is one product y = W x with W the weight [M x K] (ggml ne [K, M]) and x the activations [K x N]
(ggml [K, N]), N = positions of a packed MaskGIT step (272 for a 5 s auto-voice chunk, 346 for clone5).
The shapes are those of one Qwen3-0.6B layer (q 1024->2048, k/v 1024->1024, o 2048->1024, gate/up 1024->3072,
down 3072->1024) and the audio heads (1024 -> 8 x 1025, on the 250 target positions). ggml's figure is the
median of --repeats graph runs after two warm-up runs, the graph holding nothing but the one product (for a
quantized weight that includes quantizing x to the dot-product type, as in the LM). `--repack` adds a row per
type and extra buffer type of ggml's CPU backend that has a kernel for it here: CPU_REPACK (e.g. Q4_0 and Q4_K
on AVX2, which our loader uses) and, in builds for CPUs with AMX, AMX (Q4_0, Q4_1, Q8_0 and K-quants on
Intel's tile units). Types `i16`, `i8`, `amx` and `fma` are the package's kernels (omnivoice.nn.int16 and
omnivoice.nn.int8, x86 with AVX2; omnivoice.nn.amx, BF16 on Intel's AMX tiles; omnivoice.nn.fma, float32 with
AVX2 or AVX-512). numpy and
torch run in their own processes with the thread count fixed before import (OPENBLAS_NUM_THREADS,
torch.set_num_threads), float32 `W @ x` of the same shapes.

GFLOP/s counts 2*M*K*N per product over the wall time; "per CPU-s" over the process's CPU time (all its
threads), which a busy machine disturbs less: on one thread it is the kernel's own rate. On a shared machine
run it under `flock /tmp/omnivoice-bench.lock` at a high priority (BENCHMARKS.md, Method); figures are only
comparable within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

# numpy checks each result; its OpenBLAS threads, left spinning after that product, took a core from the next
# shape's timing (the k/v product then ran at half speed with twice its wall time in CPU time on the 2-core Zen 3).
# The --numpy rows run in a process of their own with their thread count.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# name: (K, M, N or None = --n): weight [M x K] times activations [K x N]
SHAPES = {"down": (3072, 1024, None), "gate": (1024, 3072, None), "q": (1024, 2048, None),
          "kv": (1024, 1024, None), "o": (2048, 1024, None), "heads": (1024, 8200, 250)}
# products of each shape in one LM step (28 layers; k and v are two kv products, gate and up two gate products)
PER_STEP = {"down": 28, "gate": 56, "q": 28, "kv": 56, "o": 28, "heads": 1}


def cpu_model() -> str:
    """The CPU's model name and the SIMD flags that decide ggml's kernels on x86."""
    name, flags = platform.processor() or "?", set()
    try:
        info = Path("/proc/cpuinfo").read_text()
        for line in info.splitlines():
            if line.startswith("model name") and name in ("?", "x86_64", ""):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
        fam = next((ln.split(":")[1].strip() for ln in info.splitlines() if ln.startswith("cpu family")), "?")
        mod = next((ln.split(":")[1].strip() for ln in info.splitlines() if ln.startswith("model\t")), "?")
        name += f" (family {fam} model {mod})"
    except OSError:
        pass
    want = ["avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8"]
    return f"{name}, {os.cpu_count()} logical CPUs, " + " ".join(f for f in want if f in flags)


def quantize(w: np.ndarray, ggml_type: int) -> np.ndarray:
    """Rows of a float32 matrix [M, K] in a ggml type, through ggml's own quantizer."""
    from omnivoice.ggml import ffi, lib

    m, k = w.shape
    if ggml_type == lib.GGML_TYPE_F32:
        return np.ascontiguousarray(w)
    out = np.empty(lib.ggml_row_size(ggml_type, k) * m, dtype=np.uint8)
    src = np.ascontiguousarray(w, dtype=np.float32)
    lib.ggml_quantize_chunk(ggml_type, ffi.cast("float *", ffi.from_buffer(src)), ffi.from_buffer(out), 0, m, k,
                            ffi.NULL)
    return out


def time_ggml(type_name: str, K: int, M: int, N: int, threads: int, repeats: int, extra: str | None = None
              ) -> tuple[float, float] | None:
    """Median (wall, process CPU) seconds of one product in a one-node ggml graph, the weight in the plain CPU
    buffer or in the extra buffer type `extra` (Runtime.extra_buffer_types); None where that buffer type has no
    kernel for it here."""
    from omnivoice.ggml import Runtime, ffi, lib
    from omnivoice.ggml.graph import new_context

    from omnivoice.runners.lm import KERNEL_MODULES

    if type_name in KERNEL_MODULES:
        return None if extra else time_packed(type_name, K, M, N, threads, repeats)
    ggml_type = getattr(lib, "GGML_TYPE_" + type_name.upper())
    with Runtime("cpu", threads) as rt:
        if extra and not rt.multiplies_in(extra, ggml_type, [K, M]):
            return None
        buft = rt.extra_buffer_types[extra] if extra else lib.ggml_backend_cpu_buffer_type()
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((M, K)) * 0.02).astype(np.float32)
        data = quantize(w, ggml_type)
        ctx = new_context(1)
        wt = lib.ggml_new_tensor_2d(ctx, ggml_type, K, M)
        buf = lib.ggml_backend_buft_alloc_buffer(buft, lib.ggml_backend_buft_get_alloc_size(buft, wt))
        try:
            lib.ggml_backend_tensor_alloc(buf, wt, lib.ggml_backend_buffer_get_base(buf))
            if extra and wt.extra == ffi.NULL:  # ggml has no layout of its own for this type there
                return None
            lib.ggml_backend_buffer_set_usage(buf, lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
            lib.ggml_backend_tensor_set(wt, ffi.from_buffer(data), 0, data.nbytes)
            return time_graph(rt, lambda ctx, x: lib.ggml_mul_mat(ctx, wt, x), w, N, repeats, type_name)
        finally:
            lib.ggml_backend_buffer_free(buf)
            lib.ggml_free(ctx)


def time_packed(name: str, K: int, M: int, N: int, threads: int, repeats: int) -> tuple[float, float] | None:
    """time_ggml for one of the package's kernels (`i16`: omnivoice.nn.int16, `i8`: omnivoice.nn.int8, `amx`:
    omnivoice.nn.amx, `fma`: omnivoice.nn.fma; the weight packed at load, one custom node, after the node that
    casts (amx) or packs (fma) the input); None where this CPU or build has none."""
    from omnivoice.ggml import Runtime
    from omnivoice.runners.lm import KERNEL_MODULES

    module = KERNEL_MODULES[name]
    if not module.available() or K % module.KERNEL.block:
        return None
    w = (np.random.default_rng(0).standard_normal((M, K)) * 0.02).astype(np.float32)
    packed = module.pack(w)
    with Runtime("cpu", threads) as rt:
        return time_graph(rt, packed.product, w, N, repeats, name)


def time_graph(rt, product, w: np.ndarray, N: int, repeats: int, label: str) -> tuple[float, float]:
    """Median (wall, process CPU) seconds of a graph holding product(ctx, x) alone, after two warm-up runs; its
    result checked against numpy."""
    from omnivoice.ggml import Graph

    rng = np.random.default_rng(1)
    with Graph(rt) as g:
        x = g.input("x", np.float32, (N, w.shape[1]))
        g.output("y", product(g.ctx, x))
        g.allocate()
        xv = rng.standard_normal((N, w.shape[1])).astype(np.float32)
        g.set_input("x", xv)
        times = []
        for i in range(repeats + 2):
            t0, c0 = time.perf_counter(), time.process_time()
            g.compute(outputs=[])
            if i >= 2:
                times.append((time.perf_counter() - t0, time.process_time() - c0))
        y = g.read_outputs(["y"])["y"]
        ref = xv @ w.T
        err = float(np.abs(y - ref).max() / np.abs(ref).max())
        if err > 0.1:
            raise RuntimeError(f"ggml {label} product is wrong: relative error {err}")
        return tuple(float(v) for v in np.median(times, axis=0))


_FOREIGN = r"""
import json, sys, time
cfg = json.loads(sys.argv[1])
import numpy as np
if cfg["lib"] == "torch":
    import torch
    torch.set_num_threads(cfg["threads"])
out = []
for K, M, N in cfg["shapes"]:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((M, K)) * 0.02).astype(np.float32)
    x = rng.standard_normal((K, N)).astype(np.float32)
    if cfg["lib"] == "torch":
        w, x = torch.from_numpy(w), torch.from_numpy(x)
        mm = lambda: torch.mm(w, x)
    else:
        mm = lambda: w @ x
    ts = []
    for i in range(cfg["repeats"] + 2):
        t0, c0 = time.perf_counter(), time.process_time(); mm()
        if i >= 2:
            ts.append((time.perf_counter() - t0, time.process_time() - c0))
    out.append([sorted(t[0] for t in ts)[len(ts) // 2], sorted(t[1] for t in ts)[len(ts) // 2]])
print(json.dumps(out))
"""


def time_foreign(python: str, which: str, shapes: list[tuple[int, int, int]], threads: int, repeats: int
                 ) -> list[tuple[float, float]]:
    """Median (wall, process CPU) seconds per shape of float32 W @ x in numpy or torch, in a process of `python`
    on `threads`."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    cfg = json.dumps({"lib": which, "threads": threads, "shapes": shapes, "repeats": repeats})
    out = subprocess.run([python, "-c", _FOREIGN, cfg], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(lib: str, weights: str, threads: int, shape: str, K: int, M: int, N: int, s: tuple[float, float]) -> dict:
    return {"lib": lib, "type": weights, "threads": threads, "shape": shape, "K": K, "M": M, "N": N,
            "ms": 1e3 * s[0], "cpu_ms": 1e3 * s[1], "gflops": 2 * K * M * N / s[0] / 1e9,
            "gflop_per_cpu_s": 2 * K * M * N / max(s[1], 1e-9) / 1e9}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="down,gate,q,kv,o,heads", help=f"comma list of {', '.join(SHAPES)} or K:M:N")
    p.add_argument("--n", type=int, default=272, help="positions (columns of x); heads use 250")
    p.add_argument("--types", default="f32,f16,bf16,q8_0,q4_0,q4_k,q5_k,q6_k")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--repack", action="store_true",
                   help="also weights in each of the CPU's extra buffer types (CPU_REPACK; AMX where built)")
    p.add_argument("--numpy", action="store_true", help="also numpy float32 (this interpreter's BLAS)")
    p.add_argument("--torch", metavar="PYTHON", help="also torch float32, run by this interpreter")
    p.add_argument("--json", type=Path, help="append one JSON line per row")
    args = p.parse_args()

    shapes = []
    for name in args.shapes.split(","):
        K, M, N = SHAPES[name] if name in SHAPES else (int(v) for v in name.split(":"))
        shapes.append((name, K, M, N or args.n))
    threads = [int(t) for t in args.threads.split(",")]
    from omnivoice.ggml import Runtime

    with Runtime("cpu", 1) as rt:
        extra_names = list(rt.extra_buffer_types)
    print(f"# {cpu_model()}; load average {os.getloadavg()[0]:.2f}")
    rows = []
    for t in threads:
        for type_name in args.types.split(","):
            for extra in [None] + (sorted(extra_names) if args.repack else []):
                label = type_name + {None: "", "CPU_REPACK": " repacked"}.get(extra, f" {extra}")
                for name, K, M, N in shapes:
                    s = time_ggml(type_name, K, M, N, t, args.repeats, extra)
                    if s is None:
                        break
                    rows.append(row("ggml", label, t, name, K, M, N, s))
        for which, python in (("numpy", sys.executable if args.numpy else None), ("torch", args.torch)):
            if python:
                secs = time_foreign(python, which, [(K, M, N) for _, K, M, N in shapes], t, args.repeats)
                for (name, K, M, N), s in zip(shapes, secs):
                    rows.append(row(which, "f32", t, name, K, M, N, s))

    print("| library | weights | threads | "
          + " | ".join(f"{n} {M}x{K}x{N} ms (GFLOP/s; per CPU-s)" for n, K, M, N in shapes)
          + " | LM step's products ms | same, CPU s |")
    print("|" + "---|" * (5 + len(shapes)))
    keys = list(dict.fromkeys((r["lib"], r["type"], r["threads"]) for r in rows))
    for key in keys:
        mine = {r["shape"]: r for r in rows if (r["lib"], r["type"], r["threads"]) == key}
        step = sum(mine[n]["ms"] * PER_STEP.get(n, 0) for n, *_ in shapes if n in mine)
        cpu = sum(mine[n]["cpu_ms"] * PER_STEP.get(n, 0) for n, *_ in shapes if n in mine) / 1e3
        cells = [f"{mine[n]['ms']:.1f} ({mine[n]['gflops']:.0f}; {mine[n]['gflop_per_cpu_s']:.0f})" if n in mine
                 else "—" for n, *_ in shapes]
        full = len(mine) == len(SHAPES)
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells)
              + f" | {step:.0f}{'' if full else ' (part)'} | {cpu:.2f} |")
    print(f"# load average after {os.getloadavg()[0]:.2f}")
    if args.json:
        with args.json.open("a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
