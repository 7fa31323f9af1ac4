#!/usr/bin/env python3
"""Wall time of the codec's decode_batch on many sequences at once, against decoding them one by one.

    python3 tools/codec_decode_time.py CODEC_GGUF [--backend cuda] [--n 64] [--frames 110-140] [--repeats 5]
        [--max-decode-frames F] [--json FILE]

N random code sequences of a length drawn from --frames (a range; 125 frames = 5 s) are decoded with one
decode_batch call (as the batch engine's flush does) and one by one; best of --repeats after one warm-up of
each. Prints one JSON line: backend, n, total frames, batch s, one-by-one s, and the largest difference between
the two outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("codec", help="codec GGUF (omnivoice-tokenizer-F32.gguf)")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--frames", default="110-140")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-decode-frames", type=int, help="AudioCodec's packing limit (default: its own)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from omnivoice.runners.codec import load_codec

    lo, _, hi = args.frames.partition("-")
    rng = np.random.default_rng(0)
    extra = {"max_decode_frames": args.max_decode_frames} if args.max_decode_frames else {}
    with load_codec(args.codec, args.backend, **extra) as codec:
        seqs = []
        for _ in range(args.n):  # one length, then its codes (the order the recorded runs drew them in)
            T = int(rng.integers(int(lo), int(hi or lo) + 1))
            seqs.append(rng.integers(0, codec.codebook_size, (codec.n_codebooks, T)))
        times = {}
        outs = {}
        runs = (("batch", lambda: codec.decode_batch(seqs)), ("one_by_one", lambda: [codec.decode(s) for s in seqs]))
        for name, run in runs:
            outs[name] = run()  # warm-up: graphs built
            best = np.inf
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                run()
                best = min(best, time.perf_counter() - t0)
            times[name] = best
        diff = max(float(np.abs(a - b).max()) for a, b in zip(outs["batch"], outs["one_by_one"]))
    row = {"backend": args.backend, "n": args.n, "frames": int(sum(s.shape[1] for s in seqs)),
           "batch_s": round(times["batch"], 4), "one_by_one_s": round(times["one_by_one"], 4),
           "max_abs_diff": diff, "tf32_override": os.environ.get("NVIDIA_TF32_OVERRIDE"),
           "max_decode_frames": getattr(codec, "max_decode_frames", None)}
    print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
