"""Where a graph's time goes, op by op: the codec decode (or encode) and the LM step on the CPU; and the codec
graphs' memory plans.

    python3 tools/op_profile.py decode --codec GGUF [--frames 125] [--threads N] [--repeats 3]
    python3 tools/op_profile.py encode --codec GGUF [--seconds 2.4]
    python3 tools/op_profile.py lm --lm GGUF [--shape auto5]
    python3 tools/op_profile.py memory --codec GGUF [--seconds 5 10 20 30 60 120 600]

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
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("decode", "encode", "lm", "memory"))
    p.add_argument("--codec", type=Path, help="codec GGUF (decode, encode, memory)")
    p.add_argument("--lm", type=Path, help="LM GGUF (lm)")
    p.add_argument("--frames", type=int, default=125, help="decode: code frames (125 = 5 s)")
    p.add_argument("--seconds", type=float, nargs="+", default=None,
                   help="encode: seconds of audio (default 2.4); memory: the durations (default 5 10 20 30 60 120 600)")
    p.add_argument("--shape", default="auto5", help="lm: a shape of tools/lm_step_time.py")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--threads", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()
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
