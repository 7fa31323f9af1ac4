#!/usr/bin/env python3
"""Where one request's wall time goes: its phases, and the GPU kernels of the codec's encode and decode.

    python3 tools/request_profile.py --model GGUF_DIR --backend cuda [--cases clone5,auto5,auto20] [--rounds 5]
        [--kernels 3] [--json FILE]

Cases as tools/bench.py's (same texts, the synthetic 2.4 s reference clip, 32 steps, greedy). Each case runs
once to warm up (graphs built, CUDA graphs captured), then `--rounds` times; the medians of its phases are
printed: reading and preprocessing the reference (`_reference_clip`), the codec's encode and decode, the LM's
session opening, its steps (launching the graph runs and waiting for them), the rest of MaskGIT on the host
(the generate phase less the LM), and what is left of the wall time. Then, with torch's profiler (CUDA only),
the kernels of `--kernels` encodes of the clip and decodes of the case's codes, by name: the part of a request
that tools/lm_step_time.py does not profile. `--busy N` profiles N whole requests the same way: the GPU's busy
time against the request's wall time, whose difference is what the device waits for the host (the text front
end, each MaskGIT step's read-back, choice and launch, the post-processing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS.parent))
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(TOOLS / "reference"))

from bench import CASES, write_clip  # noqa: E402  (tools/ is on the path)
from lm_step_time import kernel_table, print_kernels  # noqa: E402

PHASES = ("reference", "encode", "session", "lm", "maskgit_host", "decode", "other")


class Timers:
    """Seconds spent in wrapped methods (or functions of cffi's `lib`), per phase, while `on`."""

    def __init__(self) -> None:
        self.t: dict[str, float] = defaultdict(float)
        self.on = True

    def wrap(self, owner, name: str, phase: str) -> None:
        orig = getattr(owner, name)

        def timed(*args, **kwargs):
            if not self.on:
                return orig(*args, **kwargs)
            t0 = time.perf_counter()
            try:
                return orig(*args, **kwargs)
            finally:
                self.t[phase] += time.perf_counter() - t0

        setattr(owner, name, timed)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="folder with the LM and codec GGUFs")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--quant", default="auto")
    ap.add_argument("--cases", default="clone5,auto5,auto20")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--kernels", type=int, default=3, help="encodes / decodes profiled (0: none)")
    ap.add_argument("--busy", type=int, default=0, help="whole requests profiled: GPU busy against wall time")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import omnivoice
    from omnivoice import api
    from omnivoice.runners import codec as codec_runner
    from omnivoice.runners import lm as lm_runner

    timers = Timers()
    timers.wrap(api.OmniVoice, "_reference_clip", "reference")
    timers.wrap(codec_runner.AudioCodec, "encode_batch", "encode")
    timers.wrap(codec_runner.AudioCodec, "decode_batch", "decode")
    timers.wrap(lm_runner.LanguageModel, "session", "session")
    timers.wrap(lm_runner.ChunkSession, "launch", "lm")  # (step is launch + finish)
    timers.wrap(lm_runner.ChunkSession, "finish", "lm")
    timers.wrap(lm_runner.ChunkSession, "run_on_device", "lm")  # every step of a chunk, choices included (CUDA)
    report: dict = {"backend": args.backend, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp, omnivoice.OmniVoice(args.model, backend=args.backend,
                                                                      quant=args.quant) as ov:
        clip = Path(tmp) / "ref.wav"
        transcript = write_clip(clip)
        print(f"device: {ov.runtime.device.backend} {ov.runtime.device.description}")
        for name in args.cases.split(","):
            case = CASES[name]
            kwargs = dict(duration=case["duration"], num_step=args.steps, position_temperature=0.0,
                          class_temperature=0.0, seed=0, language="English")
            if case["mode"] == "clone":
                kwargs.update(ref_audio=str(clip), ref_text=transcript)
            rounds: dict[str, list[float]] = defaultdict(list)
            for r in range(args.rounds + 1):
                timers.t.clear()
                t0 = time.perf_counter()
                res = ov.synthesize(case["text"], **kwargs)
                wall = time.perf_counter() - t0
                if r == 0:
                    continue  # warm-up
                t = dict(timers.t)
                t["decode"] = t.get("decode") or res.timings.get("decode", 0.0)  # the engine decodes with decode_iter
                t["maskgit_host"] = res.timings.get("generate", 0.0) - t.get("lm", 0.0) - t.get("session", 0.0)
                t["other"] = wall - sum(t.get(p, 0.0) for p in PHASES if p != "other")
                rounds["wall"].append(wall)
                for p in PHASES:
                    rounds[p].append(t.get(p, 0.0))
            med = {k: 1000 * statistics.median(v) for k, v in rounds.items()}
            print(f"{name}: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items()) + " ms (medians)")
            entry: dict = {"median_ms": med, "all_s": dict(rounds)}
            if args.busy:
                entry["request_kernels"] = k = kernel_table(lambda: ov.synthesize(case["text"], **kwargs), args.busy, 8)
                if k:
                    print_kernels(k, f"{name} whole request")
            if args.kernels:
                codec = ov.pipeline.codec
                codes = res.tokens[0]
                entry["decode_kernels"] = k = kernel_table(lambda: codec.decode_batch([codes]), args.kernels, 15)
                if k:
                    print_kernels(k, f"{name} decode ({codes.shape[1]} frames)")
                if case["mode"] == "clone":
                    ref, _, _ = ov._reference_clip(str(clip), transcript, True)
                    entry["encode_kernels"] = k = kernel_table(lambda: codec.encode_batch([ref]), args.kernels, 15)
                    if k:
                        print_kernels(k, f"{name} encode ({len(ref) / ov.sample_rate:.2f} s clip)")
            report["cases"][name] = entry
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
