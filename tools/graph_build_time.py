#!/usr/bin/env python3
"""What a new LM graph costs the serving engine: a packed session's build, by phase, for compositions never seen.

    python3 tools/graph_build_time.py --model GGUF_DIR --backend cuda [--requests 16] [--rounds 12] [--profile 20]

The server's engine switches its packed graph whenever the set of chunks in flight changes (a request joins or
finishes); under load with texts of different lengths no kept graph fits, so each switch builds one
(tools/server_load.py's /metrics columns: 1.1-1.3 s of a 32-client run's 4.6-5 s on the H200). This tool takes
`--requests` prompts of tools/server_load.py's VARIED texts and, round by round, packs a different subset of them
(so that every key is new, as under that load; the model's kept graphs work as in the server), then times:
the session's build (ChunkSession: the graph's nodes, its constants on the device, the scheduler's measurement,
reservation and allocation), its first step (launch and wait: on CUDA ggml runs a new graph kernel by kernel),
its second (ggml captures and instantiates its CUDA graph), the host's share of the replayed steps after them
(preparing the ids, launching, waiting for the device, reading back), and closing it. Medians over `--rounds`,
and the ggml calls of the build and close by name (ms a graph: the scheduler's, the buffers', the copies';
wrapped with timers here, as cProfile does not see cffi's calls). With `--profile N`, the N Python functions
that took the most time of the builds and closes (cProfile, by own time, ggml's calls inside them).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS.parent))
sys.path.insert(0, str(TOOLS))

from request_profile import Timers  # noqa: E402  (tools/ is on the path)
from server_load import VARIED  # noqa: E402

# The ggml calls a graph's build and close make that may cost more than their count: the scheduler's passes, the
# device buffers' allocation and release, the constants' copies.
TIMED_CALLS = ("ggml_backend_sched_new", "ggml_backend_sched_reserve_size", "ggml_backend_sched_reserve",
               "ggml_backend_sched_alloc_graph", "ggml_backend_sched_reset", "ggml_backend_sched_free",
               "ggml_backend_sched_synchronize", "ggml_backend_alloc_ctx_tensors", "ggml_backend_buffer_free",
               "ggml_backend_tensor_set", "ggml_backend_tensor_memset", "ggml_new_graph_custom",
               "ggml_build_forward_expand", "ggml_graph_node", "ggml_init", "ggml_free")


STEPS = 4  # replayed steps timed per graph, after the first two


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="folder with the LM and codec GGUFs, or the LM GGUF")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--quant", default="auto")
    ap.add_argument("--requests", type=int, default=16, help="prompts packed a round (default 16)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--profile", type=int, default=0, help="print the N costliest functions (cProfile)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import omnivoice
    from omnivoice.engine.core import BatchEngine, Task
    from omnivoice.engine.request import as_request

    from omnivoice.ggml import lib

    ov = omnivoice.OmniVoice(args.model, backend=args.backend, quant=args.quant)
    calls = Timers()  # seconds in the ggml calls of TIMED_CALLS while `on`
    calls.on = False
    for name in TIMED_CALLS:
        calls.wrap(lib, name, name)
    lm = ov.lm
    engine = BatchEngine(ov, max_batch=max(args.requests, 1))
    pool = []
    for i in range(args.requests + args.rounds):  # one more prompt per round: each round's subset is new
        request = as_request({"text": VARIED[i % len(VARIED)] + " " + "again " * (i // len(VARIED)), "seed": i})
        task = Task(request, request.settings())
        engine._start_unit(task)
        pool.append(task)
    print(f"device: {ov.runtime.device.spec} ({ov.runtime.device.description}); kept graphs: {lm.max_graphs}")
    phases: dict[str, list[float]] = {k: [] for k in ("build", "first_step", "second_step", "close")}
    profiler = cProfile.Profile() if args.profile else None
    host: dict[str, list[float]] = {k: [] for k in ("prepare", "launch", "wait", "read")}
    positions = []
    for r in range(args.rounds + 1):
        tasks = pool[r:r + args.requests]
        prompts = [t.lm_prompt for t in tasks]
        tokens = [t.state.tokens for t in tasks]
        t0 = time.perf_counter()
        calls.on = r > 0
        if profiler and r:
            profiler.enable()
        session = lm.session(prompts, [t.settings.sampler.guidance_scale for t in tasks],
                             [t.settings.sampler.class_temperature == 0 for t in tasks])
        if profiler:
            profiler.disable()
        calls.on = False
        t1 = time.perf_counter()
        session.step(tokens)
        t2 = time.perf_counter()
        session.step(tokens)
        t3 = time.perf_counter()
        for _ in range(STEPS):  # the host's share of a step: preparing the ids, launching, waiting, reading
            tl = time.perf_counter()
            session.launch(tokens)
            launched = time.perf_counter() - tl
            session.finish()
            if r:
                prepare, run, read = session.times
                wait = run - (launched - prepare)  # the run's share less its launch
                for name, v in (("prepare", prepare), ("launch", launched - prepare), ("wait", wait), ("read", read)):
                    host[name].append(v)
        t3_closing = time.perf_counter()
        calls.on = r > 0
        if profiler and r:
            profiler.enable()
        session.close()
        if profiler:
            profiler.disable()
        calls.on = False
        t4 = time.perf_counter()
        if r == 0:
            continue  # warm-up: the process's one-time costs
        positions.append(session.L)
        for k, v in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3_closing)):
            v and phases[k].append(v)
    med = {k: 1000 * statistics.median(v) for k, v in phases.items()}
    print(f"{args.requests} requests a graph ({min(positions)}-{max(positions)} positions), {args.rounds} new "
          "graphs: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()) + " ms (medians)")
    steady = {k: 1000 * statistics.median(v) for k, v in host.items()}
    print(f"steps 3 to {STEPS + 2} of each graph (replayed), host ms: " +
          ", ".join(f"{k} {v:.2f}" for k, v in steady.items()) + " (medians)")
    per_graph = {k: 1000 * v / args.rounds for k, v in calls.t.items() if v}
    print("ggml calls of the build and close, ms a graph: " + ", ".join(
        f"{k[len('ggml_'):]} {v:.2f}" for k, v in sorted(per_graph.items(), key=lambda kv: -kv[1])))
    report = {"device": ov.runtime.device.spec, "description": ov.runtime.device.description,
              "requests": args.requests, "positions": positions, "median_ms": med,
              "ggml_calls_ms": per_graph, "replayed_step_host_ms": steady, "all_s": phases}
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.profile)
        text = out.getvalue()
        print(text[text.find("   ncalls"):])
        report["profile"] = text
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    ov.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
