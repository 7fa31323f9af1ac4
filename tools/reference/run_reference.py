#!/usr/bin/env python3
"""Run the PyTorch reference (PyPI omnivoice 0.2.1) on a checkpoint and dump what parity tests compare.

Runs INSIDE the reference venv (``tools/reference/setup_venv.sh`` makes it); never import it from ours.

    .venv-ref/bin/python tools/reference/run_reference.py generate CKPT --mode auto --text "Hello world." \
        --language English --num-target-tokens 30 -o out.npz
    .venv-ref/bin/python tools/reference/run_reference.py generate CKPT --mode design --instruct "female, low pitch" ...
    .venv-ref/bin/python tools/reference/run_reference.py generate CKPT --mode clone   # synthetic clip + transcript
    .venv-ref/bin/python tools/reference/run_reference.py encode CKPT --wav clip.wav -o codes.npz
    .venv-ref/bin/python tools/reference/run_reference.py decode CKPT --codes codes.npy -o audio.npz

Generation is deterministic (class_temperature 0, position_temperature 0, float32, sdpa attention, fixed
thread count). The values come from hooks on the reference's own methods (``forward``,
``_generate_iterative``, the audio tokenizer's ``encode``/``decode``, ``_post_process_audio``); nothing of
its logic is re-implemented here. Results are cached under ``--cache-dir`` (default
``$OMNIVOICE_REF_CACHE`` or ``~/.cache/omnivoice/reference``) keyed by a hash of the checkpoint's files, the
settings and this runner's source, so a rerun is free. The last line on stdout is the result's path.

Fields of a ``generate`` npz (``k`` counts calls of ``_generate_iterative``: 1, or one per text chunk):

    meta_json                   str: settings, per-call texts / target lengths / schedules, versions
    call{k}_cond_ids            int64 [8, L]   step-0 conditional input ids (prompt + ref codes + MASK target)
    call{k}_cond_audio_mask     bool  [L]      step-0 conditional audio mask
    call{k}_uncond_ids          int64 [8, T]   step-0 unconditional ids (the reference pads this row to L with
                                               1024 and self-only attention on the padding; only [0, T) is real)
    call{k}_logits_cond         f32 [8, T, 1025]  step-0 raw logits of the cond row, target window [L-T, L)
    call{k}_logits_uncond       f32 [8, T, 1025]  step-0 raw logits of the uncond row, window [0, T)
    call{k}_step_tokens         int64 [S, 8, T]   target tokens fed to step s (the cond row's window [L-T, L)
                                                  and the uncond row's [0, T) hold the same values); MASK = 1024
    call{k}_tokens              int64 [8, T]      tokens returned by the call
    ref_wav_input               f32 [N]        clone: the reference clip as given (24 kHz)
    ref_wav_encoded             f32 [N']       clone: what the audio tokenizer's encode received (after RMS
                                               normalisation, silence removal, hop truncation)
    ref_codes                   int64 [8, Tr]  clone: the reference audio's codes
    decode{j}_codes / decode{j}_audio   each audio-tokenizer decode call (one per chunk), audio f32 [n]
    decoded_audio               f32 [M]        decoded audio before post-processing (chunks cross-faded)
    final_audio                 f32 [M']       returned audio (after post-processing)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import runpy
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# our package has the reference's import name: keep the repo root (and the cwd) off the import path
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != REPO]
sys.path.insert(0, str(HERE))
from synth_clip import SAMPLE_RATE as CLIP_SR, TRANSCRIPT as CLIP_TEXT, synth_clip  # noqa: E402

RUNNER_FILES = (HERE / "run_reference.py", HERE / "synth_clip.py")
DEFAULT_CACHE = Path(os.environ.get("OMNIVOICE_REF_CACHE", Path.home() / ".cache" / "omnivoice" / "reference"))
DEFAULT_INSTRUCT = "female, low pitch"
DEFAULT_TEXT = "Hello world. This is a test."
MASK_ID = 1024


# --------------------------------------------------------------------------------------------------
# Hashing and cache
# --------------------------------------------------------------------------------------------------


# omnivoice/digest.py's hasher, run by its path (the repository's package cannot be imported here: see above)
file_sha256 = runpy.run_path(str(REPO / "omnivoice" / "digest.py"))["file_sha256"]


def checkpoint_hash(ckpt: Path, cache_dir: Path) -> str:
    """Content hash of every file of the checkpoint (per-file digests memoised by size and mtime)."""
    memo_path = cache_dir / "file-hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    h = hashlib.sha256()
    files = sorted(p for p in ckpt.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise SystemExit(f"error: {ckpt} holds no files")
    for p in files:
        st = p.stat()
        key = f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        if key not in memo:
            memo[key] = file_sha256(p)
        h.update(f"{p.relative_to(ckpt).as_posix()}:{memo[key]}\n".encode())
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = memo_path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(memo))
    os.replace(tmp, memo_path)
    return h.hexdigest()


def runner_hash() -> str:
    h = hashlib.sha256()
    for p in RUNNER_FILES:
        h.update(p.read_bytes())
    return h.hexdigest()


def cache_path(cache_dir: Path, ckpt_hash: str, settings: dict) -> Path:
    # input files count by content (their sha256 is in the settings), not by where they lie
    keyed = {k: v for k, v in settings.items() if k not in ("wav", "codes", "ref_wav")}
    blob = json.dumps({"settings": keyed, "runner": runner_hash()}, sort_keys=True).encode()
    return cache_dir / ckpt_hash[:16] / f"{settings['command']}-{hashlib.sha256(blob).hexdigest()[:16]}.npz"


# --------------------------------------------------------------------------------------------------
# Reference loading
# --------------------------------------------------------------------------------------------------


def load_reference(ckpt: Path, threads: int):
    """OmniVoice.from_pretrained in float32 with sdpa attention, offline, on the CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(threads)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    import omnivoice

    if "site-packages" not in str(omnivoice.__file__):
        raise SystemExit(f"error: imported {omnivoice.__file__}, not the reference package; run this with the "
                         f"reference venv's python (tools/reference/setup_venv.sh) and without PYTHONPATH")
    from omnivoice.models.omnivoice import OmniVoice

    model = OmniVoice.from_pretrained(str(ckpt), dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    return model


def versions() -> dict:
    import importlib.metadata as md

    out = {}
    for pkg in ("omnivoice", "torch", "transformers", "torchaudio", "numpy", "pydub"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


# --------------------------------------------------------------------------------------------------
# Recording hooks
# --------------------------------------------------------------------------------------------------


def _np(t) -> np.ndarray:
    return t.detach().cpu().numpy().copy()


class Recorder:
    """Wraps the reference model's methods and collects the tensors parity tests need."""

    def __init__(self, model):
        self.model = model
        self.arrays: dict[str, np.ndarray] = {}
        self.calls: list[dict] = []
        self.n_decode = 0
        self._call = None
        self._install()

    def _install(self) -> None:
        m = self.model
        orig_gen, orig_fwd = m._generate_iterative, m.forward
        orig_post = m._post_process_audio
        tok = m.audio_tokenizer
        orig_enc, orig_dec = tok.encode, tok.decode
        orig_prompt = m.create_voice_clone_prompt

        def gen(task, gen_config):
            if task.batch_size != 1:
                raise RuntimeError("the runner records batch size 1 only")
            k = len(self.calls)
            self._call = {"k": k, "step": 0, "T": int(task.target_lens[0]), "steps": []}
            self.calls.append({
                "text": task.texts[0], "target_len": int(task.target_lens[0]), "lang": task.langs[0],
                "instruct": task.instructs[0], "ref_text": task.ref_texts[0],
                "ref_len": None if task.ref_audio_tokens[0] is None else int(task.ref_audio_tokens[0].shape[-1]),
            })
            out = orig_gen(task, gen_config)
            c = self._call
            self.arrays[f"call{k}_step_tokens"] = np.stack(c["steps"])
            self.arrays[f"call{k}_tokens"] = _np(out[0])
            self.calls[k]["num_forward"] = c["step"]
            self._call = None
            return out

        def fwd(*args, **kwargs):
            out = orig_fwd(*args, **kwargs)
            c = self._call
            if c is None:
                return out
            ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
            mask = kwargs["audio_mask"] if "audio_mask" in kwargs else args[1]
            k, T = c["k"], c["T"]
            L = ids.shape[-1]
            c["steps"].append(_np(ids[0, :, L - T:L]))
            if c["step"] == 0:
                logits = out.logits.float()
                self.arrays[f"call{k}_cond_ids"] = _np(ids[0])
                self.arrays[f"call{k}_cond_audio_mask"] = _np(mask[0])
                self.arrays[f"call{k}_uncond_ids"] = _np(ids[1, :, :T])
                self.arrays[f"call{k}_logits_cond"] = _np(logits[0, :, L - T:L, :])
                self.arrays[f"call{k}_logits_uncond"] = _np(logits[1, :, :T, :])
                self.calls[k]["cond_len"] = int(L)
            c["step"] += 1
            return out

        def enc(input_values, *args, **kwargs):
            out = orig_enc(input_values, *args, **kwargs)
            self.arrays["ref_wav_encoded"] = _np(input_values).reshape(-1)
            codes = out.audio_codes if hasattr(out, "audio_codes") else out
            self.arrays["ref_codes"] = _np(codes[0])
            return out

        def dec(audio_codes, *args, **kwargs):
            out = orig_dec(audio_codes, *args, **kwargs)
            j = self.n_decode
            self.n_decode += 1
            values = out.audio_values if hasattr(out, "audio_values") else out
            self.arrays[f"decode{j}_codes"] = _np(audio_codes[0])
            self.arrays[f"decode{j}_audio"] = _np(values[0]).reshape(-1)
            return out

        def post(generated_audio, ref_rms, gen_config):
            self.arrays["decoded_audio"] = np.asarray(generated_audio, dtype=np.float32).reshape(-1).copy()
            out = orig_post(generated_audio, ref_rms=ref_rms, gen_config=gen_config)
            self.arrays["final_audio"] = np.asarray(out, dtype=np.float32).reshape(-1).copy()
            self.post_ref_rms = ref_rms
            return out

        def prompt(*args, **kwargs):
            out = orig_prompt(*args, **kwargs)
            self.voice_prompt = {"ref_text": out.ref_text, "ref_rms": float(out.ref_rms)}
            return out

        m._generate_iterative = gen
        m.forward = fwd
        m._post_process_audio = post
        m.create_voice_clone_prompt = prompt
        tok.encode = enc
        tok.decode = dec


# --------------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------------


def run_generate(model, s: dict, work: Path) -> tuple[dict, dict]:
    import torch

    from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

    gen_config = OmniVoiceGenerationConfig(
        num_step=s["num_step"], guidance_scale=s["guidance_scale"], t_shift=s["t_shift"],
        layer_penalty_factor=s["layer_penalty_factor"], position_temperature=0.0, class_temperature=0.0,
        denoise=s["denoise"], preprocess_prompt=s["preprocess_prompt"], postprocess_output=s["postprocess_output"],
        audio_chunk_duration=s["audio_chunk_duration"], audio_chunk_threshold=s["audio_chunk_threshold"],
    )
    kwargs: dict = {"text": s["text"], "language": s["language"], "generation_config": gen_config}
    if s["instruct"] is not None:
        kwargs["instruct"] = s["instruct"]
    if s["duration"] is not None:
        kwargs["duration"] = s["duration"]
    arrays: dict[str, np.ndarray] = {}
    if s["mode"] == "clone":
        import soundfile as sf

        if s["ref_wav"] is None:
            wav_path = work / "clip.wav"
            sf.write(wav_path, synth_clip(seed=s["clip_seed"], duration=s["clip_duration"]), CLIP_SR, subtype="FLOAT")
        else:
            wav_path = Path(s["ref_wav"])
        data, sr = sf.read(wav_path, dtype="float32", always_2d=True)
        arrays["ref_wav_input"] = data.mean(axis=1).astype(np.float32) if data.shape[1] > 1 else data[:, 0].copy()
        arrays["ref_wav_sample_rate"] = np.array(sr, dtype=np.int64)
        kwargs["ref_audio"] = str(wav_path)
        kwargs["ref_text"] = s["ref_text"]

    rec = Recorder(model)
    torch.manual_seed(s["seed"])
    t0 = time.time()
    with torch.inference_mode():
        audios = model.generate(**kwargs)
    elapsed = time.time() - t0
    arrays.update(rec.arrays)
    if not np.array_equal(np.asarray(audios[0], np.float32).reshape(-1), arrays["final_audio"]):
        raise RuntimeError("final audio hook disagrees with generate()'s return value")
    for k, c in enumerate(rec.calls):
        # positions unmasked per step, as observed (the reference's own float32 schedule)
        steps = arrays[f"call{k}_step_tokens"]
        after = np.concatenate([steps[1:], arrays[f"call{k}_tokens"][None]])
        c["schedule"] = ((steps == MASK_ID) & (after != MASK_ID)).sum(axis=(1, 2)).tolist()
    meta = {"calls": rec.calls, "elapsed_s": round(elapsed, 3), "num_decode": rec.n_decode,
            "voice_prompt": getattr(rec, "voice_prompt", None), "sample_rate": model.sampling_rate,
            "post_ref_rms": getattr(rec, "post_ref_rms", None)}
    return arrays, meta


def run_encode(model, s: dict) -> tuple[dict, dict]:
    import soundfile as sf
    import torch

    data, sr = sf.read(s["wav"], dtype="float32", always_2d=True)
    if sr != model.sampling_rate:
        raise SystemExit(f"error: {s['wav']}: sample rate {sr}, expected {model.sampling_rate}")
    wav = data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]
    x = torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)).view(1, 1, -1)
    with torch.inference_mode():
        codes = model.audio_tokenizer.encode(x).audio_codes
    return {"wav": wav.astype(np.float32), "codes": _np(codes[0])}, {}


def run_decode(model, s: dict) -> tuple[dict, dict]:
    import torch

    codes = np.load(s["codes"])
    if codes.ndim != 2 or codes.shape[0] != model.config.num_audio_codebook:
        raise SystemExit(f"error: {s['codes']}: codes of shape {codes.shape}, expected [8, T]")
    if codes.min() < 0 or codes.max() >= model.audio_tokenizer.config.codebook_size:
        raise SystemExit(f"error: {s['codes']}: code values outside [0, 1024)")
    with torch.inference_mode():
        audio = model.audio_tokenizer.decode(torch.from_numpy(codes.astype(np.int64))[None]).audio_values
    return {"codes": codes.astype(np.int64), "audio": _np(audio[0]).reshape(-1)}, {}


# --------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------


def build_settings(args: argparse.Namespace) -> dict:
    s: dict = {"command": args.command, "threads": args.threads}
    if args.command == "generate":
        duration = args.duration
        if args.num_target_tokens is not None:
            if duration is not None:
                raise SystemExit("error: give --duration or --num-target-tokens, not both")
            # the reference takes int(duration * 25); the half frame keeps float rounding off the edge
            duration = (args.num_target_tokens + 0.5) / 25.0
        instruct = args.instruct
        if args.mode == "design" and instruct is None:
            instruct = DEFAULT_INSTRUCT
        if args.mode != "design" and instruct is not None:
            raise SystemExit("error: --instruct belongs to --mode design")
        ref_wav = str(Path(args.ref_wav).resolve()) if args.ref_wav else None
        ref_text = args.ref_text
        if args.mode == "clone" and ref_wav is None and ref_text is None:
            ref_text = CLIP_TEXT
        if args.mode == "clone" and ref_text is None:
            raise SystemExit("error: --ref-text is required with --ref-wav")
        if args.mode != "clone" and (ref_wav or ref_text):
            raise SystemExit("error: --ref-wav/--ref-text belong to --mode clone")
        s.update(
            mode=args.mode, text=args.text, language=args.language, instruct=instruct, duration=duration,
            num_target_tokens=args.num_target_tokens, num_step=args.num_step, seed=args.seed,
            guidance_scale=args.guidance_scale, t_shift=args.t_shift, layer_penalty_factor=args.layer_penalty,
            denoise=not args.no_denoise, preprocess_prompt=not args.no_preprocess_prompt,
            postprocess_output=not args.no_postprocess, audio_chunk_duration=args.chunk_duration,
            audio_chunk_threshold=args.chunk_threshold, ref_wav=ref_wav,
            ref_wav_sha256=file_sha256(Path(ref_wav)) if ref_wav else None,
            ref_text=ref_text if args.mode == "clone" else None,
            clip_seed=args.clip_seed if args.mode == "clone" and ref_wav is None else None,
            clip_duration=args.clip_duration if args.mode == "clone" and ref_wav is None else None,
            class_temperature=0.0, position_temperature=0.0, dtype="float32", attn_implementation="sdpa",
        )
    elif args.command == "encode":
        s.update(wav=str(Path(args.wav).resolve()), wav_sha256=file_sha256(Path(args.wav)))
    else:
        s.update(codes=str(Path(args.codes).resolve()), codes_sha256=file_sha256(Path(args.codes)))
    return s


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Run the OmniVoice PyTorch reference and dump parity data.")
    sub = ap.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("checkpoint", help="checkpoint directory in the Hugging Face layout")
    common.add_argument("-o", "--out", help="also copy the result .npz here")
    common.add_argument("--cache-dir", default=str(DEFAULT_CACHE))
    common.add_argument("--threads", type=int, default=1, help="torch threads (part of the cache key)")
    common.add_argument("--force", action="store_true", help="recompute even if cached")
    g = sub.add_parser("generate", parents=[common], help="one generate() call, recorded")
    g.add_argument("--mode", choices=("auto", "design", "clone"), required=True)
    g.add_argument("--text", default=DEFAULT_TEXT)
    g.add_argument("--language", default=None, help="name or id, e.g. English / en (default: None)")
    g.add_argument("--instruct", default=None, help=f"design mode (default {DEFAULT_INSTRUCT!r})")
    g.add_argument("--duration", type=float, default=None, help="target seconds (default: estimated)")
    g.add_argument("--num-target-tokens", type=int, default=None, help="exact target frames (25 per second)")
    g.add_argument("--num-step", type=int, default=32)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--guidance-scale", type=float, default=2.0)
    g.add_argument("--t-shift", type=float, default=0.1)
    g.add_argument("--layer-penalty", type=float, default=5.0)
    g.add_argument("--no-denoise", action="store_true")
    g.add_argument("--no-preprocess-prompt", action="store_true")
    g.add_argument("--no-postprocess", action="store_true")
    g.add_argument("--chunk-duration", type=float, default=15.0)
    g.add_argument("--chunk-threshold", type=float, default=30.0)
    g.add_argument("--ref-wav", default=None, help="clone: reference wav (default: the synthetic clip)")
    g.add_argument("--ref-text", default=None, help="clone: its transcript")
    g.add_argument("--clip-seed", type=int, default=0, help="clone: seed of the synthetic clip")
    g.add_argument("--clip-duration", type=float, default=2.4, help="clone: seconds of the synthetic clip")
    e = sub.add_parser("encode", parents=[common], help="audio tokenizer: wav -> codes")
    e.add_argument("--wav", required=True, help="24 kHz wav")
    d = sub.add_parser("decode", parents=[common], help="audio tokenizer: codes (.npy [8, T]) -> audio")
    d.add_argument("--codes", required=True)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ckpt = Path(args.checkpoint).resolve()
    for need in ("config.json", "model.safetensors", "audio_tokenizer/config.json"):
        if not (ckpt / need).is_file():
            raise SystemExit(f"error: {ckpt} is not an OmniVoice checkpoint: {need} is missing")
    cache_dir = Path(args.cache_dir)
    settings = build_settings(args)
    ck_hash = checkpoint_hash(ckpt, cache_dir)
    out_path = cache_path(cache_dir, ck_hash, settings)
    if args.force or not out_path.is_file():
        out_path.parent.mkdir(parents=True, exist_ok=True)
        model = load_reference(ckpt, args.threads)
        work = out_path.parent / f".work-{os.getpid()}"
        work.mkdir(exist_ok=True)
        try:
            if args.command == "generate":
                arrays, meta = run_generate(model, settings, work)
            elif args.command == "encode":
                arrays, meta = run_encode(model, settings)
            else:
                arrays, meta = run_decode(model, settings)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        meta.update(settings=settings, checkpoint=str(ckpt), checkpoint_sha256=ck_hash,
                    runner_sha256=runner_hash(), versions=versions())
        meta_text = json.dumps(meta, indent=1, sort_keys=True)
        arrays["meta_json"] = np.array(meta_text)
        tmp = out_path.with_name(out_path.name + f".{os.getpid()}.tmp.npz")
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, out_path)
        out_path.with_suffix(".json").write_text(meta_text)
    if args.out:
        shutil.copyfile(out_path, args.out)
    print(out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
