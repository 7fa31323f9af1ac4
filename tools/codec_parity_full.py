#!/usr/bin/env python3
"""Codec parity on the full-size preset (outside CI): our ggml codec against the PyTorch reference.

    python3 tools/codec_parity_full.py WORKDIR                     # CPU
    python3 tools/codec_parity_full.py WORKDIR --backend cuda      # same files, CUDA backend

WORKDIR collects, making each only when missing:
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
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from omnivoice.digest import file_sha256  # noqa: E402


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


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--backend", default="cpu", help="ggml backend for our side (cpu, cuda, vulkan, ...)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for our side")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--clip-seconds", type=float, default=5.0, help="length of the main encode clip")
    ap.add_argument("--decode-frames", type=int, nargs=2, default=(125, 50))
    ap.add_argument("--ref-python", default=str(ROOT / ".venv-ref" / "bin" / "python"))
    args = ap.parse_args(argv)

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


if __name__ == "__main__":
    sys.exit(main())
