"""Time one MaskGIT step of the LM (graph replay + read-back) per weight type, at the shapes of the benchmarks.

    python3 tools/lm_step_time.py --gguf-dir CKPT-gguf --quants f32,f16,bf16,q8_0 [--backend cpu] [--threads N]
    python3 tools/lm_step_time.py --gguf-dir CKPT-gguf --quants bf16 --backend cuda --profile 5   # + kernel table

auto5 is a 5 s auto-voice chunk (22 prompt tokens + 125 target frames, packed with its 125-frame unconditional
row: 272 positions); clone5 adds a 2.3 s voice prompt (49 text tokens, 47 reference frames: 346 positions);
auto20 is a 20 s chunk (1040 positions). Prints the median of --repeats steps after two warm-up steps (a
backend that captures the graph, like CUDA's graphs, does so on the second run), split into the host's work
before the run (the packed input ids), the graph run (input copy, compute, synchronisation) and the read-back,
and the process's CPU time per step (with --threads 1 a measure that other work on the machine barely moves).

--batch N[,N...] packs N prompts of each shape (different ids) into one step, as the batched engine does (on
GPUs: padded attention), e.g. `--batch 1,16,64`.
--variant picks another composition of the same graph (models.lm.Variant: qk_rope, kv_rows, one_attention,
typed_inputs, comma-separated, or none; without it, LanguageModel's default for the runtime: kv_rows on CUDA);
tests/models/test_lm_variants.py checks each against the plain graph.
--profile N records N more steps with PyTorch's profiler (CUPTI sees every kernel of the process, ggml's
too) and prints GPU time per step by kernel: what a step spends on the device against its wall time.
--queued N also runs N steps launched back to back (the same ids, held on the device; one wait at the end) and
times the host's graph launch alone: the step's rate when the host is never on the critical path, against the
synced step above, whose difference is what the host's share of a MaskGIT step (read-back, choice, ids, launch)
costs the GPU.
--maskgit N times whole N-step MaskGIT chunks of each lone shape (greedy, position temperature 5, the default),
stepped on the host (read-back, choice, ids, launch between the steps) as before, and, where the session can (CUDA
with patch 0024), on the device (a session with device_steps: ChunkSession.run_on_device), and checks that both
give the same tokens.
--json FILE appends one line per (weights, shape) with every figure (the session build by phase: constants,
nodes, allocate; ChunkSession.build_times).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {"auto5": (22, 0, 125), "clone5": (49, 47, 125), "auto20": (40, 0, 500)}


def prompt(n_text: int, n_ref: int, n_target: int, seed: int = 0):
    from omnivoice.runners.lm import LMInput

    rng = np.random.default_rng(seed)
    text = np.repeat(rng.integers(0, 151_000, n_text)[None], 8, 0)
    ids = np.concatenate([text, rng.integers(0, 1024, (8, n_ref)), np.full((8, n_target), 1024)], 1)
    mask = np.arange(ids.shape[1]) >= n_text
    return LMInput(ids.astype(np.int32), mask, n_target)


def opened(lm, prompts, tokens):
    """A session for these prompts after its first two steps: (session, build ms, first step ms, second step ms);
    the build's phases in the session's `build_times`."""
    t0 = time.perf_counter()
    s = lm.session(prompts, 2.0, greedy=True)
    try:
        t1 = time.perf_counter()
        s.step(tokens)
        t2 = time.perf_counter()
        s.step(tokens)
    except BaseException:
        s.close()
        raise
    return s, 1000 * (t1 - t0), 1000 * (t2 - t1), 1000 * (time.perf_counter() - t2)


def phases(session) -> str:
    """A session build's phases (ChunkSession.build_times), in ms."""
    return ", ".join(f"{name} {1000 * t:.1f}" for name, t in session.build_times.items())


def timed_step(session, tokens) -> tuple[float, float, float, float]:
    """(prepare, run, read) seconds of one step, as ChunkSession.step times its own parts (`session.times`);
    and the CPU seconds of the process over the whole step (all threads: with one thread, what the step costs
    even when other work shares the cores; with several, ggml's spinning threads count too)."""
    c0 = time.process_time()
    session.step(tokens)
    return (*session.times, time.process_time() - c0)


def queued_steps(lm, prompts, tokens, n: int) -> tuple[float, float]:
    """(ms per step of `n` graph runs launched back to back and waited for once, median ms of the host's launch
    call alone), in a session whose ids live on the device (device_steps: a run neither waits nor copies them)."""
    with lm.session(prompts, 2.0, greedy=True, device_steps=True) as session:
        session.step(tokens)
        session.step(tokens)  # the ids in place; on CUDA the graph captured
        g = session.graph
        launches = []
        t0 = time.perf_counter()
        for _ in range(n):
            t1 = time.perf_counter()
            g.launch()
            launches.append(time.perf_counter() - t1)
        g.wait()
        return 1000 * (time.perf_counter() - t0) / n, 1000 * float(np.median(launches))


def maskgit_chunk(lm, pr, steps: int, device: bool) -> tuple[float, np.ndarray, bool]:
    """(ms per step of one whole MaskGIT chunk of `steps` steps, its tokens, whether it ran on the device)."""
    from omnivoice.generate import CudaPhiloxGenerator, GenerationConfig, MaskGitState
    from omnivoice.runners.lm import GuidedChunk

    config = GenerationConfig(num_step=steps, position_temperature=5.0, class_temperature=0.0)
    state = MaskGitState(pr.n_target, config, CudaPhiloxGenerator(0), mask_id=lm.cfg.audio_mask_id)
    with lm.session([pr], config.guidance_scale, True, device_steps=device) as s:
        t0 = time.perf_counter()
        guided = GuidedChunk(s, lm.cfg.audio_mask_id)
        ran = device and state.run_on_device(guided) is not None
        if not ran:
            while not state.done:
                state.advance(guided)
        return 1000 * (time.perf_counter() - t0) / steps, state.tokens, ran


def kernel_table(run, n: int, top: int = 25) -> dict | None:
    """GPU kernel time of `n` calls of run(), by kernel name, per call, through torch.profiler (CUPTI sees every
    kernel of the process, ggml's included); None where torch has no CUDA."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("  (no torch: kernel profile skipped)")
        return None
    if not torch.cuda.is_available():
        print("  (torch sees no CUDA device: kernel profile skipped)")
        return None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(n):
            run()
        wall = (time.perf_counter() - t0) / n
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type.name == "CUDA" and ev.device_time > 0:
            rec = by_name[ev.name]
            rec[0] += ev.device_time / 1e3  # us -> ms
            rec[1] += 1
    rows = sorted(by_name.items(), key=lambda kv: -kv[1][0])
    return {"wall_ms": 1000 * wall, "gpu_ms": sum(v[0] for v in by_name.values()) / n,
            "kernels": sum(v[1] for v in by_name.values()) / n,
            "top": [(name[:200], ms / n, count / n) for name, (ms, count) in rows[:top]]}


def print_kernels(k: dict, what: str = "profile") -> None:
    """kernel_table's result: wall and GPU time per call, then the costliest kernels."""
    print(f"  {what}: wall {k['wall_ms']:.2f} ms, GPU busy {k['gpu_ms']:.2f} ms, {k['kernels']:.0f} kernels")
    for name, ms, count in k["top"]:
        print(f"    {ms:8.3f} ms {count:6.0f}x  {name[:110]}")


def kernel_profile(session, tokens, n_steps: int, top: int = 25) -> dict | None:
    """kernel_table of `n_steps` LM steps, printed."""
    k = kernel_table(lambda: session.step(tokens), n_steps, top)
    if k is not None:
        print_kernels(k, "profile (per step)")
    return k


def variant_name(variant) -> str:
    """'kv_rows' for Variant(kv_rows=True), 'none' for the plain graph."""
    return ",".join(n for n, on in vars(variant).items() if on) or "none"


def ggml_version() -> str:
    """The ggml version the libraries were built from (their build.json), or '?' for an older build."""
    from omnivoice.ggml._ffi import LIB_DIR

    try:
        return json.loads((LIB_DIR / "build.json").read_text())["ggml_version"]
    except (OSError, ValueError, KeyError):
        return "?"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf-dir", type=Path, required=True)
    p.add_argument("--quants", default="f32,bf16,q8_0",
                   help="weight types; TYPE:PRODUCTS picks the CPU's products (ggml, i16, i8, amx or fma, default auto: "
                        "runners.lm.products_kernel), e.g. f16:ggml,f16:i16,f16:amx,f32:fma")
    p.add_argument("--shapes", default="auto5,clone5",
                   help=f"comma list of {', '.join(SHAPES)} or TEXT:REF:TARGET token counts, e.g. 28:59:125")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--threads", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", default="1", help="comma list of packed prompts per step (the batched engine's "
                   "graph: N copies of each shape with different ids), e.g. 1,16,64")
    p.add_argument("--flash", choices=("auto", "on", "off"), default="auto", help="flash attention")
    p.add_argument("--stack", choices=("auto", "on", "off"), default="auto",
                   help="q/k/v and gate/up as one matrix each (default: on GPUs)")
    p.add_argument("--variant", default=None,
                   help="graph variant(s), e.g. qk_rope,kv_rows, or none (default: the runtime's, see LanguageModel)")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="kernel profile of N steps (CUDA)")
    p.add_argument("--queued", type=int, default=0, metavar="N",
                   help="also time N steps launched back to back, and the host's launch call alone")
    p.add_argument("--maskgit", type=int, default=0, metavar="STEPS",
                   help="also time whole MaskGIT chunks of STEPS steps, on the host and on the device")
    p.add_argument("--json", type=Path, help="append one JSON line per measurement")
    p.add_argument("--label", default="", help="free text stored with each JSON line")
    args = p.parse_args()
    from omnivoice.ggml import Runtime
    from omnivoice.models.lm import Variant
    from omnivoice.runners.lm import LanguageModel

    on_off = {"auto": None, "on": True, "off": False}
    variant = None if args.variant is None else Variant.parse(args.variant)
    flash = on_off[args.flash]
    with Runtime(args.backend, args.threads) as rt:
        print(f"{rt}, ggml {ggml_version()}")
        for item in args.quants.split(","):
            q, _, products = item.partition(":")
            lm = LanguageModel(rt, args.gguf_dir / f"omnivoice-base-{q.upper()}.gguf", flash_attn=flash,
                               stack_projections=on_off[args.stack], variant=variant, cpu_products=products or None)
            q += f" {lm.cpu_products}" if lm.cpu_products else ""
            stacked = lm.weights.layers[0].qkv is not None
            for shape, batch in [(s, int(b)) for s in args.shapes.split(",") for b in args.batch.split(",")]:
                dims = SHAPES[shape] if shape in SHAPES else tuple(map(int, shape.split(":")))
                prs = [prompt(*dims, seed=i) for i in range(batch)]
                tokens = [pr.input_ids[:, -pr.n_target:] for pr in prs]
                # A new request shape pays the session build (graph, scheduler, compute buffers) and its first
                # steps (on CUDA: the first runs directly, cuBLAS choosing algorithms for new shapes; the second
                # is captured into a CUDA graph and instantiated) before its steps run at the rate below.
                s, build_ms, first_ms, second_ms = opened(lm, prs, tokens)
                with s:
                    parts = np.array([timed_step(s, tokens) for _ in range(args.repeats)])
                    prep, run, read, cpu = 1000 * np.median(parts, axis=0)
                    total = 1000 * np.median(parts[:, :3].sum(axis=1))
                    print(f"{q:9s} {shape:7s} x{batch:<3d} L={s.L:6d} {total:8.2f} ms/step (prepare {prep:.2f}, run {run:.2f}, "
                          f"read {read:.2f}; CPU {cpu:.0f} ms; flash {'on' if lm.flash_attn else 'off'}, stacked {stacked}, "
                          f"variant {variant_name(lm.variant)}, {s.graph.n_nodes} nodes; "
                          f"session build {build_ms:.1f} ms ({phases(s)}), "
                          f"first steps {first_ms:.1f} / {second_ms:.1f} ms)",
                          flush=True)
                    queued = queued_steps(lm, prs, tokens, args.queued) if args.queued else (None, None)
                    if args.queued:
                        print(f"      {args.queued} steps queued back to back: {queued[0]:.2f} ms/step "
                              f"(host launch call {queued[1]:.3f} ms)", flush=True)
                    prof = kernel_profile(s, tokens, args.profile) if args.profile else None
                chunk = None
                if args.maskgit and batch == 1:
                    times, chunk_tokens, ran = {"host": [], "device": []}, {}, False
                    for where in ("host", "device") * (args.repeats + 1):  # alternated; the first pair warms up
                        ms, chunk_tokens[where], on_device = maskgit_chunk(lm, prs[0], args.maskgit, where == "device")
                        times[where].append(ms)
                        ran = ran or on_device
                    chunk = {"host_ms_per_step": float(np.median(times["host"][1:])),
                             "device_ms_per_step": float(np.median(times["device"][1:])), "device_ran": ran,
                             "tokens_equal": bool(np.array_equal(chunk_tokens["host"], chunk_tokens["device"]))}
                    print(f"      {args.maskgit}-step MaskGIT chunk: host {chunk['host_ms_per_step']:.2f} ms/step, "
                          f"device {chunk['device_ms_per_step']:.2f} ms/step"
                          f"{'' if ran else ' (the session declined: host)'}, tokens "
                          f"{'equal' if chunk['tokens_equal'] else 'DIFFER'}", flush=True)
                    if args.profile and ran:  # the device chunk's kernels: the steps' and the choices'
                        chunk["profile"] = k = kernel_table(lambda: maskgit_chunk(lm, prs[0], args.maskgit, True), 1)
                        if k:
                            print_kernels(k, f"profile (one {args.maskgit}-step chunk on the device)")
                # The same shape again with other ids: a model that keeps graphs (LanguageModel.max_graphs, on
                # GPUs) hands this session the graph the one above left, so neither its build nor its first
                # steps cost more than a step.
                s2, *times = opened(lm, [prompt(*dims, seed=batch + i) for i in range(batch)], tokens)
                with s2:
                    again = (*times, s2.reused)
                print(f"      same shape again: session {'reused' if again[3] else 'built'} in {again[0]:.1f} ms, "
                      f"first steps {again[1]:.1f} / {again[2]:.1f} ms", flush=True)
                if args.json:
                    with args.json.open("a") as f:
                        f.write(json.dumps({"label": args.label, "backend": args.backend, "weights": q,
                                            "shape": shape, "batch": batch, "L": s.L, "ms_per_step": total, "prepare_ms": prep,
                                            "run_ms": run, "read_ms": read, "cpu_ms": cpu, "build_ms": build_ms,
                                            "build_phases_ms": {k: 1000 * t for k, t in s.build_times.items()},
                                            "first_step_ms": first_ms, "second_step_ms": second_ms, "threads": rt.n_threads,
                                            "flash": lm.flash_attn, "stacked": stacked,
                                            "variant": variant_name(lm.variant), "exact_f32": rt.exact_f32,
                                            "ggml": ggml_version(), "again_build_ms": again[0],
                                            "again_first_step_ms": again[1], "again_second_step_ms": again[2],
                                            "again_reused": again[3], "queued_ms_per_step": queued[0],
                                            "launch_call_ms": queued[1], "maskgit_chunk": chunk,
                                            "profile": prof}) + "\n")
            lm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
