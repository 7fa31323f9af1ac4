"""Audio pre- and post-processing, ported exactly from the reference.

Mirrors ``omnivoice/utils/audio.py`` of the reference (PyPI ``omnivoice`` 0.2.1), the ``pydub``
routines it calls, and the numeric steps of ``OmniVoice.create_voice_clone_prompt`` and
``OmniVoice._post_process_audio``. Every function takes and returns mono audio as a 1-D float32
numpy array in [-1, 1] (the reference's ``(1, T)`` arrays without the channel axis).

Silence decisions are made on int16 samples exactly as pydub makes them, so the kept ranges match
the reference sample for sample:

- float -> int16 is ``(x * 32768.0).clip(-32768, 32767).astype(int16)`` in float32 (truncation
  toward zero), and the result comes back as ``int16 / 32768``: any step that goes through pydub
  quantises the whole waveform, silent or not.
- pydub addresses audio in milliseconds: a slice ``[a, b)`` ms covers samples
  ``int(a * (rate / 1000.0))`` to ``int(b * (rate / 1000.0))``, a segment's length is
  ``round(1000 * n / rate)`` ms (half to even), and a slice that runs past the data is padded with
  zeros up to its nominal length (only when it holds at least one sample). So trimming a segment
  ``[start:]`` can drop or add up to half a millisecond of samples at its end, as in the reference.
- loudness is ``audioop.rms``: ``floor(sqrt(sum(x*x) / n))`` on the (padded) slice; dBFS is
  ``20 * log(rms / 32768, 10)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Optional, Union

import numpy as np

from .io import as_mono, check_rate, check_samples
from .resample import resample

__all__ = [
    "to_pcm16",
    "from_pcm16",
    "segment_length_ms",
    "detect_silence",
    "detect_nonsilent",
    "split_on_silence",
    "detect_leading_silence",
    "remove_silence_edges",
    "remove_silence",
    "trim_long_audio",
    "fade_and_pad",
    "cross_fade_chunks",
    "peak_normalize",
    "audio_rms",
    "normalize_reference_rms",
    "match_reference_loudness",
    "clip_to_hop",
    "downmix",
    "preprocess_reference",
    "postprocess_output",
]

logger = logging.getLogger(__name__)

SAMPLING_RATE = 24000  # the model's rate: every reference step runs at it
HOP_LENGTH = 960  # codec samples per frame at 24 kHz
# The longest reference clip encoded as a voice prompt. The reference recommends 3-10 s and warns above 20 s
# (and trims to 20 s when it has no transcript); we refuse past 3 times that: the full-size codec's encode graph
# takes 52 MiB per second of audio (3.1 GiB at 60 s, 41 GiB at 10 minutes, measured with
# ggml_backend_sched_reserve_size), and every LM step reads the prompt again.
MAX_REFERENCE_SECONDS = 60.0
_PYDUB_SILENT_RATE = 11025  # AudioSegment.silent()'s default rate, the seed of remove_silence's concat

AudioChunks = Union[np.ndarray, Sequence[np.ndarray]]


# ---------------------------------------------------------------------------
# int16 conversion and pydub's millisecond arithmetic
# ---------------------------------------------------------------------------


def to_pcm16(audio: np.ndarray) -> np.ndarray:
    """Quantise float audio to int16 the way the reference feeds pydub (truncation toward zero)."""
    a = as_mono(audio)
    return (a * 32768.0).clip(-32768, 32767).astype(np.int16)


def from_pcm16(pcm: np.ndarray) -> np.ndarray:
    """Convert int16 samples back to float32 audio (``x / 32768``), as the reference does."""
    return np.asarray(pcm, dtype=np.int16).astype(np.float32) / 32768.0


def segment_length_ms(n_samples: int, sample_rate: int) -> int:
    """Length in milliseconds that pydub reports for ``n_samples`` at ``sample_rate``."""
    return round(1000 * (float(n_samples) / sample_rate))


def _ms_to_sample(ms, rate: int):
    """pydub's ``int(ms * (rate / 1000.0))`` for a scalar or an integer array."""
    if isinstance(ms, np.ndarray):
        return np.floor(ms.astype(np.float64) * (rate / 1000.0)).astype(np.int64)
    return int(ms * (rate / 1000.0))


def _slice(pcm: np.ndarray, rate: int, start_ms: int, end_ms: Optional[int] = None) -> np.ndarray:
    """``AudioSegment[start_ms:end_ms]`` for non-negative millisecond bounds."""
    length = segment_length_ms(len(pcm), rate)
    end_ms = length if end_ms is None else end_ms
    start = _ms_to_sample(min(start_ms, length), rate)
    end = _ms_to_sample(min(end_ms, length), rate)
    data = pcm[start:end]
    missing = (end - start) - len(data)
    if missing > 0 and len(data) > 0:
        # pydub pads at most a rounding error; anything more is a bug it also refuses.
        if missing > rate * 2 / 1000.0:
            raise RuntimeError(f"slice [{start_ms}, {end_ms}) ms is missing {missing} samples")
        data = np.concatenate([data, np.zeros(missing, dtype=np.int16)])
    return data


def _window_rms(pcm: np.ndarray, rate: int, starts_ms: np.ndarray, lengths_ms) -> np.ndarray:
    """``audioop.rms`` of ``AudioSegment[s:s+len]`` for many slices at once.

    Every slice must satisfy ``s <= s + len <= segment length``; ``lengths_ms`` is a scalar or an
    array aligned with ``starts_ms``.
    """
    n = len(pcm)
    if len(starts_ms) == 0:
        return np.zeros(0, dtype=np.int64)
    ends_ms = starts_ms + lengths_ms
    start = _ms_to_sample(starts_ms, rate)
    end = _ms_to_sample(np.asarray(ends_ms, dtype=np.int64), rate)
    lo = np.minimum(start, n)
    hi = np.maximum(np.minimum(end, n), lo)
    # Sums of squares between the windows' bounds, not a running sum over every sample: numpy's int64 cumsum
    # is sequential where reduceat adds each stretch vectorized (several times faster for a 5 s clip); integer
    # sums, so the result is the same to the bit.
    bounds = np.concatenate([lo, hi])
    order = np.argsort(bounds, kind="stable")
    sorted_bounds = bounds[order]
    sq = np.zeros(n + 1, dtype=np.int32)  # one zero past the end: a bound may equal n; 32768**2 fits int32
    np.multiply(pcm, pcm, out=sq[:n], dtype=np.int32)
    stretch = np.add.reduceat(sq, sorted_bounds, dtype=np.int64)
    stretch[:-1][sorted_bounds[:-1] == sorted_bounds[1:]] = 0  # reduceat gives sq[i] for an empty stretch
    below = np.empty(len(bounds), dtype=np.int64)  # sum of squares before each bound, less a common offset
    below[order] = np.concatenate([[0], np.cumsum(stretch[:-1])])
    sum_sq = below[len(lo):] - below[:len(lo)]
    has_data = hi > lo
    # A slice with data is zero-padded to its nominal length, and the padding counts in the mean.
    count = np.where(has_data, np.maximum(end - start, 1), 1)
    with np.errstate(invalid="ignore"):
        rms = np.floor(np.sqrt(sum_sq.astype(np.float64) / count.astype(np.float64)))
    return np.where(has_data, rms, 0).astype(np.int64)


@lru_cache(maxsize=64)
def _quiet_rms_limit(silence_threshold: float) -> int:
    """Number of integer rms values whose pydub dBFS is below ``silence_threshold``.

    pydub compares ``20 * log(rms / 32768, 10) < threshold`` in Python floats; rms is an integer
    in [0, 32768] and the comparison is monotonic, so this count turns it into ``rms < limit``
    with the very same float arithmetic.
    """
    limit = 1  # rms 0 is -inf dBFS: always quiet (unless the threshold is -inf itself)
    if not (-float("inf") < silence_threshold):
        return 0
    for r in range(1, 32769):
        if 20 * math.log(r / 32768.0, 10) < silence_threshold:
            limit = r + 1
        else:
            break
    return limit


# ---------------------------------------------------------------------------
# pydub.silence
# ---------------------------------------------------------------------------


def detect_silence(
    pcm: np.ndarray,
    sample_rate: int,
    min_silence_len: int = 1000,
    silence_thresh: float = -16,
    seek_step: int = 1,
) -> list[list[int]]:
    """``pydub.silence.detect_silence`` on int16 samples: silent ``[start, end]`` ranges in ms."""
    pcm = np.asarray(pcm, dtype=np.int16)
    rate = check_rate(sample_rate)
    if seek_step <= 0:
        raise ValueError(f"seek_step must be positive, got {seek_step}")
    seg_len = segment_length_ms(len(pcm), rate)
    if seg_len < min_silence_len:
        return []
    thresh = (10 ** (float(silence_thresh) / 20)) * 32768.0
    last_slice_start = seg_len - min_silence_len
    starts_arr = np.arange(0, last_slice_start + 1, seek_step, dtype=np.int64)
    if last_slice_start % seek_step:
        starts_arr = np.append(starts_arr, last_slice_start)
    rms = _window_rms(pcm, rate, starts_arr, min_silence_len)
    silence_starts = starts_arr[rms <= thresh].tolist()
    if not silence_starts:
        return []

    silent_ranges = []
    prev_i = silence_starts.pop(0)
    current_range_start = prev_i
    for silence_start_i in silence_starts:
        continuous = silence_start_i == prev_i + seek_step
        silence_has_gap = silence_start_i > (prev_i + min_silence_len)
        if not continuous and silence_has_gap:
            silent_ranges.append([current_range_start, prev_i + min_silence_len])
            current_range_start = silence_start_i
        prev_i = silence_start_i
    silent_ranges.append([current_range_start, prev_i + min_silence_len])
    return silent_ranges


def detect_nonsilent(
    pcm: np.ndarray,
    sample_rate: int,
    min_silence_len: int = 1000,
    silence_thresh: float = -16,
    seek_step: int = 1,
) -> list[list[int]]:
    """``pydub.silence.detect_nonsilent`` on int16 samples: non-silent ``[start, end]`` ms ranges."""
    silent_ranges = detect_silence(pcm, sample_rate, min_silence_len, silence_thresh, seek_step)
    len_seg = segment_length_ms(len(pcm), sample_rate)
    if not silent_ranges:
        return [[0, len_seg]]
    if silent_ranges[0][0] == 0 and silent_ranges[0][1] == len_seg:
        return []
    prev_end_i = 0
    nonsilent_ranges = []
    end_i = 0
    for start_i, end_i in silent_ranges:
        nonsilent_ranges.append([prev_end_i, start_i])
        prev_end_i = end_i
    if end_i != len_seg:
        nonsilent_ranges.append([prev_end_i, len_seg])
    if nonsilent_ranges[0] == [0, 0]:
        nonsilent_ranges.pop(0)
    return nonsilent_ranges


def split_on_silence(
    pcm: np.ndarray,
    sample_rate: int,
    min_silence_len: int = 1000,
    silence_thresh: float = -16,
    keep_silence: Union[int, bool] = 100,
    seek_step: int = 1,
) -> list[np.ndarray]:
    """``pydub.silence.split_on_silence`` on int16 samples: the kept int16 pieces, in order.

    Each non-silent range is widened by ``keep_silence`` ms on both sides; where two widened
    ranges overlap they meet at the midpoint (integer ms), as pydub does.
    """
    pcm = np.asarray(pcm, dtype=np.int16)
    rate = check_rate(sample_rate)
    seg_len = segment_length_ms(len(pcm), rate)
    if isinstance(keep_silence, bool):
        keep_silence = seg_len if keep_silence else 0
    output_ranges = [
        [start - keep_silence, end + keep_silence]
        for start, end in detect_nonsilent(pcm, rate, min_silence_len, silence_thresh, seek_step)
    ]
    for range_i, range_ii in zip(output_ranges, output_ranges[1:]):
        last_end = range_i[1]
        next_start = range_ii[0]
        if next_start < last_end:
            range_i[1] = (last_end + next_start) // 2
            range_ii[0] = range_i[1]
    return [_slice(pcm, rate, max(start, 0), min(end, seg_len)) for start, end in output_ranges]


def detect_leading_silence(
    pcm: np.ndarray, sample_rate: int, silence_threshold: float = -50.0, chunk_size: int = 10
) -> int:
    """``pydub.silence.detect_leading_silence``: ms where the leading silence ends.

    Walks ``chunk_size`` ms chunks from the start while their dBFS is below the threshold.
    """
    pcm = np.asarray(pcm, dtype=np.int16)
    rate = check_rate(sample_rate)
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    length = segment_length_ms(len(pcm), rate)
    if length == 0:
        return 0
    starts = np.arange(0, length, chunk_size, dtype=np.int64)
    lengths = np.minimum(starts + chunk_size, length) - starts
    limit = _quiet_rms_limit(float(silence_threshold))
    # Chunks in blocks that double, each over the samples up to its last chunk's end only: a leading silence
    # is short, and squaring the whole clip twice per clip would cost more than the search. The windows of
    # a block end no later than its last one, so the shorter array clips none of them differently.
    first, block = 0, 32
    while first < len(starts):
        s, n = starts[first:first + block], lengths[first:first + block]
        end = _ms_to_sample(int(s[-1] + n[-1]), rate)
        loud = np.nonzero(_window_rms(pcm[:end], rate, s, n) >= limit)[0]
        if len(loud):
            return min(int(s[loud[0]]), length)
        first, block = first + block, block * 2
    return length


def remove_silence_edges(
    pcm: np.ndarray,
    sample_rate: int,
    lead_sil: int = 100,
    trail_sil: int = 300,
    silence_threshold: float = -50,
) -> np.ndarray:
    """The reference's ``remove_silence_edges`` on int16: trim edge silence, keeping some ms of it."""
    pcm = np.asarray(pcm, dtype=np.int16)
    rate = check_rate(sample_rate)
    start_idx = detect_leading_silence(pcm, rate, silence_threshold=silence_threshold)
    start_idx = max(0, start_idx - lead_sil)
    pcm = _slice(pcm, rate, start_idx)
    pcm = pcm[::-1]
    start_idx = detect_leading_silence(pcm, rate, silence_threshold=silence_threshold)
    start_idx = max(0, start_idx - trail_sil)
    pcm = _slice(pcm, rate, start_idx)
    return np.ascontiguousarray(pcm[::-1])


# ---------------------------------------------------------------------------
# omnivoice/utils/audio.py
# ---------------------------------------------------------------------------


def remove_silence(
    audio: np.ndarray,
    sample_rate: int,
    mid_sil: int = 300,
    lead_sil: int = 100,
    trail_sil: int = 300,
) -> np.ndarray:
    """Shorten inner silences longer than ``mid_sil`` ms to ``mid_sil`` ms and trim the edges.

    Exact port of the reference's ``remove_silence`` (pydub ``split_on_silence`` with a -50 dBFS
    threshold and 10 ms seek step, then ``remove_silence_edges`` keeping ``lead_sil`` /
    ``trail_sil`` ms). ``mid_sil=0`` skips the inner pass. The output is int16-quantised.

    Rates below 11025 Hz are refused when ``mid_sil > 0``: there the reference's concatenation
    silently resamples through ``audioop.ratecv``, which this port does not reproduce.
    """
    rate = check_rate(sample_rate)
    pcm = to_pcm16(audio)
    if mid_sil > 0:
        if rate < _PYDUB_SILENT_RATE:
            raise ValueError(
                f"remove_silence needs sample_rate >= {_PYDUB_SILENT_RATE} Hz when mid_sil > 0, got {rate}"
            )
        pieces = split_on_silence(
            pcm, rate, min_silence_len=mid_sil, silence_thresh=-50, keep_silence=mid_sil, seek_step=10
        )
        pcm = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int16)
    pcm = remove_silence_edges(pcm, rate, lead_sil, trail_sil, -50)
    return from_pcm16(pcm)


def trim_long_audio(
    audio: np.ndarray,
    sample_rate: int,
    max_duration: float = 15.0,
    min_duration: float = 3.0,
    trim_threshold: float = 20.0,
) -> np.ndarray:
    """Cut audio longer than ``trim_threshold`` s at a silence gap, to at most ``max_duration`` s.

    Exact port of the reference's ``trim_long_audio``: the split point is the latest start of a
    non-silent range (pydub, 100 ms / -40 dBFS / 10 ms step) not after ``max_duration``; if that
    is before ``min_duration`` the audio is cut at ``max_duration``. Audio that is not trimmed is
    returned unchanged (not quantised); trimmed audio is int16-quantised.
    """
    a = as_mono(audio)
    rate = check_rate(sample_rate)
    duration = a.shape[-1] / rate
    if duration <= trim_threshold:
        return a
    pcm = to_pcm16(a)
    nonsilent = detect_nonsilent(pcm, rate, min_silence_len=100, silence_thresh=-40, seek_step=10)
    if not nonsilent:
        return a
    max_ms = int(max_duration * 1000)
    min_ms = int(min_duration * 1000)
    best_split = 0
    for start, end in nonsilent:
        if start > best_split and start <= max_ms:
            best_split = start
        if end > max_ms:
            break
    if best_split < min_ms:
        best_split = min(max_ms, segment_length_ms(len(pcm), rate))
    return from_pcm16(_slice(pcm, rate, 0, best_split))


def fade_and_pad(
    audio: np.ndarray,
    pad_duration: float = 0.1,
    fade_duration: float = 0.1,
    sample_rate: int = SAMPLING_RATE,
) -> np.ndarray:
    """Linear fade-in/out over ``fade_duration`` s (at most half the clip each), then pad
    ``pad_duration`` s of zeros on both sides. Port of the reference's ``fade_and_pad_audio``."""
    a = as_mono(audio)
    if a.shape[-1] == 0:
        return a
    fade_samples = int(fade_duration * sample_rate)
    pad_samples = int(pad_duration * sample_rate)
    processed = a.copy()
    if fade_samples > 0:
        k = min(fade_samples, processed.shape[-1] // 2)
        if k > 0:
            processed[:k] *= np.linspace(0, 1, k, dtype=np.float32)
            processed[-k:] *= np.linspace(1, 0, k, dtype=np.float32)
    if pad_samples > 0:
        silence = np.zeros(pad_samples, dtype=processed.dtype)
        processed = np.concatenate([silence, processed, silence])
    return processed


def cross_fade_chunks(
    chunks: Sequence[np.ndarray], sample_rate: int, silence_duration: float = 0.3
) -> np.ndarray:
    """Join chunks with a gap: fade the tail out, insert silence, fade the next head in.

    Port of the reference's ``cross_fade_chunks``: with ``n = int(silence_duration * rate) // 3``,
    each junction fades the last ``n`` samples out, inserts ``n`` zeros, and fades the first ``n``
    samples of the next chunk in (each fade shortened to its chunk's length). One chunk is returned
    as is.
    """
    if len(chunks) == 0:
        raise ValueError("cross_fade_chunks needs at least one chunk, got none")
    chunks = [as_mono(c, f"chunk {i}") for i, c in enumerate(chunks)]
    if len(chunks) == 1:
        return chunks[0]
    total_n = int(silence_duration * sample_rate)
    fade_n = total_n // 3
    silence_n = fade_n
    merged = chunks[0].copy()
    for chunk in chunks[1:]:
        fout_n = min(fade_n, merged.shape[-1])
        if fout_n > 0:
            merged[-fout_n:] *= np.linspace(1, 0, fout_n, dtype=np.float32)
        fade_in = chunk.copy()
        fin_n = min(fade_n, fade_in.shape[-1])
        if fin_n > 0:
            fade_in[:fin_n] *= np.linspace(0, 1, fin_n, dtype=np.float32)
        merged = np.concatenate([merged, np.zeros(silence_n, dtype=np.float32), fade_in])
    return merged


# ---------------------------------------------------------------------------
# The numeric steps of OmniVoice.create_voice_clone_prompt / _post_process_audio
# ---------------------------------------------------------------------------


def peak_normalize(audio: np.ndarray, peak_target: float = 0.5) -> np.ndarray:
    """Scale so the peak is ``peak_target`` (no-op when the peak is <= 1e-6); the reference's
    volume step when there is no reference clip. Empty audio is returned as is (the reference
    would fail on it taking the max of nothing)."""
    a = as_mono(audio)
    if a.shape[-1] == 0:
        return a
    peak = np.abs(a).max()
    if peak > 1e-6:
        a = a / peak * peak_target
    return a


def audio_rms(audio: np.ndarray) -> float:
    """RMS as the reference computes ``ref_rms``: float32 ``sqrt(mean(x**2))`` as a Python float."""
    a = as_mono(audio)
    if a.shape[-1] == 0:
        raise ValueError("cannot take the RMS of empty audio")
    return float(np.sqrt(np.mean(a**2)))


def normalize_reference_rms(audio: np.ndarray, ref_rms: float) -> np.ndarray:
    """Raise a quiet reference clip (0 < rms < 0.1) to rms 0.1; others are returned unchanged."""
    a = as_mono(audio)
    if 0 < ref_rms < 0.1:
        a = a * 0.1 / ref_rms
    return a


def match_reference_loudness(audio: np.ndarray, ref_rms: Optional[float]) -> np.ndarray:
    """The reference's output volume step: scale by ``ref_rms / 0.1`` when the reference clip was
    quiet (ref_rms < 0.1), leave it when it was loud, and peak-normalise to 0.5 without one."""
    a = as_mono(audio)
    if ref_rms is not None and ref_rms < 0.1:
        return a * ref_rms / 0.1
    if ref_rms is None:
        return peak_normalize(a, 0.5)
    return a


def clip_to_hop(audio: np.ndarray, hop_length: int = HOP_LENGTH) -> np.ndarray:
    """Drop trailing samples so the length is a multiple of ``hop_length`` (the codec frame)."""
    a = as_mono(audio)
    clip_size = int(a.shape[-1] % hop_length)
    return a[:-clip_size] if clip_size > 0 else a


def downmix(audio: np.ndarray) -> np.ndarray:
    """Average channels ``[channels, samples]`` into mono float32, as the reference does; 1-D
    input is returned as float32."""
    a = np.asarray(audio)
    if not np.issubdtype(a.dtype, np.floating):
        raise TypeError(f"audio must be floating point in [-1, 1]; got dtype {a.dtype}")
    a = a.astype(np.float32, copy=False)
    if a.ndim == 1:
        return a
    if a.ndim != 2:
        raise ValueError(f"audio must have shape [samples] or [channels, samples]; got shape {a.shape}")
    if a.shape[0] > 1:
        return np.mean(a, axis=0)
    return a[0]


def preprocess_reference(
    audio: np.ndarray,
    sample_rate: int,
    *,
    preprocess: bool = True,
    trim_long: bool = False,
    target_rate: int = SAMPLING_RATE,
    hop_length: int = HOP_LENGTH,
) -> tuple[np.ndarray, float]:
    """Prepare a voice-cloning reference clip as ``create_voice_clone_prompt`` does.

    Steps, in the reference's order: downmix ``[channels, samples]`` to mono; resample to
    ``target_rate`` (torchaudio's filter); ``ref_rms`` = RMS of that; raise a quiet clip
    (0 < rms < 0.1) to rms 0.1; if ``preprocess``: optionally ``trim_long_audio`` (the reference
    does this only when no transcript is given, i.e. before running ASR), then ``remove_silence``
    with mid 200 / lead 100 / trail 200 ms; finally drop samples to a multiple of ``hop_length``.

    Returns ``(audio, ref_rms)``: float32 mono at ``target_rate`` ready for the codec encoder, and
    the RMS measured before any gain or trimming (what the output loudness step needs).

    Raises ValueError when the clip is empty, longer than ``MAX_REFERENCE_SECONDS``, silent (nothing
    left after silence removal) or shorter than one codec frame; the reference would fail later,
    inside the encoder (or, for a long clip, run out of memory there).
    """
    a = downmix(audio)
    rate = check_rate(sample_rate)
    if a.shape[-1] == 0:
        raise ValueError("reference audio is empty (0 samples)")
    if a.shape[-1] / rate > MAX_REFERENCE_SECONDS:  # before resampling: a header saying 8 Hz makes hours of it
        raise ValueError(f"reference audio is {a.shape[-1] / rate:.1f} s long ({a.shape[-1]} samples at {rate} Hz); "
                         f"a voice prompt takes at most {MAX_REFERENCE_SECONDS:g} s (3-10 s recommended)")
    check_samples(a, "reference audio")
    if rate != target_rate:
        a = resample(a, rate, target_rate)
    ref_rms = audio_rms(a)
    a = normalize_reference_rms(a, ref_rms)
    if preprocess:
        if trim_long:
            a = trim_long_audio(a, target_rate, trim_threshold=20.0)
        a = remove_silence(a, target_rate, mid_sil=200, lead_sil=100, trail_sil=200)
        if a.shape[-1] == 0:
            raise ValueError(
                "reference audio is empty after silence removal (is it silent?); "
                "try preprocess_prompt=False"
            )
    duration = a.shape[-1] / target_rate
    if duration > 20.0:
        logger.warning(
            "Reference audio is %.1fs long (>20s). This may cause slower generation, higher memory "
            "usage, and degraded voice cloning quality. We recommend trimming it to 3-10s.",
            duration,
        )
    a = clip_to_hop(a, hop_length)
    if a.shape[-1] == 0:
        raise ValueError(
            f"reference audio is shorter than one codec frame ({hop_length} samples = "
            f"{1000 * hop_length / target_rate:g} ms at {target_rate} Hz)"
        )
    return a, ref_rms


def postprocess_output(
    audio: AudioChunks,
    sample_rate: int,
    ref_rms: Optional[float],
    *,
    postprocess: bool = True,
    pad_duration: float = 0.1,
    fade_duration: float = 0.1,
    cross_fade_duration: float = 0.3,
) -> np.ndarray:
    """Turn decoded audio into the final output, as ``_decode_and_post_process`` does.

    ``audio`` is the decoded waveform, or a list of decoded chunks (long form), which are first
    joined with ``cross_fade_chunks``. Then: if ``postprocess``, ``remove_silence`` with mid 500 /
    lead 100 / trail 100 ms; the loudness step (``ref_rms`` from ``preprocess_reference``, or None
    without a reference clip); ``fade_and_pad``.
    """
    rate = check_rate(sample_rate)
    if isinstance(audio, np.ndarray):
        waveform = as_mono(audio)
    else:
        waveform = cross_fade_chunks(list(audio), rate, cross_fade_duration)
    if postprocess:
        waveform = remove_silence(waveform, rate, mid_sil=500, lead_sil=100, trail_sil=100)
    waveform = match_reference_loudness(waveform, ref_rms)
    return fade_and_pad(waveform, pad_duration=pad_duration, fade_duration=fade_duration, sample_rate=rate)
