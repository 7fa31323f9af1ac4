"""A/B of the host's position noise drawn while the LM runs, against drawn after it, in one process.

    python3 tools/host_overlap_ab.py --model GGUF_DIR --backend cuda [--rounds 5] [--json FILE]

A greedy MaskGIT step's only random draw is its position noise, which does not depend on the LM's output: the
loop draws it between launching the step's graph and waiting for it (MaskGitState.noise_first). "after" turns
that off (noise_first False: the noise is drawn once the logits are back, as before), alternating with "during"
round by round on the same loaded model. Measured: the first audio of a streamed three-sentence text through
the serving engine (omnivoice.engine.Engine, no HTTP; tools/server_load.py's text), and `synthesize` of a 5 s
auto-voice request, wall seconds, median over the rounds. Tokens are compared between the two (they must be
equal: the same draws in the same order).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ab_common import finish, first_audio, parser, tokens_of  # noqa: E402  (tools/ is on the path as the script's folder)
from server_load import THREE, cpu_model  # noqa: E402

AUTO5 = "This is a short test of the speech synthesis engine, about five seconds of audio."


def main() -> None:
    ap = parser(__doc__)
    args = ap.parse_args()

    import omnivoice as ov
    from omnivoice.generate.maskgit import MaskGitState

    model = ov.OmniVoice(model=args.model, backend=args.backend, quant=args.quant)
    engine = model.engine(max_batch="auto")
    noise_first = MaskGitState.noise_first

    def ttfb() -> tuple[float, np.ndarray]:
        return first_audio(engine, THREE)

    def synth() -> tuple[float, np.ndarray]:
        t0 = time.perf_counter()
        r = model.synthesize(AUTO5, duration=5.0, seed=7)
        return time.perf_counter() - t0, tokens_of(r)

    rows: dict[str, dict[str, list[float]]] = {v: {"ttfb": [], "auto5": []} for v in ("during", "after")}
    tokens: dict[str, dict[str, np.ndarray]] = {"during": {}, "after": {}}
    for _ in range(2):  # warm-up: the process's first graphs and shapes
        ttfb(), synth()
    for _ in range(args.rounds):
        for variant in ("after", "during"):
            MaskGitState.noise_first = noise_first if variant == "during" else property(lambda self: False)
            try:
                for name, fn in (("ttfb", ttfb), ("auto5", synth)):
                    seconds, toks = fn()
                    rows[variant][name].append(seconds)
                    tokens[variant][name] = toks
            finally:
                MaskGitState.noise_first = noise_first
    engine.close()

    report = {"host_cpu": cpu_model(), "backend": args.backend, "rounds": args.rounds}
    print(f"host CPU: {report['host_cpu']}; backend {args.backend}; median of {args.rounds} alternating rounds")
    print("| noise drawn | first audio, engine (ms) | synthesize auto5 (ms) |\n|---|---|---|")
    finish(report, rows, tokens, lambda arm, med: f"| {arm} the LM run | {med['ttfb'] * 1e3:.1f} | "
                                                  f"{med['auto5'] * 1e3:.1f} |", args.json)

if __name__ == "__main__":
    main()
