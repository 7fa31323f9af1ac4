#!/usr/bin/env python3
"""An F32 LM on a GPU backend, named each way a user names it: the arithmetic it gets and its greedy tokens
against the PyTorch reference's (the tiny checkpoint's goldens: auto, design, clone).

    python3 tools/vulkan_f32_check.py --checkpoint CKPT_TINY [--backend vulkan] [--json OUT]

CKPT_TINY is `tools/make_checkpoint.py --preset tiny --seed 0` (what tests/golden/ref_*.npz were made from).
Each way runs in a process of its own, since a process fixes its Vulkan arithmetic when it creates the device:
  file        OmniVoice(model=the F32 GGUF, codec=...), no quant: the default this check is about
  folder      a folder holding only the F32 GGUF and the codec
  checkpoint  the checkpoint with quant="f32" (converted into a cache of its own)
  f16         the F32 GGUF with exact_f32=False: Vulkan's F16 shaders, for contrast
Per way: the runtime's load-line label (`vulkan:0 (..., F32 arithmetic)`), exact_f32, and per case the share of
the free-running greedy tokens equal to the reference's and the step-0 logits' largest error on the reference's
top 8 (relative to their largest). One JSON line per way, then a summary; exit status 1 when a way other than
f16 is not on F32 arithmetic or not token-exact.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
CASES = ("auto", "design", "clone")
WAYS = ("file", "folder", "checkpoint", "f16")


def one(way: str, ckpt: Path, gguf: Path, backend: str, work: Path) -> dict:
    """Load the model the `way` says and measure it (this process's Vulkan arithmetic is fixed by it)."""
    sys.path.insert(0, str(REPO))
    from omnivoice import OmniVoice
    from omnivoice.codec.voice import VoicePrompt
    from omnivoice.convert import convert_checkpoint
    from omnivoice.runners.lm import LMInput
    from tests.parity.test_pipeline_parity import load, n_calls, options

    lm, codec = gguf / "omnivoice-base-F32.gguf", gguf / "omnivoice-tokenizer-F32.gguf"
    if not lm.is_file():
        convert_checkpoint(ckpt, gguf, quant="f32")
    if way == "folder":
        folder = work / "folder"
        folder.mkdir(exist_ok=True)
        for f in (lm, codec):
            if not (folder / f.name).exists():
                (folder / f.name).symlink_to(f)
        kwargs = dict(model=str(folder))
    elif way == "checkpoint":
        os.environ["OMNIVOICE_CACHE"] = str(work / "cache")
        kwargs = dict(model=str(ckpt), quant="f32")
    else:
        kwargs = dict(model=str(lm), codec=str(codec), exact_f32=False if way == "f16" else None)
    out: dict = {"way": way}
    with OmniVoice(backend=backend, **kwargs) as ov:
        out.update(label=ov.runtime.label, exact_f32=ov.runtime.exact_f32, model=ov.model_path.name, cases={})
        for case in CASES:
            d, meta = load(case)
            kw = options(meta)
            if meta["settings"]["mode"] == "clone":
                kw.update(voice=VoicePrompt(d["ref_codes"].astype(np.int32), meta["calls"][0]["ref_text"],
                                            meta["post_ref_rms"]))
            res = ov.synthesize(meta["settings"]["text"], **kw)
            equal = total = 0
            for k, tok in enumerate(res.tokens):
                want = d[f"call{k}_tokens"].astype(np.int32)
                equal += int((tok == want).sum()) if tok.shape == want.shape else 0
                total += want.size
            ids, mask = d["call0_cond_ids"], d["call0_cond_audio_mask"]
            T = d["call0_uncond_ids"].shape[1]
            with ov.lm.session([LMInput(ids, mask, T)], 2.0, greedy=True, with_logits=True) as s:
                r = s.step([ids[:, -T:]])[0]
            top_idx, top_val = d["call0_logits_cond_top_idx"], d["call0_logits_cond_top_val"]
            got = np.take_along_axis(r["cond_logits"], top_idx.astype(np.int64), -1)
            out["cases"][case] = {"tokens_equal": equal / total, "chunks": n_calls(d),
                                  "step0_logits_rel_err": float(np.abs(got - top_val).max() / np.abs(top_val).max())}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", type=Path, required=True, help="the tiny seed-0 checkpoint")
    ap.add_argument("--backend", default="vulkan")
    ap.add_argument("--gguf-dir", type=Path, default=None, help="its F32 conversion (default: CHECKPOINT-gguf)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)  # a child process: one way
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    ckpt = args.checkpoint.resolve()
    gguf = (args.gguf_dir or ckpt.with_name(ckpt.name + "-gguf")).resolve()
    if args.one:
        print(json.dumps(one(args.one, ckpt, gguf, args.backend, args.work)), flush=True)
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="vk-f32-") as tmp:
        for way in WAYS:
            env = {k: v for k, v in os.environ.items() if k != "OMNIVOICE_EXACT_F32"}  # the default, not the tests'
            r = subprocess.run([sys.executable, __file__, "--checkpoint", str(ckpt), "--gguf-dir", str(gguf),
                                "--backend", args.backend, "--one", way, "--work", tmp], env=env,
                               capture_output=True, text=True)
            line = r.stdout.strip().splitlines()[-1:] if r.returncode == 0 else []
            res = json.loads(line[0]) if line else {"way": way, "error": r.stderr.strip()[-1500:]}
            print(json.dumps(res), flush=True)
            results.append(res)
    exact = [r for r in results if r["way"] != "f16"]
    ok = all("error" not in r and r["exact_f32"] and all(c["tokens_equal"] == 1.0 for c in r["cases"].values())
             for r in exact)
    summary = {"ok": ok, "backend": args.backend, "ways": results}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({"ok": ok, "tokens_equal": {r["way"]: {c: v["tokens_equal"] for c, v in r.get("cases", {}).items()}
                                                 for r in results}}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
