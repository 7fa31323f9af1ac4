#!/usr/bin/env python3
"""Compute-buffer sizes of the codec's graphs, as Graph.allocate's memory plan measures them (nothing is allocated).

    python tools/graph_memory.py CODEC.gguf --seconds 5 10 20 30 60 120 600

For each duration, the encoder's graph for that much 24 kHz audio; then the decoder's graph for one window
(512 frames). Every plan is made to "not fit" (the available memory reported as 0), so Graph.allocate raises
its MemoryError before allocating anything, and its message gives the size: the numbers are the ones the
package checks against the device's free memory. Results: docs/ROBUSTNESS.md.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from omnivoice.ggml import memory  # noqa: E402
from omnivoice.runners.codec import load_codec  # noqa: E402


def planned(run) -> str:
    """The size in the MemoryError that the plan of `run`'s graph raises."""
    try:
        run()
    except MemoryError as e:
        return re.search(r"needs (\S+ \S+)", str(e)).group(1)
    raise RuntimeError("the graph was allocated: the plan did not run")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("codec", help="codec GGUF (omnivoice-tokenizer-F32.gguf)")
    ap.add_argument("--seconds", type=float, nargs="+", default=[5, 10, 20, 30, 60, 120, 600])
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    memory.available = lambda backend: 0  # every plan "does not fit": Graph.allocate says the size and stops
    with load_codec(args.codec, args.backend, threads=1) as codec:
        for s in args.seconds:
            n = int(s * codec.sample_rate) // codec.hop_length * codec.hop_length
            print(f"encode {s:g} s: {planned(lambda: codec.encode(np.full(n, 0.1, np.float32)))}", flush=True)
        frames = codec.window_frames
        codes = np.zeros((codec.n_codebooks, frames), np.int32)
        print(f"decode {frames} frames: {planned(lambda: codec.decode(codes))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
