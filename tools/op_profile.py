"""Where a graph's time goes, op by op: the codec decode (or encode) and the LM step on the CPU; the codec
graphs' memory plans; and what building a new packed LM graph costs the serving engine.

    python3 tools/op_profile.py decode --codec GGUF [--frames 125] [--threads N] [--repeats 3]
    python3 tools/op_profile.py encode --codec GGUF [--seconds 2.4]
    python3 tools/op_profile.py lm --lm GGUF [--shape auto5]
    python3 tools/op_profile.py memory --codec GGUF [--seconds 5 10 20 30 60 120 600]
    python3 tools/op_profile.py build --model GGUF_DIR --backend cuda [--requests 16] [--rounds 12] [--profile 20]

The graph is first timed whole (median of --repeats runs after a warm-up), then run once more with ggml's
scheduler callback observing every node, which makes the scheduler compute the nodes one at a time: each node's
time is the wall time between two callbacks (so it includes one thread start-up and barrier per node, a few
microseconds, listed as the difference between the sum of nodes and the whole run). Nodes are summed by op
(ggml_op_desc: unary ops by their own name) and by stage: the codec decoder's stage of a node is that of the
last weight read before it (conv1, block.N, final), the LM's the layer.

`memory` prints the compute-buffer sizes of the codec's graphs as Graph.allocate's memory plan measures them,
nothing allocated: the encoder's graph for each duration of 24 kHz audio, then the decoder's for one window (512
frames). Every plan is made to "not fit" (the available memory reported as 0), so Graph.allocate raises its
MemoryError before allocating anything, and its message gives the size the package checks against the device's
free memory (docs/ROBUSTNESS.md: the reference-clip limit).

`build`: the server's engine switches its packed graph whenever the set of chunks in flight changes (a request
joins or finishes); under load with texts of different lengths no kept graph fits, so each switch builds one
(tools/server_load.py's /metrics columns: 1.1-1.3 s of a 32-client run's 4.6-5 s on the H200). It takes
`--requests` prompts of tools/server_load.py's VARIED texts and, round by round, packs a different subset of them
(so that every key is new, as under that load; the model's kept graphs work as in the server), then times: the
session's build (ChunkSession: the graph's nodes, its constants on the device, the scheduler's measurement,
reservation and allocation), its first step (launch and wait: on CUDA ggml runs a new graph kernel by kernel), its
second (ggml captures and instantiates its CUDA graph), the host's share of the replayed steps after them
(preparing the ids, launching, waiting for the device, reading back), and closing it. Medians over `--rounds`, and
the ggml calls of the build and close by name (ms a graph: the scheduler's, the buffers', the copies'; wrapped with
timers here, as cProfile does not see cffi's calls). With `--profile N`, the N Python functions that took the most
time of the builds and closes (cProfile, by own time, ggml's calls inside them).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS.parent))

from omnivoice.ggml import ffi, lib  # noqa: E402
from omnivoice.ggml.graph import tensor_name  # noqa: E402


def _stage(name: str) -> str | None:
    m = re.match(r"(acoustic_(?:de|en)coder\.(?:block\.\d+|conv1|conv2|snake1)|llm\.layers\.\d+|"
                 r"semantic_model|encoder_semantic|quantizer|fc2?|audio_heads|llm)", name)
    if not m:
        return None
    s = m.group(1)
    return re.sub(r"\.(conv2|snake1)$", ".final", s)


def profile(graph, repeats: int, feed: dict) -> dict:
    """Whole-graph time and per-node times of one run of an allocated omnivoice Graph."""
    graph.compute(outputs=[], **feed)
    whole = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        graph.compute(outputs=[])
        whole.append(time.perf_counter() - t0)

    nodes: list[tuple[str, str, float, tuple]] = []
    state = {"t": 0.0, "stage": "input"}

    @ffi.callback("bool(struct ggml_tensor *, bool, void *)")
    def observe(t, ask, _user):
        if ask:
            return True
        now = time.perf_counter()
        for i in range(10):
            src = t.src[i]
            if src != ffi.NULL and src.op == lib.GGML_OP_NONE:
                st = _stage(tensor_name(src))
                if st:
                    state["stage"] = st
                    break
        op = ffi.string(lib.ggml_op_desc(t)).decode()
        nodes.append((op, state["stage"], now - state["t"], tuple(t.ne[i] for i in range(4))))
        state["t"] = time.perf_counter()
        return True

    lib.ggml_backend_sched_set_eval_callback(graph._sched, observe, ffi.NULL)
    try:
        state["t"] = t0 = time.perf_counter()
        graph.compute(outputs=[])
        observed = time.perf_counter() - t0
    finally:
        lib.ggml_backend_sched_set_eval_callback(graph._sched, ffi.NULL, ffi.NULL)
    return {"whole": float(np.median(whole)), "observed": observed, "nodes": nodes}


def report(res: dict, top: int) -> None:
    nodes = res["nodes"]
    total = sum(n[2] for n in nodes)
    print(f"whole graph {1e3 * res['whole']:.1f} ms (median); observed node by node {1e3 * res['observed']:.1f} ms, "
          f"{len(nodes)} nodes, their sum {1e3 * total:.1f} ms")
    for title, key in (("by op", lambda n: n[0]), ("by stage", lambda n: n[1])):
        acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for n in nodes:
            a = acc[key(n)]
            a[0] += n[2]
            a[1] += 1
        print(f"\n| {title} | ms | share | nodes |\n|---|---|---|---|")
        for name, (s, c) in sorted(acc.items(), key=lambda kv: -kv[1][0]):
            print(f"| {name} | {1e3 * s:.2f} | {100 * s / total:.1f} % | {c} |")
    print(f"\n| slowest nodes | stage | ms | ne |\n|---|---|---|---|")
    for op, st, s, ne in sorted(nodes, key=lambda n: -n[2])[:top]:
        print(f"| {op} | {st} | {1e3 * s:.2f} | {list(ne)} |")


def planned(run) -> str:
    """The size in the MemoryError that the plan of `run`'s graph raises."""
    try:
        run()
    except MemoryError as e:
        return re.search(r"needs (\S+ \S+)", str(e)).group(1)
    raise RuntimeError("the graph was allocated: the plan did not run")


def memory_plans(codec_path: Path, backend: str, seconds: list[float]) -> None:
    """Print the planned compute-buffer size of the encoder's graph per duration and of one decoder window."""
    from omnivoice.ggml import memory
    from omnivoice.runners.codec import load_codec

    memory.available = lambda backend: 0  # every plan "does not fit": Graph.allocate says the size and stops
    with load_codec(codec_path, backend, threads=1) as codec:
        for s in seconds:
            n = int(s * codec.sample_rate) // codec.hop_length * codec.hop_length
            print(f"encode {s:g} s: {planned(lambda: codec.encode(np.full(n, 0.1, np.float32)))}", flush=True)
        frames = codec.window_frames
        codes = np.zeros((codec.n_codebooks, frames), np.int32)
        print(f"decode {frames} frames: {planned(lambda: codec.decode(codes))}")


# ------------------------------------------------------------------------------------------------ build
# The ggml calls a graph's build and close make that may cost more than their count: the scheduler's passes, the
# device buffers' allocation and release, the constants' copies.
TIMED_CALLS = ("ggml_backend_sched_new", "ggml_backend_sched_reserve_size", "ggml_backend_sched_reserve",
               "ggml_backend_sched_alloc_graph", "ggml_backend_sched_reset", "ggml_backend_sched_free",
               "ggml_backend_sched_synchronize", "ggml_backend_alloc_ctx_tensors", "ggml_backend_buffer_free",
               "ggml_backend_tensor_set", "ggml_backend_tensor_memset", "ggml_new_graph_custom",
               "ggml_build_forward_expand", "ggml_graph_node", "ggml_init", "ggml_free")


STEPS = 4  # replayed steps timed per graph, after the first two


def graph_builds(args: argparse.Namespace) -> int:
    """`build`: a packed session's build, first steps, replayed steps' host share and close, for new compositions."""
    from request_profile import Timers  # tools/ is on the path
    from server_load import VARIED

    import omnivoice
    from omnivoice.engine.core import BatchEngine, Task
    from omnivoice.engine.request import as_request

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_subparsers(dest="what", required=True)
    graphs = argparse.ArgumentParser(add_help=False)  # the options of decode, encode, lm and memory
    graphs.add_argument("--codec", type=Path, help="codec GGUF (decode, encode, memory)")
    graphs.add_argument("--lm", type=Path, help="LM GGUF (lm)")
    graphs.add_argument("--frames", type=int, default=125, help="decode: code frames (125 = 5 s)")
    graphs.add_argument("--seconds", type=float, nargs="+", default=None,
                        help="encode: seconds of audio (default 2.4); memory: the durations (default 5 10 20 30 60 "
                             "120 600)")
    graphs.add_argument("--shape", default="auto5", help="lm: a shape of tools/lm_step_time.py")
    graphs.add_argument("--backend", default="cpu")
    graphs.add_argument("--threads", type=int)
    graphs.add_argument("--repeats", type=int, default=3)
    graphs.add_argument("--top", type=int, default=12)
    for name, summary in (("decode", "the codec decode's time by op and stage"),
                          ("encode", "the codec encode's time by op and stage"),
                          ("lm", "one LM step's time by op and layer"),
                          ("memory", "the codec graphs' planned compute buffers, nothing allocated")):
        what.add_parser(name, parents=[graphs], help=summary)
    b = what.add_parser("build", help="what a new packed LM graph costs the serving engine")
    b.add_argument("--model", required=True, help="folder with the LM and codec GGUFs, or the LM GGUF")
    b.add_argument("--backend", default="auto")
    b.add_argument("--quant", default="auto")
    b.add_argument("--requests", type=int, default=16, help="prompts packed a round (default 16)")
    b.add_argument("--rounds", type=int, default=12)
    b.add_argument("--profile", type=int, default=0, help="print the N costliest functions (cProfile)")
    b.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.what == "build":
        return graph_builds(args)
    if args.what == "memory":
        memory_plans(args.codec, args.backend, args.seconds or [5, 10, 20, 30, 60, 120, 600])
        return 0

    from omnivoice.ggml import Runtime

    rt = Runtime(args.backend, args.threads)
    print(f"{rt}")
    if args.what in ("decode", "encode"):
        from omnivoice.codec import load_codec

        codec = load_codec(args.codec, runtime=rt, parts=(args.what,))
        rng = np.random.default_rng(0)
        if args.what == "decode":
            codes = rng.integers(0, codec.codebook_size, (codec.n_codebooks, args.frames)).astype(np.int32)
            codec.decode(codes)
        else:
            seconds = (args.seconds or [2.4])[0]
            codec.encode((0.1 * rng.standard_normal(int(seconds * codec.sample_rate))).astype(np.float32))
        graph = next(iter(codec._graphs.values()))
        res = profile(graph, args.repeats, {})
    else:
        from lm_step_time import SHAPES, prompt
        from omnivoice.runners.lm import LanguageModel

        lm = LanguageModel(rt, args.lm)
        pr = prompt(*(SHAPES[args.shape] if args.shape in SHAPES else map(int, args.shape.split(":"))))
        tokens = pr.input_ids[:, -pr.n_target:]
        with lm.session([pr], 2.0, greedy=True) as s:
            s.step([tokens])
            res = profile(s.graph, args.repeats, {"audio_ids": s._audio_ids([tokens])})
    report(res, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
