"""A/B of LM graphs kept across requests (LanguageModel.max_graphs) against a graph built for each, in one process.

    python3 tools/graph_reuse_ab.py --model GGUF_DIR --backend cuda [--rounds 5] [--json FILE]

"kept": the model keeps the graphs of closed sessions (8 by default on GPUs), so a request whose chunk has a
shape seen before takes over its graph: no build, no allocation, and on CUDA a captured graph that replays from
the first step. "built": max_graphs 0, every request builds its graph (what every request paid before). The two
alternate round by round on the same loaded model. Cases, as tools/bench.py's (same texts, the synthetic
reference clip, 32 steps, greedy): auto5, clone5, auto20 `synthesize` wall seconds; "new5": a 5 s auto request
whose text differs every round (a shape never seen: what a miss costs with graphs kept); and the first audio of
a streamed three-sentence text through the serving engine (tools/server_load.py's text). Tokens are compared
between the two variants (a kept graph with new content must compute what a fresh one does).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS.parent))
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(TOOLS / "reference"))

from ab_common import finish, first_audio, parser, tokens_of  # noqa: E402  (tools/ is on the path)
from bench import TEXT_LONG, TEXT_SHORT, write_clip  # noqa: E402
from server_load import THREE, cpu_model  # noqa: E402

VARIANTS = ("built", "kept")


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args()

    import omnivoice as ov

    model = ov.OmniVoice(model=args.model, backend=args.backend, quant=args.quant)
    lm = model.lm
    keep = lm.max_graphs or 8
    engine = model.engine(max_batch="auto")
    clip = Path(tempfile.mkdtemp()) / "ref.wav"
    transcript = write_clip(clip)
    greedy = dict(num_step=args.steps, position_temperature=0.0, class_temperature=0.0, seed=7)
    round_no = [0]

    def synth(text: str, duration: float, **kw):
        def run():
            t0 = time.perf_counter()
            r = model.synthesize(text, duration=duration, **greedy, **kw)
            return time.perf_counter() - t0, tokens_of(r)
        return run

    def new5():  # a text no earlier round had: another length of prompt, so a shape not kept
        words = " ".join(["again"] * (round_no[0] % 7 + 1))
        return synth(f"{TEXT_SHORT} Round {round_no[0]}, {words}.", 5.0)()

    def ttfb():
        return first_audio(engine, THREE)

    cases = {"auto5": synth(TEXT_SHORT, 5.0), "clone5": synth(TEXT_SHORT, 5.0, ref_audio=str(clip), ref_text=transcript),
             "auto20": synth(TEXT_LONG, 20.0), "new5": new5, "first_audio": ttfb}
    for fn in cases.values():  # warm-up: the process's first graphs (cuBLAS, the codec's shapes)
        fn()
    rows = {v: {c: [] for c in cases} for v in VARIANTS}
    tokens: dict[str, dict[str, np.ndarray]] = {v: {} for v in VARIANTS}
    for r in range(args.rounds):
        for variant in (VARIANTS if r % 2 == 0 else VARIANTS[::-1]):
            lm.max_graphs = keep if variant == "kept" else 0
            lm.clear_graphs()
            if variant == "kept":  # the shapes seen before: one untimed run of each fills the keep
                for name in ("auto5", "clone5", "auto20", "first_audio"):
                    cases[name]()
            for name, fn in cases.items():
                seconds, toks = fn()
                rows[variant][name].append(seconds)
                if name != "new5":
                    tokens[variant][name] = toks
            round_no[0] += 1
            if variant == "kept":
                kept = (lm.kept_graphs, lm.kept_bytes)
    engine.close()

    report = {"host_cpu": cpu_model(), "backend": args.backend, "rounds": args.rounds, "steps": args.steps,
              "device": str(lm.runtime.device.spec), "max_graphs": keep, "kept_graphs": kept[0],
              "kept_bytes": kept[1]}
    print(f"host CPU: {report['host_cpu']}; {lm.runtime}; median of {args.rounds} alternating rounds, ms; "
          f"{kept[0]} graphs kept at the end of a round ({kept[1] / 2**20:.0f} MiB), at most {keep}")
    print("| LM graphs | " + " | ".join(cases) + " |\n|---|" + "---|" * len(cases))
    finish(report, rows, {arm: tokens[arm] for arm in ("kept", "built")},
           lambda arm, med: f"| {arm} | " + " | ".join(f"{med[c] * 1e3:.1f}" for c in cases) + " |", args.json)

if __name__ == "__main__":
    main()
