"""pydub-level silence decisions on int16 against pydub itself (goldens from the reference venv).

Every golden signal is checked with detect_silence / detect_nonsilent over several thresholds,
window lengths and seek steps, split_on_silence with several keep_silence values,
detect_leading_silence from both ends, the reference's remove_silence_edges, and the reference's
remove_silence, at rates from 8 kHz to 48 kHz and lengths that are rarely whole milliseconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from audio_golden import case_ids, digest, golden, pcm_float
from omnivoice.audio import postprocess as pp

GOLDEN = "audio_silence.npz"
IDS = case_ids(GOLDEN)


def _case(case):
    g = golden(GOLDEN)
    meta = g.meta[case]
    return g.array(case, "pcm"), meta["rate"], meta["results"], meta


@pytest.mark.parametrize("case", IDS)
def test_segment_length(case):
    pcm, rate, want, meta = _case(case)
    assert pp.segment_length_ms(len(pcm), rate) == want["len_ms"]


@pytest.mark.parametrize("case", IDS)
def test_detect_silence_and_nonsilent(case):
    pcm, rate, want, meta = _case(case)
    for key, expected in want.items():
        kind, _, params = key.partition("_")
        if kind not in ("silence", "nonsilent"):
            continue
        msl, thresh, step = (int(v) for v in params.split("_"))
        fn = pp.detect_silence if kind == "silence" else pp.detect_nonsilent
        got = fn(pcm, rate, min_silence_len=msl, silence_thresh=thresh, seek_step=step)
        assert got == expected, f"{meta.get('kind')} @ {rate} Hz, {key}"


@pytest.mark.parametrize("case", IDS)
def test_split_on_silence(case):
    pcm, rate, want, meta = _case(case)
    for key, expected in want.items():
        if not key.startswith("split_"):
            continue
        _, msl, keep = key.split("_")
        keep = {"True": True, "False": False}[keep] if keep in ("True", "False") else int(keep)
        pieces = pp.split_on_silence(pcm, rate, min_silence_len=int(msl), silence_thresh=-50, keep_silence=keep, seek_step=10)
        assert [len(p) for p in pieces] == expected["lengths"], f"{meta.get('kind')} @ {rate} Hz, {key}"
        joined = np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
        assert digest(joined) == {"sha256": expected["sha256"], "n": expected["n"]}, key


@pytest.mark.parametrize("case", IDS)
def test_leading_and_trailing_silence(case):
    pcm, rate, want, meta = _case(case)
    for key, expected in want.items():
        side, _, thresh = key.partition("_")
        if side not in ("leading", "trailing"):
            continue
        signal = pcm if side == "leading" else pcm[::-1]
        got = pp.detect_leading_silence(signal, rate, silence_threshold=float(thresh))
        assert got == expected, f"{meta.get('kind')} @ {rate} Hz, {key}"


@pytest.mark.parametrize("case", IDS)
def test_remove_silence_edges(case):
    pcm, rate, want, meta = _case(case)
    for key, expected in want.items():
        if not key.startswith("edges_"):
            continue
        _, lead, trail = key.split("_")
        got = pp.remove_silence_edges(pcm, rate, int(lead), int(trail), -50)
        assert got.dtype == np.int16
        assert digest(got) == expected, f"{meta.get('kind')} @ {rate} Hz, {key}: {len(got)} vs {expected['n']} samples"


@pytest.mark.parametrize("case", IDS)
def test_remove_silence(case):
    pcm, rate, want, meta = _case(case)
    checked = 0
    for key, expected in want.items():
        if not key.startswith("remove_"):
            continue
        _, mid, lead, trail = key.split("_")
        got = pp.remove_silence(pcm_float(pcm), rate, mid_sil=int(mid), lead_sil=int(lead), trail_sil=int(trail))
        assert got.dtype == np.float32
        assert digest(pp.to_pcm16(got)) == expected, f"{meta.get('kind')} @ {rate} Hz, {key}: {len(got)} vs {expected['n']}"
        checked += 1
    if rate >= 11025:
        assert checked > 0


def test_remove_silence_refuses_low_rates_with_inner_pass():
    with pytest.raises(ValueError, match="11025"):
        pp.remove_silence(np.zeros(8000, np.float32), 8000, mid_sil=200)
    # Without the inner pass the rate does not matter. All-silent audio keeps lead_sil ms of it:
    # the leading silence ends at the end, minus 100 ms kept; the trailing pass keeps all of that.
    assert pp.remove_silence(np.zeros(8000, np.float32), 8000, mid_sil=0, lead_sil=100).shape == (800,)


def test_remove_silence_keeps_loud_audio_whole_but_quantised(rng):
    # Loud noise has no silence: the output is the input, truncated to int16 steps.
    x = (rng.uniform(-0.9, 0.9, 24000)).astype(np.float32)
    y = pp.remove_silence(x, 24000, mid_sil=200, lead_sil=100, trail_sil=200)
    np.testing.assert_array_equal(y, np.trunc(x.astype(np.float64) * 32768).astype(np.float32) / 32768)
