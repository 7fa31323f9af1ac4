#!/usr/bin/env python3
"""Regenerate the reference goldens in tests/golden/ (ref_auto, ref_design, ref_clone, ref_long, ref_long_design,
ref_long_clone, ref_codec).

    python3 tools/reference/make_goldens.py            # from the repo root, with .venv-ref in place

Runs in OUR environment: builds the tiny random checkpoint (tools/make_checkpoint.py, preset tiny, seed 0)
in a temporary directory, runs tools/reference/run_reference.py inside the reference venv for each case
(results cached, see run_reference.py), and writes a reduced, compressed .npz per case. The fields are
documented in tests/golden/README.md; the reduction keeps each file well under 1 MB:

* step-0 logits: top-8 (values + ids) and the logsumexp of every row, plus full rows at a few positions;
* the per-step inputs as the step at which each position was unmasked (lossless, see the README);
* audio as float32.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUT_DIR = REPO / "tests" / "golden"
REF_PYTHON = REPO / ".venv-ref" / "bin" / "python"
MASK = 1024
TOP_K = 8

LONG_TEXT = "The sun is up. Birds sing in the trees. We walk to the river, then home again."
CASES: dict[str, dict] = {
    # explicit target length, English, default 32 steps
    "auto": {"mode": "auto", "text": "Hello world. This is a test.", "language": "English",
             "num_target_tokens": 20, "num_step": 32, "rows": 3},
    # estimated target length, no language, 16 steps
    "design": {"mode": "design", "text": "Good morning.", "instruct": "female, low pitch",
               "num_step": 16, "rows": 3},
    # the synthetic clip (1.6 s) as reference, estimated target length, denoise on
    "clone": {"mode": "clone", "text": "Nice to see you again.", "language": "English", "clip_duration": 1.6,
              "num_step": 32, "rows": 3},
    # chunked generation: tiny chunk duration/threshold so several chunks fit in ~2 s of audio
    "long": {"mode": "auto", "text": LONG_TEXT, "language": "en", "duration": 1.6, "chunk_duration": 0.5,
             "chunk_threshold": 1.0, "num_step": 12, "rows": 2},
    # the same long form in the other two voice modes: design (every chunk keeps the instruct, chunks >= 1
    # reuse chunk 0's tokens) and clone (every chunk reuses the reference clip's codes)
    "long_design": {"mode": "design", "text": LONG_TEXT, "instruct": "male, high pitch", "duration": 1.6,
                    "chunk_duration": 0.5, "chunk_threshold": 1.0, "num_step": 12, "rows": 2},
    "long_clone": {"mode": "clone", "text": LONG_TEXT, "language": "English", "clip_duration": 1.6,
                   "chunk_duration": 0.5, "chunk_threshold": 1.0, "num_step": 12, "rows": 1},
}


def _load_make_checkpoint():
    spec = importlib.util.spec_from_file_location("make_checkpoint", REPO / "tools" / "make_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_checkpoint"] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def run_reference(args: list[str], cache_dir: str | None) -> Path:
    """Run the reference runner in the reference venv; returns the result .npz path."""
    cmd = [str(REF_PYTHON), str(HERE / "run_reference.py"), *args]
    if cache_dir:
        cmd += ["--cache-dir", cache_dir]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"reference run failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}")
    return Path(res.stdout.strip().splitlines()[-1])


def _case_args(ckpt: Path, case: dict) -> list[str]:
    a = ["generate", str(ckpt), "--mode", case["mode"], "--text", case["text"], "--num-step", str(case["num_step"])]
    for key, flag in (("language", "--language"), ("instruct", "--instruct"), ("duration", "--duration"),
                      ("num_target_tokens", "--num-target-tokens"), ("chunk_duration", "--chunk-duration"),
                      ("chunk_threshold", "--chunk-threshold"), ("clip_duration", "--clip-duration")):
        if case.get(key) is not None:
            a += [flag, str(case[key])]
    return a


def unmask_steps(step_tokens: np.ndarray, final: np.ndarray) -> np.ndarray:
    """[8, T] step index at which each position received its token (inverse of the README's formula)."""
    S = step_tokens.shape[0]
    after = np.concatenate([step_tokens[1:], final[None]], axis=0)  # tokens after step s
    newly = (step_tokens == MASK) & (after != MASK)
    if not np.all(newly.sum(axis=0) == 1):
        raise AssertionError("every position must be unmasked exactly once")
    steps = newly.argmax(axis=0).astype(np.int8)
    rebuilt = np.stack([np.where(steps < s, final, MASK) for s in range(S)])
    if not np.array_equal(rebuilt, step_tokens):
        raise AssertionError("step tokens are not recoverable from (tokens, unmask_step)")
    return steps


def _logit_summary(out: dict, prefix: str, logits: np.ndarray, rows: np.ndarray | None) -> None:
    order = np.argsort(-logits, axis=-1, kind="stable")[..., :TOP_K]
    out[f"{prefix}_top_idx"] = order.astype(np.int16)
    out[f"{prefix}_top_val"] = np.take_along_axis(logits, order, axis=-1).astype(np.float32)
    m = logits.max(axis=-1, keepdims=True).astype(np.float64)
    out[f"{prefix}_lse"] = (m[..., 0] + np.log(np.exp(logits - m).sum(axis=-1))).astype(np.float32)
    if rows is not None:
        out[f"{prefix}_rows"] = np.ascontiguousarray(logits[:, rows, :], dtype=np.float32)


def reduce_generate(src: Path, n_rows: int) -> dict[str, np.ndarray]:
    """The golden fields of one generate result (see tests/golden/README.md)."""
    d = np.load(src)
    meta = json.loads(str(d["meta_json"]))
    out: dict[str, np.ndarray] = {}
    n_calls = len(meta["calls"])
    for k in range(n_calls):
        p = f"call{k}"
        T = d[f"{p}_tokens"].shape[-1]
        out[f"{p}_cond_ids"] = d[f"{p}_cond_ids"].astype(np.int32)
        out[f"{p}_cond_audio_mask"] = d[f"{p}_cond_audio_mask"]
        out[f"{p}_uncond_ids"] = d[f"{p}_uncond_ids"].astype(np.int32)
        out[f"{p}_tokens"] = d[f"{p}_tokens"].astype(np.int16)
        out[f"{p}_unmask_step"] = unmask_steps(d[f"{p}_step_tokens"], d[f"{p}_tokens"])
        out[f"{p}_schedule"] = np.array(meta["calls"][k]["schedule"], dtype=np.int32)
        # full rows for the first and the last call only (the middle chunks repeat the same structure), and
        # for the uncond row only in call 0 (its input, MASK only, differs between calls in length alone)
        rows = None
        if k in (0, n_calls - 1):
            rows = np.unique(np.linspace(0, T - 1, n_rows).round().astype(np.int32))
            out[f"{p}_logits_positions"] = rows
        _logit_summary(out, f"{p}_logits_cond", d[f"{p}_logits_cond"], rows)
        _logit_summary(out, f"{p}_logits_uncond", d[f"{p}_logits_uncond"], rows if k == 0 else None)
    for key in ("ref_wav_input", "ref_wav_encoded"):
        if key in d.files:
            out[key] = d[key].astype(np.float32)
    if "ref_codes" in d.files:
        out["ref_codes"] = d["ref_codes"].astype(np.int16)
    out["decoded_audio"] = d["decoded_audio"].astype(np.float32)
    out["final_audio"] = d["final_audio"].astype(np.float32)
    meta["golden"] = {"source": src.name, "top_k": TOP_K}
    out["meta_json"] = np.array(json.dumps(meta, indent=1, sort_keys=True))
    return out


def make_codec_golden(ckpt: Path, work: Path, cache_dir: str | None) -> dict[str, np.ndarray]:
    """Codec alone: two encodes (a hop multiple and not) and one decode of random codes."""
    import soundfile as sf

    sys.path.insert(0, str(HERE))
    from synth_clip import synth_clip

    out: dict[str, np.ndarray] = {}
    metas = {}
    for tag, seed, n in (("encode_a", 1, 24000), ("encode_b", 2, 24000 + 500)):
        wav = synth_clip(seed=seed, duration=n / 24000.0)[:n]
        path = work / f"{tag}.wav"
        sf.write(path, wav, 24000, subtype="FLOAT")
        d = np.load(run_reference(["encode", str(ckpt), "--wav", str(path)], cache_dir))
        if not np.array_equal(d["wav"], wav):
            raise AssertionError("the wav read back differs from the one written")
        out[f"{tag}_wav"] = wav
        out[f"{tag}_codes"] = d["codes"].astype(np.int16)
        metas[tag] = json.loads(str(d["meta_json"]))
    codes = np.random.default_rng(0).integers(0, 1024, size=(8, 25))
    np.save(work / "codes.npy", codes)
    d = np.load(run_reference(["decode", str(ckpt), "--codes", str(work / "codes.npy")], cache_dir))
    out["decode_codes"] = codes.astype(np.int16)
    out["decode_audio"] = d["audio"].astype(np.float32)
    metas["decode"] = json.loads(str(d["meta_json"]))
    out["meta_json"] = np.array(json.dumps(metas, indent=1, sort_keys=True))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", help="use this tiny checkpoint instead of generating one (must be tiny, seed 0)")
    ap.add_argument("--cache-dir", default=None, help="reference cache (default: the runner's)")
    ap.add_argument("--out-dir", default=str(OUT_DIR))
    ap.add_argument("--only", nargs="*", help="subset of cases (auto design clone long long_design long_clone codec)")
    args = ap.parse_args(argv)
    if not REF_PYTHON.is_file():
        raise SystemExit(f"{REF_PYTHON} is missing: run tools/reference/setup_venv.sh first")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="omnivoice-goldens-") as tmp:
        work = Path(tmp)
        ckpt = Path(args.checkpoint) if args.checkpoint else _load_make_checkpoint().make_checkpoint(
            work / "ckpt-tiny", "tiny", 0)
        for name in (args.only or [*CASES, "codec"]):
            if name == "codec":
                arrays = make_codec_golden(ckpt, work, args.cache_dir)
            else:
                case = CASES[name]
                src = run_reference(_case_args(ckpt, case), args.cache_dir)
                arrays = reduce_generate(src, case["rows"])
            path = out_dir / f"ref_{name}.npz"
            np.savez_compressed(path, **arrays)
            print(f"{path}: {path.stat().st_size / 1024:.0f} KiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
