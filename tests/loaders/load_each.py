"""Run as a script: `python load_each.py lm|codec FILE...` loads each model file on the CPU and, when it loads,
runs it once (one LM step, or a codec decode and encode); prints one JSON line per file with the error it
raised ({"file", "error", "message"}) or {"file", "error": null}.

Run in a subprocess by the tests, so that a file which crashes the process (an abort inside ggml) fails the
test instead of killing pytest: the last line printed names the file that did it.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def run_lm(rt, path: str) -> None:
    from omnivoice.runners.lm import LanguageModel, LMInput

    lm = LanguageModel(rt, path)
    try:
        C = lm.cfg.n_codebook
        ids = np.full((C, 12), lm.cfg.audio_mask_id, np.int32)
        ids[:, :4] = 7
        mask = np.arange(12) >= 4
        p = LMInput(ids, mask, 8)
        with lm.session([p], guidance_scale=2.0, greedy=True) as s:
            s.step([ids[:, 4:]])
    finally:
        lm.close()


def run_codec(rt, path: str) -> None:
    from omnivoice.codec import load_codec

    with load_codec(path, runtime=rt) as codec:
        codec.decode(np.zeros((codec.n_codebooks, 3), np.int32))
        codec.encode(np.zeros(codec.sample_rate, np.float32))


def main() -> None:
    from omnivoice.ggml import Runtime

    run = {"lm": run_lm, "codec": run_codec}[sys.argv[1]]
    with Runtime("cpu") as rt:
        for path in sys.argv[2:]:
            print(json.dumps({"file": path, "error": "started"}), flush=True)
            try:
                run(rt, path)
                result = {"file": path, "error": None}
            except Exception as e:  # noqa: BLE001 -- every error is reported to the test
                result = {"file": path, "error": type(e).__name__, "message": str(e)}
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
