"""Write the golden files for tests/audio from the PyTorch reference (torchaudio, pydub, omnivoice).

Run with the reference environment's python, from the repository root:

    .venv-ref/bin/python tools/reference/golden_audio.py            # writes tests/golden/audio_*.npz
    .venv-ref/bin/python tools/reference/golden_audio.py --out DIR  # somewhere else

It imports the reference package ``omnivoice`` (PyPI 0.2.1), so it must never run in our own
environment, and it imports nothing from this repository. Every input signal is stored in the
golden file next to the reference's output, so the tests need no generator of their own.

Files (each under 500 KiB):
  audio_resample.npz  torchaudio.functional.resample over many rate pairs, lengths and signals
  audio_silence.npz   pydub.silence (detect_silence, detect_nonsilent, split_on_silence,
                      detect_leading_silence), the reference's remove_silence_edges and
                      remove_silence, on int16 speech-like signals and edge cases
  audio_utils.npz     the reference's remove_silence on non-int16-exact floats, its int16
                      conversion, trim_long_audio, fade_and_pad_audio and cross_fade_chunks
  audio_pipeline.npz  OmniVoice.create_voice_clone_prompt (reference preprocessing) and
                      OmniVoice._decode_and_post_process (output post-processing), run as the
                      reference's own methods on a stub object whose codec only records its input
Each file holds arrays named ``c{N}_...`` plus ``meta``: a JSON list with one dict per case. Long
outputs that must match bit for bit are pinned by a sha256 digest of their int16 / float32 bytes
(``digest`` below; tests/audio/audio_golden.py computes the same) instead of being stored. The
output is deterministic: rerunning the script rewrites identical arrays.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore", message="Couldn't find ffmpeg")

if __name__ == "__main__" and {"-h", "--help"} & set(sys.argv[1:]):  # help without the reference's environment
    print(__doc__)
    sys.exit(0)
import soundfile as sf  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402
from pydub import AudioSegment  # noqa: E402
from pydub import silence as pydub_silence  # noqa: E402

from omnivoice.models.omnivoice import OmniVoice, OmniVoiceGenerationConfig  # noqa: E402
from omnivoice.utils import audio as ref_audio  # noqa: E402

logging.getLogger("omnivoice").setLevel(logging.ERROR)

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------


def speech_like(rng: np.random.Generator, rate: int, seconds: float, floor: float, level: float = 0.3) -> np.ndarray:
    """Voiced bursts (harmonic, gliding f0, syllable envelope) separated by gaps, over a noise floor.

    Gaps run from 20 ms to 900 ms so the 200 / 300 / 500 ms silence rules all trigger; the noise
    floor is chosen near the -50 dBFS and -40 dBFS thresholds (rms 0.0032 and 0.01) to exercise
    borderline windows.
    """
    n = int(round(rate * seconds))
    out = np.zeros(n, dtype=np.float64)
    pos = int(rng.uniform(0.0, 0.5) * rate)
    while pos < n:
        seg = int(rng.uniform(0.08, 0.6) * rate)
        end = min(n, pos + seg)
        t = np.arange(end - pos) / rate
        f0 = rng.uniform(90, 260) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(2, 6) * t))
        phase = 2 * np.pi * np.cumsum(f0) / rate
        voiced = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 9))
        env = np.sin(np.pi * np.linspace(0, 1, end - pos)) ** rng.uniform(0.3, 2.0)
        syll = 0.6 + 0.4 * np.sin(2 * np.pi * rng.uniform(3, 6) * t + rng.uniform(0, 6.28))
        out[pos:end] = voiced * env * syll * level * rng.uniform(0.3, 1.0) / 2.7
        pos = end + int(rng.choice([rng.uniform(0.02, 0.15), rng.uniform(0.15, 0.9)]) * rate)
    out += rng.standard_normal(n) * floor
    return np.clip(out, -1, 1).astype(np.float32)


def pcm16(x: np.ndarray) -> np.ndarray:
    """The reference's float -> int16 quantisation."""
    return (x * 32768.0).clip(-32768, 32767).astype(np.int16)


def pcm_float(pcm: np.ndarray) -> np.ndarray:
    """int16 -> float32 as the reference converts back (exact, so int16 storage loses nothing)."""
    return pcm.astype(np.float32) / 32768.0


def digest(a: np.ndarray) -> dict:
    """sha256 of an int16 or float32 array's little-endian bytes, with its length: lets a golden
    pin a long output exactly without storing it (tests/audio/conftest.py computes the same)."""
    a = np.ascontiguousarray(a)
    kind = "<i2" if a.dtype == np.int16 else "<f4"
    return {"sha256": hashlib.sha256(a.astype(kind).tobytes()).hexdigest(), "n": int(a.shape[-1])}


def segment(pcm: np.ndarray, rate: int) -> AudioSegment:
    return AudioSegment(data=pcm.astype(np.int16).tobytes(), sample_width=2, frame_rate=rate, channels=1)


def seg_pcm(seg: AudioSegment) -> np.ndarray:
    return np.array(seg.get_array_of_samples(), dtype=np.int16)


class Golden:
    """Collects cases: arrays under ``c{N}_{name}`` and one metadata dict per case."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.meta: list[dict] = []

    def add(self, meta: dict, **arrays: np.ndarray) -> None:
        i = len(self.meta)
        for k, v in arrays.items():
            self.arrays[f"c{i}_{k}"] = np.asarray(v)
        self.meta.append(meta)

    def save(self, path: Path) -> None:
        np.savez_compressed(path, meta=np.array(json.dumps(self.meta)), **self.arrays)
        print(f"{path}: {len(self.meta)} cases, {path.stat().st_size / 1024:.0f} KiB")


# ---------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------


def build_resample(rng: np.random.Generator) -> Golden:
    g = Golden()
    pairs = [
        (24000, 16000, [1, 2, 3, 4, 5, 17, 961, 4807]),
        (16000, 24000, [1, 7, 3203]),
        (8000, 24000, [1, 1601]),
        (44100, 24000, [3, 147, 4411]),
        (48000, 24000, [9, 4801]),
        (22050, 24000, [2205]),
        (11025, 16000, [1103]),
        (24000, 8000, [2401]),
        (32000, 24000, [3200]),
        (24000, 44100, [1203]),
    ]
    kinds = ["noise", "speech", "sweep"]
    for orig, new, lengths in pairs:
        for j, n in enumerate(lengths):
            kind = kinds[(j + orig // 1000) % len(kinds)]
            if kind == "noise":
                x = (rng.standard_normal(n) * 0.3).astype(np.float32)
            elif kind == "speech":
                x = speech_like(rng, orig, n / orig, 0.003)[:n]
                x = np.pad(x, (0, n - len(x)))
            else:  # full-scale chirp up to Nyquist: the filter's edge
                t = np.arange(n) / orig
                x = (0.99 * np.sin(2 * np.pi * (20 + (orig / 2 - 20) * t / max(t[-1], 1e-9) / 2) * t)
                     if n > 1 else np.full(n, 0.99)).astype(np.float32)
            y = torchaudio.functional.resample(torch.from_numpy(x), orig, new).numpy()
            g.add({"orig": orig, "new": new, "kind": kind, "n": n}, x=x, y=y)
    # [channels, time] input: torchaudio resamples each row.
    x = np.stack([speech_like(rng, 44100, 0.05, 0.002), (rng.standard_normal(2205) * 0.2).astype(np.float32)])
    y = torchaudio.functional.resample(torch.from_numpy(x), 44100, 24000).numpy()
    g.add({"orig": 44100, "new": 24000, "kind": "stereo", "n": 2205}, x=x, y=y)
    return g


# An odd min_silence_len makes the split midpoint (last_end + next_start) // 2 round.
SPLIT_PARAMS = [(200, 200), (500, 500), (300, True), (100, False), (150, 40), (155, 200)]
SILENCE_PARAMS = [(200, -50, 10), (500, -50, 10), (100, -40, 10), (50, -50, 1), (300, -16, 7), (1000, -60, 10)]
EDGE_PARAMS = [(100, 300), (100, 200), (0, 0)]
REMOVE_PARAMS = [(500, 100, 100), (200, 100, 200), (300, 100, 300), (0, 100, 300), (250, 0, 0), (155, 100, 100)]


def pydub_checks(pcm: np.ndarray, rate: int, g: Golden, meta: dict) -> None:
    """Every pydub-level decision on one int16 signal, outputs pinned by digest."""
    seg = segment(pcm, rate)
    r: dict = {"len_ms": len(seg)}
    for msl, thresh, step in SILENCE_PARAMS:
        r[f"silence_{msl}_{thresh}_{step}"] = pydub_silence.detect_silence(seg, msl, thresh, step)
        r[f"nonsilent_{msl}_{thresh}_{step}"] = pydub_silence.detect_nonsilent(seg, msl, thresh, step)
    for msl, keep in SPLIT_PARAMS:
        pieces = pydub_silence.split_on_silence(seg, min_silence_len=msl, silence_thresh=-50, keep_silence=keep, seek_step=10)
        joined = np.concatenate([seg_pcm(p) for p in pieces]) if pieces else np.zeros(0, np.int16)
        r[f"split_{msl}_{keep}"] = {"lengths": [len(p.raw_data) // 2 for p in pieces], **digest(joined)}
    for thresh in (-50, -40.5, -30):
        r[f"leading_{thresh}"] = pydub_silence.detect_leading_silence(seg, silence_threshold=thresh)
        r[f"trailing_{thresh}"] = pydub_silence.detect_leading_silence(seg.reverse(), silence_threshold=thresh)
    for lead, trail in EDGE_PARAMS:
        r[f"edges_{lead}_{trail}"] = digest(seg_pcm(ref_audio.remove_silence_edges(seg, lead, trail, -50)))
    if rate >= 11025:
        for mid, lead, trail in REMOVE_PARAMS:
            y = ref_audio.remove_silence(pcm_float(pcm)[None], rate, mid_sil=mid, lead_sil=lead, trail_sil=trail)[0]
            r[f"remove_{mid}_{lead}_{trail}"] = digest(pcm16(y))
    g.add({**meta, "rate": rate, "results": r}, pcm=pcm)


def build_silence(rng: np.random.Generator) -> Golden:
    g = Golden()
    specs = [
        (24000, 1.5, 0.0032), (24000, 1.2, 0.0), (24000, 1.0, 0.0031), (16000, 1.3, 0.003),
        (44100, 0.7, 0.0035), (22050, 1.0, 0.001), (48000, 0.6, 0.0032), (11025, 1.5, 0.01),
        (8000, 1.5, 0.0033), (24000, 0.8, 0.02), (12000, 1.2, 0.0032),
    ]
    for rate, seconds, floor in specs:
        x = speech_like(rng, rate, seconds, floor, level=float(rng.uniform(0.1, 1.2)))
        # An odd tail: the length is rarely a whole number of milliseconds.
        x = np.concatenate([x, (rng.standard_normal(int(rng.integers(1, 40))) * 0.05).astype(np.float32)])
        pydub_checks(pcm16(x), rate, g, {"kind": "speech", "floor": floor})
    edge = [
        ("empty", 24000, np.zeros(0, np.int16)),
        ("one_sample", 24000, np.array([12000], np.int16)),
        ("1ms", 24000, pcm16((rng.standard_normal(24) * 0.3).astype(np.float32))),
        ("zeros", 24000, np.zeros(24000, np.int16)),
        ("quiet_noise", 24000, pcm16((rng.standard_normal(12011) * 0.0025).astype(np.float32))),
        ("click", 16000, np.eye(1, 16000, 7919, dtype=np.int16)[0] * 30000),
        ("full_scale", 24000, np.where(np.arange(4800) % 2, -32768, 32767).astype(np.int16)),
        ("half_ms_tail", 24000, pcm16((rng.standard_normal(2412) * 0.1).astype(np.float32))),
        ("round_up_tail", 24000, pcm16((rng.standard_normal(2413) * 0.1).astype(np.float32))),
        # 101 ms nominal, 100.54 ms of data: the last chunk is zero-padded, and only with the padding
        # counted does its rms (120 over 13 of 24 samples) fall below -50 dBFS.
        ("padded_tail", 24000, np.concatenate([np.zeros(2401, np.int16), np.full(12, 120, np.int16)])),
        # A blip split evenly across the 600 ms boundary: the 200 ms windows ending and starting there
        # are silent, those straddling it are not, so two silent windows exactly 200 ms apart meet.
        ("straddling_blip", 24000, np.where(np.abs(np.arange(28800) - 14400 + 0.5) < 24, 1250, 0).astype(np.int16)),
        ("burst_in_silence", 24000, np.concatenate([np.zeros(13000, np.int16), pcm16(speech_like(rng, 24000, 0.2, 0.0)), np.zeros(9001, np.int16)])),
    ]
    for name, rate, pcm in edge:
        pydub_checks(pcm, rate, g, {"kind": name})
    return g


def build_utils(rng: np.random.Generator) -> Golden:
    g = Golden()
    # remove_silence on float audio that is not int16-exact: the truncation and clipping.
    for name, n, scale, floor in [("float", 9000, 0.6, 0.003), ("clipping", 4800, 1.5, 0.0), ("tiny", 24, 0.3, 0.0)]:
        x = speech_like(rng, 24000, n / 24000, floor, scale)[:n]
        x = np.pad(x, (0, n - len(x)))
        if name == "clipping":
            x = (rng.standard_normal(n) * scale).astype(np.float32)
        y = ref_audio.remove_silence(x[None], 24000, mid_sil=200, lead_sil=100, trail_sil=200)[0]
        g.add({"fn": "remove_silence", "rate": 24000, "mid": 200, "lead": 100, "trail": 200, "kind": name}, x=x, y=pcm16(y))
    x = np.array([0.99999994, -0.99999994, 1.0, -1.0, 1.5, -1.5, 3.0517578e-05, -3.0517578e-05, 4.5e-05, -4.5e-05,
                  1.5258789e-05, 0.0, -0.0, 0.5000001, -0.5000001], np.float32)
    g.add({"fn": "to_pcm16"}, x=x, y=pcm16(x))

    # trim_long_audio needs > 20 s: low rates (pydub works per ms at any rate) keep the files small.
    for rate, seconds, floor, thr in [(1000, 24.0, 0.0015, 20.0), (500, 22.5, 0.0, 20.0), (500, 21.0, 0.02, 20.0),
                                      (500, 9.0, 0.0005, 5.0), (500, 21.0, 0.0, 20.0), (500, 19.0, 0.001, 20.0),
                                      (500, 22.0, 0.0, 20.0)]:
        x = pcm_float(pcm16(speech_like(rng, rate, seconds, floor)))
        if rate == 500 and seconds == 21.0:  # one burst then silence: the split falls back to max_duration
            x[int(2.5 * rate):] = 0
        if rate == 500 and seconds == 22.0:  # a burst starting exactly at max_duration (15 s) is a split point
            x[:] = 0
            for a, b in [(1.0, 3.0), (8.0, 12.0), (15.0, 17.0)]:
                x[int(a * rate):int(b * rate)] = pcm_float(pcm16(speech_like(rng, rate, b - a + 1, 0.0, 2.0)))[:int((b - a) * rate)]
                x[int(a * rate)] = 0.5
        y = ref_audio.trim_long_audio(x[None], rate, trim_threshold=thr)[0]
        g.add({"fn": "trim_long_audio", "rate": rate, "trim_threshold": thr, "y": digest(y)}, pcm=pcm16(x))

    for n, pad, fade, rate in [(5000, 0.1, 0.1, 24000), (3000, 0.02, 0.1, 24000), (1, 0.1, 0.1, 24000), (0, 0.1, 0.1, 24000),
                               (2001, 0.05, 0.05, 24000), (3000, 0.0, 0.02, 16000), (1000, 0.01, 0.0, 8000), (3, 0.1, 0.1, 24000)]:
        x = (rng.standard_normal(n) * 0.3).astype(np.float32)
        y = ref_audio.fade_and_pad_audio(x[None], pad_duration=pad, fade_duration=fade, sample_rate=rate)[0]
        g.add({"fn": "fade_and_pad", "pad": pad, "fade": fade, "rate": rate}, x=x, y=y)

    for lengths, rate, dur in [([3000, 2500, 2600], 24000, 0.3), ([500], 24000, 0.3), ([100, 3000, 50, 2600], 24000, 0.3),
                               ([2000, 1500], 16000, 0.2), ([0, 3000], 24000, 0.3)]:
        chunks = [(rng.standard_normal(n) * 0.3).astype(np.float32) for n in lengths]
        y = ref_audio.cross_fade_chunks([c[None] for c in chunks], rate, silence_duration=dur)[0]
        arrays = {f"x{k}": c for k, c in enumerate(chunks)}
        g.add({"fn": "cross_fade_chunks", "rate": rate, "silence_duration": dur, "n_chunks": len(chunks)}, y=y, **arrays)
    return g


class _Recorder:
    """Stands in for the reference's audio tokenizer: encode records its input, decode looks up
    the chunk whose index the token tensor holds."""

    def __init__(self, chunks=None) -> None:
        self.config = type("Cfg", (), {"hop_length": 960})()
        self.device = torch.device("cpu")
        self.encoded = None
        self.chunks = chunks or []

    def encode(self, x):
        self.encoded = x.numpy().copy()
        return type("Enc", (), {"audio_codes": torch.zeros(1, 8, x.shape[-1] // 960, dtype=torch.long)})()

    def decode(self, codes):
        audio = self.chunks[int(codes.flatten()[0])]
        return type("Dec", (), {"audio_values": torch.from_numpy(audio)[None, None]})()


class _StubModel:
    """Borrows the reference's methods; nothing else of the model is needed by them."""

    sampling_rate = 24000
    _asr_pipe = None
    create_voice_clone_prompt = OmniVoice.create_voice_clone_prompt
    _decode_and_post_process = OmniVoice._decode_and_post_process
    _post_process_audio = OmniVoice._post_process_audio

    def __init__(self, chunks=None) -> None:
        self.audio_tokenizer = _Recorder(chunks)


def build_pipeline(rng: np.random.Generator, tmp: Path) -> Golden:
    """Reference clip preprocessing and output post-processing, through the reference's methods.

    Inputs are int16-exact floats (as if read from a PCM16 WAV) and stored as int16. Outputs that
    went through pydub are int16-exact too: stored in full where resampling makes them differ from
    a numpy port by rounding (compared within one LSB), pinned by digest where the port must be
    bit-exact (24 kHz input).
    """
    g = Golden()

    def clone(meta: dict, ref, preprocess: bool = True, **arrays) -> None:
        stub = _StubModel()
        try:
            prompt = stub.create_voice_clone_prompt(ref, ref_text="Hello there", preprocess_prompt=preprocess)
            y = stub.audio_tokenizer.encoded[0, 0]
            meta = {**meta, "error": None, "ref_rms": prompt.ref_rms, "y": digest(pcm16(y) if preprocess else y)}
            out = {} if meta["rate"] == 24000 and preprocess else {"y": pcm16(y) if preprocess else y}
        except Exception as exc:  # the reference's own failure is part of the golden
            meta = {**meta, "error": f"{type(exc).__name__}: {exc}"}
            out = {}
        g.add({"fn": "clone", "preprocess": preprocess, **meta}, **arrays, **out)

    for rate, seconds, floor, level, preprocess in [
        (24000, 1.4, 0.003, 0.3, True), (24000, 1.1, 0.0032, 0.05, True), (24000, 0.8, 0.001, 3.0, True),
        (16000, 0.8, 0.002, 0.8, True), (44100, 0.4, 0.003, 0.02, True), (48000, 0.3, 0.0033, 0.4, True),
        (8000, 1.0, 0.003, 0.3, True), (24000, 0.4, 0.003, 0.05, False), (22050, 0.25, 0.001, 0.3, False),
    ]:
        pcm = pcm16(speech_like(rng, rate, seconds, floor, level))
        clone({"rate": rate, "input": "array"}, (torch.from_numpy(pcm_float(pcm)), rate), preprocess, pcm=pcm)
    # Stereo [2, T] array input.
    pcm = np.stack([pcm16(speech_like(rng, 24000, 0.8, 0.003)), pcm16(speech_like(rng, 24000, 0.8, 0.002, 0.1))])
    clone({"rate": 24000, "input": "array"}, (torch.from_numpy(pcm_float(pcm)), 24000), True, pcm=pcm)
    # A stereo 44.1 kHz PCM16 file, loaded by the reference's load_audio (soundfile).
    pcm = np.stack([pcm16(speech_like(rng, 44100, 0.35, 0.003)), pcm16(speech_like(rng, 44100, 0.35, 0.003))], axis=1)
    path = tmp / "stereo.wav"
    sf.write(path, pcm, 44100, subtype="PCM_16")
    clone({"rate": 44100, "input": "wav_pcm16"}, str(path), True, pcm=pcm)
    # Bad references: silent, 1 ms, shorter than one codec frame without preprocessing.
    clone({"rate": 24000, "input": "array", "kind": "silent"}, (torch.zeros(24000), 24000), True, pcm=np.zeros(24000, np.int16))
    for kind, n, preprocess in [("1ms", 24, True), ("short", 900, False)]:
        pcm = pcm16((rng.standard_normal(n) * 0.3).astype(np.float32))
        clone({"rate": 24000, "input": "array", "kind": kind}, (torch.from_numpy(pcm_float(pcm)), 24000), preprocess, pcm=pcm)

    # Output post-processing: decoded audio (one waveform or chunks) -> final audio, pinned by digest.
    # The "decoded" chunks are the 24 kHz clips stored above (arrays named in meta["chunks"]).
    for case in [
        (["c0_pcm"], None, True, 0.1, 0.1), (["c1_pcm"], 0.05, True, 0.1, 0.1), (["c2_pcm"], 0.2, True, 0.1, 0.1),
        (["c0_pcm"], None, False, 0.1, 0.1), (["c1_pcm", "c7_pcm", "c2_pcm"], None, True, 0.1, 0.1),
        (["c2_pcm", "c0_pcm"], 0.03, True, 0.05, 0.05), (["c7_pcm"], 0.07, False, 0.0, 0.0),
        (["c7_pcm"], None, False, 0.1, 0.1, 0.002),  # peak near 1e-4: still normalised (threshold 1e-6)
    ]:
        chunk_keys, ref_rms, postprocess, pad, fade = case[:5]
        scale = case[5] if len(case) > 5 else 1.0
        chunks = [g.arrays[k] for k in chunk_keys]
        n_chunks = len(chunks)
        stub = _StubModel([pcm_float(c) * np.float32(scale) for c in chunks])
        cfg = OmniVoiceGenerationConfig(postprocess_output=postprocess, pad_duration=pad, fade_duration=fade)
        tokens = [torch.full((8, 2), k) for k in range(n_chunks)] if n_chunks > 1 else torch.zeros(8, 2, dtype=torch.long)
        y = stub._decode_and_post_process(tokens, ref_rms, cfg)
        meta = {"fn": "post", "chunks": chunk_keys, "scale": scale, "ref_rms": ref_rms, "postprocess": postprocess, "pad": pad,
                "fade": fade, "y": digest(y), "y_sum": float(np.sum(y, dtype=np.float64)),
                "y_abs_max": float(np.abs(y).max()) if y.size else 0.0}
        g.add(meta)
    return g


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "golden", help="output folder")
    ap.add_argument("--seed", type=int, default=20240607)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(args.seed)
    build_resample(rng).save(args.out / "audio_resample.npz")
    build_silence(rng).save(args.out / "audio_silence.npz")
    build_utils(rng).save(args.out / "audio_utils.npz")
    with tempfile.TemporaryDirectory() as tmp:
        build_pipeline(rng, Path(tmp)).save(args.out / "audio_pipeline.npz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
