"""LM + MaskGIT parity on a full-size random checkpoint (outside CI): step-0 logits and teacher-forced choices.

    # 1. a full-size checkpoint (3.1 GB, deterministic) and the reference's dump of one generate() call
    python3 tools/make_checkpoint.py --preset full --seed 0 -o /tmp/ckpt-full
    .venv-ref/bin/python tools/reference/run_reference.py generate /tmp/ckpt-full --mode auto \
        --text "The quick brown fox jumps over the lazy dog near the river bank." --language English \
        --duration 5 --num-step 32 -o ref_auto5.npz
    # 2. ours on every weight type, on a backend
    python3 tools/lm_parity_full.py --checkpoint /tmp/ckpt-full --ref ref_auto5.npz --backend cpu \
        --quants f32,f16,bf16,q8_0
    # the K-quants (any scheme of python -m omnivoice.quantize), with their file sizes
    python3 tools/lm_parity_full.py --checkpoint /tmp/ckpt-full --ref ref_auto5.npz --backend cpu \
        --quants f32,q8_0,q6_k,q5_k_m,q4_k_m

Reports, per weight type: cosine and max |error| of the step-0 conditional logits (target window) against the
reference's float32 logits, the share of teacher-forced MaskGIT choices (positions and tokens of every
step, fed the reference's own input of that step) that equal the reference's, and the LM file's size.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MASK = 1024


def convert(checkpoint: Path, out: Path, quant: str) -> tuple[Path, Path]:
    from omnivoice.convert import convert_checkpoint

    lm = out / f"omnivoice-base-{quant.upper()}.gguf"
    if not lm.is_file():
        convert_checkpoint(checkpoint, out, quant=quant)
    return lm, out / "omnivoice-tokenizer-F32.gguf"


def run(args) -> list[dict]:
    from omnivoice.generate.maskgit import GenerationConfig, teacher_force
    from omnivoice.ggml import Runtime
    from omnivoice.runners.lm import GuidedChunk
    from omnivoice.runners.lm import LanguageModel, LMInput

    ref = np.load(args.ref)
    meta = json.loads(str(ref["meta_json"])) if "meta_json" in ref.files else {}
    num_step = int(meta.get("settings", {}).get("num_step", 32))
    ids, mask = ref["call0_cond_ids"], ref["call0_cond_audio_mask"].astype(bool)
    tokens = ref["call0_tokens"].astype(np.int32)
    steps = [t.astype(np.int32) for t in ref["call0_step_tokens"]]      # the input of every step
    unmask = (np.stack(steps) == MASK).sum(0) - 1                         # the step that filled each position
    T = tokens.shape[1]
    want_logits = ref["call0_logits_cond"].astype(np.float64)
    cfg = GenerationConfig(num_step=num_step, position_temperature=0.0, class_temperature=0.0)

    rows = []
    with Runtime(args.backend, n_threads=args.threads) as rt:
        for item in args.quants.split(","):
            quant, _, products = item.partition(":")
            lm_path, _ = convert(args.checkpoint, args.gguf_dir, quant)
            lm = LanguageModel(rt, lm_path, flash_attn=None if args.flash else False, cpu_products=products or None)
            prompt = LMInput(ids, mask, T)
            with lm.session([prompt], cfg.guidance_scale, greedy=True, with_logits=True) as s:
                got = s.step([ids[:, -T:]])[0]["cond_logits"].astype(np.float64)
            a, b = got.ravel(), want_logits.ravel()
            cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
            err = float(np.abs(got - want_logits).max())
            t0 = time.perf_counter()
            with lm.session([prompt], cfg.guidance_scale, greedy=True) as s:
                choices = teacher_force(GuidedChunk(s, MASK), steps, cfg)
            per_step = (time.perf_counter() - t0) / max(len(choices), 1)
            total = same = 0
            for step, c in enumerate(choices):
                want = {int(p): int(tokens.reshape(-1)[p]) for p in np.flatnonzero(unmask.reshape(-1) == step)}
                mine = dict(zip(c.positions.tolist(), c.tokens.tolist()))
                total += len(want)
                same += sum(1 for p, t in mine.items() if want.get(p) == t)
            rows.append(dict(quant=quant + (f" {lm.cpu_products}" if lm.cpu_products else ""), backend=rt.device.spec,
                             file_mib=lm_path.stat().st_size / 2**20,
                             cosine=cos, max_abs_err=err,
                             logit_scale=float(np.abs(want_logits).max()), teacher_forced=same / total,
                             ms_per_step=per_step * 1000, flash=lm.flash_attn, exact_f32=rt.exact_f32))
            lm.close()
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--ref", type=Path, required=True, help="run_reference.py generate output (.npz)")
    p.add_argument("--gguf-dir", type=Path, help="where conversions go (default CHECKPOINT-gguf)")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--quants", default="f32,f16,bf16,q8_0",
                   help="weight types; TYPE:PRODUCTS picks the CPU's products (ggml, i16, i8, amx or fma, default auto: "
                        "runners.lm.products_kernel), e.g. f16:ggml,f16:i16,f16:amx,f32:fma")
    p.add_argument("--threads", type=int, help="CPU threads (default: all cores; 1 on a shared machine)")
    p.add_argument("--flash", action="store_true", help="use flash attention where the backend has it")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    args.gguf_dir = args.gguf_dir or Path(str(args.checkpoint).rstrip("/") + "-gguf")
    rows = run(args)
    print("\n| weights | LM file MiB | backend | logits cosine | max abs err (scale) | teacher-forced equal "
          "| ms/step |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['quant']} | {r['file_mib']:.0f} | {r['backend']}{' +FA' if r['flash'] else ''}"
              f"{' exact' if r['exact_f32'] else ''} | {r['cosine']:.7f} | "
              f"{r['max_abs_err']:.2e} ({r['logit_scale']:.1f}) | {100 * r['teacher_forced']:.2f} % | "
              f"{r['ms_per_step']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
