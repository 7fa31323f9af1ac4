"""A deterministic, speech-like reference clip for voice-cloning runs (numpy only).

Imported by run_reference.py inside the reference venv and usable from our own environment, so both sides
can rebuild the exact same samples. The clip is a sequence of voiced "syllables" (a glottal-like harmonic
series with a wandering pitch, shaped by three formant resonances that move per syllable, under an
attack/decay envelope) separated by short gaps and one long pause, so the reference's silence trimming and
the codec's HuBERT/DAC encoders all see something resembling speech rather than a pure tone.
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 24000
TRANSCRIPT = "Hello world. This is a short synthetic reference clip"

# (F1, F2, F3) in Hz of a few vowel-like sounds
_FORMANTS = np.array([
    [730, 1090, 2440], [270, 2290, 3010], [300, 870, 2240], [530, 1840, 2480],
    [660, 1720, 2410], [570, 840, 2410], [440, 1020, 2240], [390, 1990, 2550],
], dtype=np.float64)


def _syllable(rng: np.random.Generator, n: int, sr: int) -> np.ndarray:
    t = np.arange(n) / sr
    f0 = rng.uniform(105.0, 175.0) * (1.0 + 0.08 * np.sin(2 * np.pi * rng.uniform(2.0, 5.0) * t)
                                      + rng.uniform(-0.12, 0.12) * t / max(t[-1], 1e-9))
    phase = 2 * np.pi * np.cumsum(f0) / sr
    formants = _FORMANTS[rng.integers(len(_FORMANTS))] * rng.uniform(0.92, 1.08, 3)
    bandwidths = np.array([90.0, 120.0, 180.0])
    out = np.zeros(n)
    for h in range(1, 40):
        fh = h * f0.mean()
        if fh > 0.45 * sr:
            break
        # resonance gain of each formant at this harmonic, plus a -6 dB/octave source tilt
        gain = sum(1.0 / (1.0 + ((fh - f) / bw) ** 2) for f, bw in zip(formants, bandwidths))
        out += (gain + 0.02) / h * np.sin(h * phase)
    attack, decay = int(0.03 * sr), int(0.08 * sr)
    env = np.ones(n)
    env[:attack] = 0.5 - 0.5 * np.cos(np.pi * np.arange(attack) / attack)
    env[-decay:] = 0.5 + 0.5 * np.cos(np.pi * np.arange(decay) / decay)
    return out * env


def synth_clip(seed: int = 0, duration: float = 2.4, sr: int = SAMPLE_RATE) -> np.ndarray:
    """A float32 mono clip of ``duration`` seconds at ``sr`` Hz, peak 0.5, deterministic from ``seed``.

    Values are 16-bit PCM levels (k / 32768), so a 16-bit wav holds the clip exactly.
    """
    rng = np.random.default_rng(seed)
    total = int(round(duration * sr))
    pieces: list[np.ndarray] = [np.zeros(int(0.12 * sr))]
    used = pieces[0].size
    n_syll = 0
    while used < total - int(0.2 * sr):
        n = int(rng.uniform(0.14, 0.28) * sr)
        pieces.append(_syllable(rng, n, sr))
        n_syll += 1
        # one long pause (longer than the 200 ms the reference squeezes), otherwise short gaps
        gap = 0.32 if n_syll == 4 else rng.uniform(0.03, 0.08)
        pieces.append(np.zeros(int(gap * sr)))
        used += n + int(gap * sr)
    clip = np.concatenate(pieces)[:total]
    clip = np.pad(clip, (0, total - clip.size))
    # a faint noise floor, well under the -50 dBFS silence threshold
    clip = clip / np.abs(clip).max() * 0.5 + 1e-4 * rng.standard_normal(total)
    return (np.round(clip * 32768.0) / 32768.0).astype(np.float32)


if __name__ == "__main__":
    import argparse

    import soundfile as sf

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True, help="the clip as a 16-bit WAV (the bench's cloning reference)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=2.4, help="seconds (default 2.4, tools/bench.py's)")
    args = ap.parse_args()
    sf.write(args.out, synth_clip(seed=args.seed, duration=args.duration), SAMPLE_RATE, subtype="PCM_16")
    print(f"{args.out}: {args.duration:g} s, seed {args.seed}; transcript: {TRANSCRIPT!r}")
