#!/usr/bin/env python3
"""Dump the PyTorch reference codec's outputs for the codec parity tests (runs INSIDE the reference venv).

Regenerate the committed goldens (tiny checkpoint, seed 0) with:

    python3 tools/make_checkpoint.py --preset tiny --seed 0 -o /tmp/ckpt-tiny
    .venv-ref/bin/python tools/reference/golden_codec.py /tmp/ckpt-tiny -o tests/golden/codec_tiny.npz

On the full-size codec it takes longer clips (--clip-seconds) and --codec-only (the checkpoint directory then
needs only audio_tokenizer/; the voice-clone prompt fields are left out).

It loads the reference (`OmniVoice.from_pretrained`, float32, CPU) and records, using only the reference's own
code (transformers' HiggsAudioV2TokenizerModel as OmniVoice loads it):

    clip_a          f32 [N_a]     synthetic speech-like clip (tools/reference/synth_clip.py, seed 1), N_a a
                                  multiple of 960: the acoustic stream takes it unpadded
    codes_a         i64 [8, T_a]  audio_tokenizer.encode(clip_a)
    semantic_a      f32 [T_a, C]  _extract_semantic_features (HuBERT mean of all hidden states, every 2nd frame)
    e_semantic_a    f32 [C, T_a]  encoder_semantic output;  e_acoustic_a f32 [256, T_a] acoustic_encoder output
    latent_a        f32 [1024, T_a]  fc output, the RVQ input
    clip_b, codes_b               a clip whose length is not a multiple of 960 (the acoustic stream pads 480)
    clip_c          f32 [N_c]     a clip with a long pause, for the voice-clone prompt path
    prompt_codes_c  i64 [8, T_c]  create_voice_clone_prompt((clip_c, 24000), ref_text, preprocess_prompt=True)
    prompt_rms_c    f64 []        its ref_rms
    dec_codes_{0,1} i64 [8, T]    random codes (seed 7) of two lengths
    dec_audio_{0,1} f32 [960 T]   audio_tokenizer.decode (raw decoder output, before any post-processing)
    dec_audio_a     f32 [960 T_a] decode(codes_a)
    meta_json       str           checkpoint file hashes, settings, versions
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run_reference import file_sha256  # noqa: E402
from synth_clip import synth_clip  # noqa: E402

SR = 24000
HOP = 960




def _version(md, package: str) -> str | None:
    try:
        return md.version(package)
    except md.PackageNotFoundError:  # --codec-only needs transformers alone
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path, help="OmniVoice checkpoint directory (Hugging Face layout)")
    ap.add_argument("-o", "--out", type=Path, required=True, help="output .npz")
    ap.add_argument("--clip-seconds", type=float, default=1.2, help="length of clip_a (rounded to 960 samples)")
    ap.add_argument("--decode-frames", type=int, nargs=2, default=(25, 13), help="lengths of the random codes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--codec-only", action="store_true",
                    help="load HiggsAudioV2TokenizerModel from CHECKPOINT/audio_tokenizer alone; skip the prompt case")
    args = ap.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    t0 = time.time()
    if args.codec_only:
        from transformers import HiggsAudioV2TokenizerModel

        model = None
        tok = HiggsAudioV2TokenizerModel.from_pretrained(str(args.checkpoint / "audio_tokenizer"))
    else:
        from omnivoice.models.omnivoice import OmniVoice

        model = OmniVoice.from_pretrained(str(args.checkpoint), dtype=torch.float32, attn_implementation="sdpa")
        model.eval()
        tok = model.audio_tokenizer
    tok.float().eval()
    captured: dict[str, torch.Tensor] = {}

    orig_sem = tok._extract_semantic_features

    def sem_hook(x):
        out = orig_sem(x)
        captured["semantic"] = out
        return out

    tok._extract_semantic_features = sem_hook
    tok.encoder_semantic.register_forward_hook(lambda m, i, o: captured.__setitem__("e_semantic", o))
    tok.acoustic_encoder.register_forward_hook(lambda m, i, o: captured.__setitem__("e_acoustic", o))
    tok.fc.register_forward_hook(lambda m, i, o: captured.__setitem__("latent", o))

    def np32(t: torch.Tensor) -> np.ndarray:
        return t.detach().cpu().numpy().astype(np.float32)

    arrays: dict[str, np.ndarray] = {}
    n_a = int(round(args.clip_seconds * SR / HOP)) * HOP
    clips = {"a": synth_clip(seed=1, duration=n_a / SR)[:n_a],
             "b": synth_clip(seed=2, duration=1.1)[:int(1.1 * SR) - 1900]}
    with torch.inference_mode():
        for name, clip in clips.items():
            captured.clear()
            x = torch.from_numpy(clip).view(1, 1, -1)
            codes = tok.encode(x).audio_codes[0]
            arrays[f"clip_{name}"] = clip
            arrays[f"codes_{name}"] = codes.numpy().astype(np.int64)
            if name == "a":
                arrays["semantic_a"] = np32(captured["semantic"][0])
                arrays["e_semantic_a"] = np32(captured["e_semantic"][0])
                arrays["e_acoustic_a"] = np32(captured["e_acoustic"][0])
                arrays["latent_a"] = np32(captured["latent"][0].T)

        if model is not None:
            clip_c = synth_clip(seed=0, duration=2.0)
            prompt = model.create_voice_clone_prompt((torch.from_numpy(clip_c)[None], SR), ref_text="Hello world.",
                                                     preprocess_prompt=True)
            arrays["clip_c"] = clip_c
            arrays["prompt_codes_c"] = prompt.ref_audio_tokens.numpy().astype(np.int64)
            arrays["prompt_rms_c"] = np.float64(prompt.ref_rms)

        rng = np.random.default_rng(7)
        n_cb, size = tok.config.num_quantizers, tok.config.codebook_size
        for j, T in enumerate(args.decode_frames):
            codes = rng.integers(0, size, (n_cb, T))
            audio = tok.decode(torch.from_numpy(codes)[None]).audio_values
            arrays[f"dec_codes_{j}"] = codes.astype(np.int64)
            arrays[f"dec_audio_{j}"] = np32(audio[0, 0])
        arrays["dec_audio_a"] = np32(tok.decode(torch.from_numpy(arrays["codes_a"])[None]).audio_values[0, 0])

    import importlib.metadata as md

    ck = args.checkpoint
    meta = {
        "checkpoint": str(ck.resolve()),
        "audio_tokenizer_sha256": file_sha256(ck / "audio_tokenizer" / "model.safetensors"),
        "audio_tokenizer_config_sha256": file_sha256(ck / "audio_tokenizer" / "config.json"),
        "settings": {"clip_seconds": args.clip_seconds, "decode_frames": list(args.decode_frames),
                     "threads": args.threads, "dtype": "float32", "codec_only": args.codec_only},
        "versions": {p: _version(md, p) for p in ("omnivoice", "torch", "transformers")},
        "elapsed_s": round(time.time() - t0, 2),
    }
    arrays["meta_json"] = np.array(json.dumps(meta, indent=1, sort_keys=True))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp.npz")
    np.savez_compressed(tmp, **arrays)
    os.replace(tmp, args.out)
    print(f"{args.out}: {args.out.stat().st_size} bytes, {meta['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
