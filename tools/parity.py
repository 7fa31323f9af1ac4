#!/usr/bin/env python3
r"""Parity with the PyTorch reference on full-size random checkpoints (outside CI), one subcommand per model
part: `lm` (step-0 logits and teacher-forced MaskGIT choices, per weight type) and `codec` (encode, its
intermediates and decode).

    # lm: a full-size checkpoint (3.1 GB, deterministic) and the reference's dump of one generate() call
    python3 tools/make_checkpoint.py --preset full --seed 0 -o /tmp/ckpt-full
    .venv-ref/bin/python tools/reference/run_reference.py generate /tmp/ckpt-full --mode auto \
        --text "The quick brown fox jumps over the lazy dog near the river bank." --language English \
        --duration 5 --num-step 32 -o ref_auto5.npz
    # then ours on every weight type, on a backend
    python3 tools/parity.py lm --checkpoint /tmp/ckpt-full --ref ref_auto5.npz --backend cpu \
        --quants f32,f16,bf16,q8_0
    # the K-quants (any scheme of python -m omnivoice.quantize), with their file sizes
    python3 tools/parity.py lm --checkpoint /tmp/ckpt-full --ref ref_auto5.npz --backend cpu \
        --quants f32,q8_0,q6_k,q5_k_m,q4_k_m
    # codec: everything in one work folder
    python3 tools/parity.py codec WORKDIR                     # CPU
    python3 tools/parity.py codec WORKDIR --backend cuda      # same files, CUDA backend

`lm` reports, per weight type: cosine and max |error| of the step-0 conditional logits (target window) against
the reference's float32 logits, the share of teacher-forced MaskGIT choices (positions and tokens of every
step, fed the reference's own input of that step) that equal the reference's, and the LM file's size.

`lm --ways`: an F32 LM on a backend, named each way a user names it, against the tiny checkpoint's goldens (the
reference's free-running greedy tokens of auto, design and clone, tests/golden/ref_*.npz; no --ref):

    python3 tools/make_checkpoint.py --preset tiny --seed 0 -o /tmp/ckpt-tiny
    python3 tools/parity.py lm --ways --checkpoint /tmp/ckpt-tiny --backend vulkan [--json OUT]

Each way runs in a process of its own, since a process fixes its Vulkan arithmetic when it creates the device:
  file        OmniVoice(model=the F32 GGUF, codec=...), no quant: the default this check is about
  folder      a folder holding only the F32 GGUF and the codec
  checkpoint  the checkpoint with quant="f32" (converted into a cache of its own)
  f16         the F32 GGUF with exact_f32=False: Vulkan's F16 shaders, for contrast
Per way: the runtime's load-line label (`vulkan:0 (..., F32 arithmetic)`), exact_f32, and per case the share of
the greedy tokens equal to the reference's and the step-0 logits' largest error on the reference's top 8
(relative to their largest). One JSON line per way, then a summary; exit status 1 when a way other than f16 is
not on F32 arithmetic or not token-exact.

`codec`: WORKDIR collects, making each only when missing:
    ckpt/audio_tokenizer/   the full-size random codec (tools/make_checkpoint.py's "full" preset, seed 0: HuBERT
                            base, DAC 64/1024/256, 8 codebooks of 1024 x 64), about 700 MB
    omnivoice-tokenizer-F32.gguf   its conversion (omnivoice.convert's codec writer)
    reference.npz           the reference's outputs (tools/reference/goldens.py codec --codec-only): needs the
                            reference venv (.venv-ref), so make it where that exists and copy it along; a machine
                            without the venv rebuilds the same checkpoint (seeded) and checks its hash
Prints, per case: code agreement (per codebook), and cosine / max abs error of the intermediates and of the
decoded audio (before any post-processing), with timings. On a GPU backend the encode runs twice: on the GPU
(ggml's CUDA F32 products are TF32: the agreement is reported) and with encode_backend="cpu" (must be exact).
Exit status 1 when the exact encode codes differ or a decode cosine falls under 0.9999.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from omnivoice.digest import file_sha256  # noqa: E402

MASK_ID = 1024  # the audio mask token
CASES = ("auto", "design", "clone")  # the tiny checkpoint's goldens (lm --ways)
WAYS = ("file", "folder", "checkpoint", "f16")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ------------------------------------------------------------------------------------------------ lm
def convert(checkpoint: Path, out: Path, quant: str) -> tuple[Path, Path]:
    from omnivoice.convert import convert_checkpoint

    lm = out / f"omnivoice-base-{quant.upper()}.gguf"
    if not lm.is_file():
        convert_checkpoint(checkpoint, out, quant=quant)
    return lm, out / "omnivoice-tokenizer-F32.gguf"


def lm_rows(args: argparse.Namespace) -> list[dict]:
    """One row per weight type of --quants: logits cosine and error, teacher-forced choices, file size."""
    from omnivoice.generate.maskgit import GenerationConfig, teacher_force
    from omnivoice.ggml import Runtime
    from omnivoice.runners.lm import GuidedChunk
    from omnivoice.runners.lm import LanguageModel, LMInput

    ref = np.load(args.ref)
    meta = json.loads(str(ref["meta_json"])) if "meta_json" in ref.files else {}
    num_step = int(meta.get("settings", {}).get("num_step", 32))
    ids, mask = ref["call0_cond_ids"], ref["call0_cond_audio_mask"].astype(bool)
    tokens = ref["call0_tokens"].astype(np.int32)
    steps = [t.astype(np.int32) for t in ref["call0_step_tokens"]]     # the input of every step
    unmask = (np.stack(steps) == MASK_ID).sum(0) - 1                    # the step that filled each position
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
            cos = cosine(got, want_logits)
            err = float(np.abs(got - want_logits).max())
            t0 = time.perf_counter()
            with lm.session([prompt], cfg.guidance_scale, greedy=True) as s:
                choices = teacher_force(GuidedChunk(s, MASK_ID), steps, cfg)
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


def one_way(way: str, ckpt: Path, gguf: Path, backend: str, work: Path) -> dict:
    """--ways, in a process of its own: load the F32 LM the `way` names and measure it against the goldens (this
    process's Vulkan arithmetic is fixed by it)."""
    from omnivoice import OmniVoice
    from omnivoice.codec.voice import VoicePrompt
    from omnivoice.runners.lm import LMInput
    from tests.parity.test_pipeline_parity import load, n_calls, options

    lm, codec = convert(ckpt, gguf, "f32")
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


def ways(args: argparse.Namespace) -> int:
    """--ways: every way in a process of its own (OMNIVOICE_EXACT_F32 unset: the default, not the tests'), then the
    summary; 0 when every way but f16 ran on F32 arithmetic and gave the goldens' tokens."""
    results = []
    with tempfile.TemporaryDirectory(prefix="f32-ways-") as tmp:
        for way in WAYS:
            env = {k: v for k, v in os.environ.items() if k != "OMNIVOICE_EXACT_F32"}
            r = subprocess.run([sys.executable, __file__, "lm", "--ways", "--checkpoint", str(args.checkpoint),
                                "--gguf-dir", str(args.gguf_dir), "--backend", args.backend, "--one", way,
                                "--work", tmp], env=env, capture_output=True, text=True)
            line = r.stdout.strip().splitlines()[-1:] if r.returncode == 0 else []
            res = json.loads(line[0]) if line else {"way": way, "error": r.stderr.strip()[-1500:]}
            print(json.dumps(res), flush=True)
            results.append(res)
    ok = all("error" not in r and r["exact_f32"] and all(c["tokens_equal"] == 1.0 for c in r["cases"].values())
             for r in results if r["way"] != "f16")
    if args.json:
        args.json.write_text(json.dumps({"ok": ok, "backend": args.backend, "ways": results}, indent=1) + "\n")
    print(json.dumps({"ok": ok, "tokens_equal": {r["way"]: {c: v["tokens_equal"] for c, v in r.get("cases", {}).items()}
                                                 for r in results}}))
    return 0 if ok else 1


def run_lm(args: argparse.Namespace) -> int:
    """`lm`: the table of lm_rows, one row per weight type (or --ways)."""
    args.checkpoint = args.checkpoint.resolve()
    args.gguf_dir = (args.gguf_dir or Path(str(args.checkpoint).rstrip("/") + "-gguf")).resolve()
    if args.ways:
        if args.one:
            print(json.dumps(one_way(args.one, args.checkpoint, args.gguf_dir, args.backend, args.work)), flush=True)
            return 0
        return ways(args)
    if args.ref is None:
        raise SystemExit("error: --ref is required (but with --ways)")
    rows = lm_rows(args)
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


# ------------------------------------------------------------------------------------------------ codec
def make_codec_checkpoint(ckpt: Path, seed: int) -> None:
    """Only the audio tokenizer of the full preset (the LM is not needed here)."""
    import make_checkpoint as mc

    p = mc.PRESETS["full"]
    at = ckpt / "audio_tokenizer"
    at.mkdir(parents=True, exist_ok=True)
    mc._write_json(at / "config.json", mc.codec_config(p))
    mc._write_json(at / "preprocessor_config.json", mc.preprocessor_config())
    mc.write_safetensors(at / "model.safetensors", mc.codec_specs(p), seed, progress=True)


def convert_codec(ckpt: Path, out: Path) -> None:
    """The converter's codec writer on a codec-only directory."""
    from omnivoice.gguf import keys as K
    from omnivoice.convert.checkpoint import Checkpoint, TensorSet, _read_json
    from omnivoice.convert.codec import plan_codec
    from omnivoice.gguf.writer import write_gguf
    from omnivoice.convert.safetensors_reader import SafetensorsFile

    at = ckpt / "audio_tokenizer"
    ck = Checkpoint(root=ckpt, config={}, codec_config=_read_json(at / "config.json"),
                    preprocessor_config=_read_json(at / "preprocessor_config.json"), tokenizer_json={},
                    tokenizer_config={}, lm=TensorSet([]), codec=TensorSet([SafetensorsFile(at / "model.safetensors")]))
    kv, tensors = plan_codec(ck)
    write_gguf(out, K.ARCH_CODEC, kv, tensors, progress=False)


def encode_case(codec, ref: dict, name: str, where: str, must_match: bool) -> bool:
    """Encode clip `name`, print the comparison; False when codes must match and do not."""
    clip = ref[f"clip_{name}"]
    codec.encode(clip, return_intermediates=name == "a")  # warm-up: graph build and allocation
    t = time.time()
    codes, inter = codec.encode(clip, return_intermediates=True) if name == "a" else (codec.encode(clip), None)
    dt = time.time() - t
    want = ref[f"codes_{name}"]
    same = codes.shape == want.shape and np.array_equal(codes, want)
    agree = (codes == want).mean(axis=1) if codes.shape == want.shape else None
    print(f"encode {name} on {where}: {len(clip) / 24000:.2f} s audio, {codes.shape[1]} frames, {dt * 1000:.0f} ms; "
          f"codes {'identical' if same else 'DIFFER'}"
          + ("" if same or agree is None else f" (agreement per codebook {np.round(agree, 4).tolist()}, "
                                              f"all {float(np.mean(codes == want)):.4f})"))
    if inter is not None:
        for key, rkey in (("semantic_features", "semantic_a"), ("e_semantic", "e_semantic_a"),
                          ("e_acoustic", "e_acoustic_a"), ("latent", "latent_a")):
            a, b = inter[key], ref[rkey]
            print(f"    {key:18s} cos {cosine(a, b):.9f}  max err {np.abs(a - b).max():.3e}  "
                  f"(ref max {np.abs(b).max():.3g})")
    return same or not must_match


def run_codec(args: argparse.Namespace) -> int:
    """`codec`: make what WORKDIR lacks, then compare encode and decode with the reference's."""

    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    ckpt, gguf_path, ref_path = work / "ckpt", work / "omnivoice-tokenizer-F32.gguf", work / "reference.npz"
    st = ckpt / "audio_tokenizer" / "model.safetensors"
    if not st.is_file():
        t = time.time()
        make_codec_checkpoint(ckpt, args.seed)
        print(f"checkpoint: {time.time() - t:.1f} s", file=sys.stderr)
    if not gguf_path.is_file():
        t = time.time()
        convert_codec(ckpt, gguf_path)
        print(f"gguf: {time.time() - t:.1f} s", file=sys.stderr)
    if not ref_path.is_file():
        import shutil

        if shutil.which(args.ref_python) is None:
            print(f"error: {ref_path} is missing and there is no reference venv ({args.ref_python}) to make it; "
                  "run this tool once where .venv-ref exists and copy reference.npz here", file=sys.stderr)
            return 1
        cmd = [args.ref_python, str(ROOT / "tools" / "reference" / "goldens.py"), "codec", str(ckpt),
               "-o", str(ref_path), "--codec-only", "--clip-seconds", str(args.clip_seconds),
               "--decode-frames", *map(str, args.decode_frames), "--threads", str(os.cpu_count() or 1)]
        print("reference:", " ".join(cmd), file=sys.stderr)
        subprocess.run(cmd, check=True)
    ref = dict(np.load(ref_path))
    meta = json.loads(str(ref["meta_json"]))
    if meta["audio_tokenizer_sha256"] != file_sha256(st):
        print(f"error: {ref_path} was made from another checkpoint than {st}", file=sys.stderr)
        return 1

    from omnivoice.codec import load_codec

    ok = True
    t = time.time()
    codec = load_codec(gguf_path, args.backend, threads=args.threads)
    print(f"backend {codec.runtime.device.spec} ({codec.runtime.device.description}); load {time.time() - t:.2f} s")
    print(f"reference: torch {meta['versions']['torch']}, transformers {meta['versions']['transformers']}, "
          f"{meta['elapsed_s']} s for everything")
    modes = [(codec, True)]
    if codec.runtime.is_gpu:
        modes = [(codec, False), (load_codec(gguf_path, args.backend, threads=args.threads, encode_backend="cpu"), True)]
    for enc_codec, must_match in modes:
        where = enc_codec.encode_runtime.device.spec
        for name in ("a", "b"):
            ok &= encode_case(enc_codec, ref, name, where, must_match)
    if len(modes) > 1:
        modes[1][0].close()
    for key, ckey in (("dec_audio_0", "dec_codes_0"), ("dec_audio_1", "dec_codes_1"), ("dec_audio_a", "codes_a")):
        codes = ref[ckey]
        codec.decode(codes)
        t = time.time()
        audio = codec.decode(codes)
        dt = time.time() - t
        c, err = cosine(audio, ref[key]), float(np.abs(audio - ref[key]).max())
        ok &= c >= 0.9999
        print(f"decode {codes.shape[1]:4d} frames ({codes.shape[1] / 25:.2f} s): cos {c:.9f}  max err {err:.3e}  "
              f"(ref peak {np.abs(ref[key]).max():.3g}, rms {np.sqrt(np.mean(ref[key] ** 2)):.3g}), {dt * 1000:.0f} ms")
    codec.close()
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    part = ap.add_subparsers(dest="part", required=True)
    p = part.add_parser("lm", help="step-0 logits and teacher-forced MaskGIT choices, per weight type")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--ref", type=Path, help="run_reference.py generate output (.npz); required but with --ways")
    p.add_argument("--ways", action="store_true",
                   help="an F32 LM named each way (file, folder, checkpoint; f16 shaders) against the tiny "
                        "checkpoint's goldens")
    p.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)  # --ways: a child process, one way
    p.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--gguf-dir", type=Path, help="where conversions go (default CHECKPOINT-gguf)")
    p.add_argument("--backend", default="cpu")
    p.add_argument("--quants", default="f32,f16,bf16,q8_0",
                   help="weight types; TYPE:PRODUCTS picks the CPU's products (ggml, i16, i8, amx or fma, default "
                        "auto: runners.lm.products_kernel), e.g. f16:ggml,f16:i16,f16:amx,f32:fma")
    p.add_argument("--threads", type=int, help="CPU threads (default: all cores; 1 on a shared machine)")
    p.add_argument("--flash", action="store_true", help="use flash attention where the backend has it")
    p.add_argument("--json", type=Path)
    p.set_defaults(run=run_lm)
    c = part.add_parser("codec", help="encode, its intermediates and decode against the reference's")
    c.add_argument("workdir", type=Path)
    c.add_argument("--backend", default="cpu", help="ggml backend for our side (cpu, cuda, vulkan, ...)")
    c.add_argument("--threads", type=int, default=None, help="CPU threads for our side")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--clip-seconds", type=float, default=5.0, help="length of the main encode clip")
    c.add_argument("--decode-frames", type=int, nargs=2, default=(125, 50))
    c.add_argument("--ref-python", default=str(ROOT / ".venv-ref" / "bin" / "python"))
    c.set_defaults(run=run_codec)
    args = ap.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
