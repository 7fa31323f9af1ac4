"""What the server's --short-first-piece does to a streamed one-sentence answer's tokens: how many texts it cuts,
and how far the cut pieces' tokens are from those of the whole sentence.

    python tools/first_piece_tokens.py --model M.gguf --codec C.gguf [--backend cpu] [--texts 400] [--json F]

The texts are those client 0 of tools/server_load.py's streaming loads sends (--text-seed, --words LO:HI,
default 1:25): N one-sentence texts. A text is cut when text.streaming.stream_sentences(text, True) gives more
than one piece where stream_sentences(text, False) gives one. Each cut text is streamed as the server streams it
with --short-first-piece (`Engine.submit(stream=True, short_first=True)`, one request at a time; the head's tokens
voice the rest) and synthesized whole (`OmniVoice.synthesize`), both with seed --seed + its index and the default
options; the pieces' tokens, joined, are compared with the whole sentence's: the frames of each and the share of
equal tokens over the frames both have (all 8 codebooks), with their median, min and max over the cut texts.
Control: the first --controls cut texts streamed with short_first=False (the server's default), whose tokens must
equal synthesize's (100 %, the same frames).

Results go to stdout as a Markdown table and, with --json, to a file (with the host's CPU and load).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling tools: server_load's texts, bench's host
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # omnivoice from this tree

import bench
import server_load

from omnivoice.arguments import add_model_options
from omnivoice.files import FileWriteError, atomic_write_text, check_writable


def cut_texts(texts: list[str]) -> list[tuple[int, str]]:
    """(index, text) of the one-sentence texts that --short-first-piece cuts."""
    from omnivoice.text.streaming import stream_sentences

    return [(i, t) for i, t in enumerate(texts)
            if len(stream_sentences(t, False)) == 1 and len(stream_sentences(t, True)) > 1]


def compare(got: list[np.ndarray], whole: list[np.ndarray]) -> dict:
    """Frames of each (chunks or pieces joined) and the share of equal tokens over the frames both have."""
    a, b = np.concatenate(got, axis=1), np.concatenate(whole, axis=1)
    n = min(a.shape[1], b.shape[1])
    return {"pieces": len(got), "frames": a.shape[1], "frames_whole": b.shape[1],
            "equal_share": float((a[:, :n] == b[:, :n]).mean()) if n else 0.0}


def summary(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def measure(args) -> dict:
    import omnivoice

    machine = bench.machine_info()  # the load before the work
    texts = server_load.client_texts(args.text_seed, 0, args.texts, args.words)
    cut = cut_texts(texts)
    rows, controls = [], []
    with omnivoice.OmniVoice(args.model, args.codec, backend=args.backend) as ov:
        device = ov.runtime.label
        with ov.engine(max_batch=1) as engine:
            def streamed(text: str, seed: int, short_first: bool) -> list[np.ndarray]:
                job = engine.submit({"text": text, "seed": seed}, stream=True, short_first=short_first)
                return job.result().tokens

            for k, (i, text) in enumerate(cut):
                seed = args.seed + i
                whole = ov.synthesize(text, seed=seed).tokens
                rows.append({"index": i, "text": text, **compare(streamed(text, seed, True), whole)})
                if k < args.controls:
                    controls.append({"index": i, **compare(streamed(text, seed, False), whole)})
                print(f"  {k + 1}/{len(cut)}: {rows[-1]['equal_share']:.1%} equal", file=sys.stderr)
    shares = [r["equal_share"] for r in rows]
    return {"machine": machine, "device": device, "model": str(args.model), "codec": str(args.codec),
            "texts": args.texts, "text_seed": args.text_seed, "words": list(args.words), "seed": args.seed,
            "cut": len(cut), "equal_share": summary(shares) if rows else None,
            "frames": {"cut": summary([r["frames"] for r in rows]),
                       "whole": summary([r["frames_whole"] for r in rows])} if rows else None,
            "control": {"texts": len(controls),
                        "equal": sum(c["equal_share"] == 1.0 and c["frames"] == c["frames_whole"] for c in controls),
                        "rows": controls},
            "rows": rows}


def markdown(r: dict) -> str:
    m, s, c = r["machine"], r["equal_share"], r["control"]
    out = [(f"Host: {m.get('cpu', '?')} ({m.get('cores')} cores), load average {m.get('loadavg', ['?'])[0]}; "
            f"device {r['device']}; model {r['model']}"), "",
           (f"{r['texts']} one-sentence texts of {r['words'][0]} to {r['words'][1]} words (text seed "
            f"{r['text_seed']}), seed {r['seed']} + index, default options"), "",
           ("| texts | cut by --short-first-piece | equal tokens, cut pieces against the whole sentence: "
            "median / min / max | frames median: cut / whole | control (uncut stream = synthesize) |"),
           "|---|---|---|---|---|"]
    share = f"{s['median']:.1%} / {s['min']:.1%} / {s['max']:.1%}" if s else "-"
    frames = f"{r['frames']['cut']['median']:g} / {r['frames']['whole']['median']:g}" if r["frames"] else "-"
    control = f"{c['equal']} of {c['texts']} equal" if c["texts"] else "-"
    out.append(f"| {r['texts']} | {r['cut']} | {share} | {frames} | {control} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_model_options(p)
    p.add_argument("--backend", default="cpu", help="ggml backend (default cpu)")
    p.add_argument("--texts", type=int, default=400, help="one-sentence texts drawn (default 400)")
    p.add_argument("--text-seed", type=int, default=0, help="seed of the texts, as server_load's (default 0)")
    p.add_argument("--words", type=server_load.word_range, default=(1, 25), metavar="LO:HI",
                   help="the texts have LO to HI words (default 1:25)")
    p.add_argument("--seed", type=int, default=0, help="synthesis seed of text i: SEED + i (default 0)")
    p.add_argument("--controls", type=int, default=6,
                   help="cut texts also streamed uncut, whose tokens must equal synthesize's (default 6)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.texts < 1 or args.controls < 0:
        p.error(f"--texts must be >= 1 and --controls >= 0, got {args.texts} and {args.controls}")
    try:
        if args.json:
            check_writable(args.json)  # before the work, not after it
    except FileWriteError as e:
        p.error(f"--json: {e}")
    result = measure(args)
    print(markdown(result))
    if args.json:
        atomic_write_text(args.json, json.dumps(result, indent=1), "the results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
