"""omnivoice.audio.resample against torchaudio.functional.resample (goldens from the reference venv)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from audio_golden import case_ids, golden
from omnivoice.audio.resample import resample, sinc_resample_kernel

GOLDEN = "audio_resample.npz"


@pytest.mark.parametrize("case", case_ids(GOLDEN))
def test_matches_torchaudio(case):
    g = golden(GOLDEN)
    meta = g.meta[case]
    x, want = g.array(case, "x"), g.array(case, "y")
    got = resample(x, meta["orig"], meta["new"])
    assert got.dtype == np.float32
    assert got.shape == want.shape, f"{meta}: length {got.shape} != torchaudio {want.shape}"
    err = float(np.abs(got - want).max()) if want.size else 0.0
    assert err <= 1e-6, f"{meta}: max |numpy - torchaudio| = {err:.3g}"


def test_rows_are_resampled_independently(rng):
    x = rng.standard_normal((3, 2, 1001)).astype(np.float32)
    got = resample(x, 24000, 16000)
    assert got.shape == (3, 2, 668)
    for i in range(3):
        for j in range(2):
            np.testing.assert_array_equal(got[i, j], resample(x[i, j], 24000, 16000))


def test_equal_rates_return_the_input(rng):
    x = rng.standard_normal(100).astype(np.float32)
    assert resample(x, 24000, 24000) is x


def test_empty_input_gives_empty_output():
    assert resample(np.zeros(0, np.float32), 24000, 16000).shape == (0,)
    assert resample(np.zeros((2, 0), np.float32), 8000, 24000).shape == (2, 0)


def test_kernel_rows_are_the_hann_windowed_sinc():
    # Independent check of the filter itself, in float64 from the formula in torchaudio's docs.
    kernel, width = sinc_resample_kernel(24000, 16000)
    orig, new, lw = 3, 2, 6
    base = min(orig, new) * 0.99
    assert width == int(np.ceil(lw * orig / base))
    idx = np.arange(-width, width + orig) / orig
    t = (-np.arange(new)[:, None] / new + idx[None, :]) * base
    t = np.clip(t, -lw, lw)
    window = np.cos(t * np.pi / lw / 2) ** 2
    want = np.where(t == 0, 1.0, np.sin(np.pi * t) / np.where(t == 0, 1, np.pi * t)) * window * base / orig
    np.testing.assert_allclose(kernel, want, atol=2e-7)


@pytest.mark.parametrize(
    "args, message",
    [
        ((24000.5, 16000), "integer"),
        ((0, 16000), "positive"),
        ((24000, -1), "positive"),
    ],
)
def test_bad_rates_are_rejected(args, message):
    with pytest.raises(ValueError, match=message):
        resample(np.zeros(10, np.float32), *args)


def test_integer_waveform_is_rejected():
    with pytest.raises(TypeError, match="floating point"):
        resample(np.zeros(10, np.int16), 24000, 16000)


def test_nearly_coprime_rates_fail_clearly():
    with pytest.raises(ValueError, match="kernel"):
        resample(np.zeros(10, np.float32), 48001, 24007)


def test_ten_seconds_is_fast(rng):
    x = rng.standard_normal(240000).astype(np.float32)
    resample(x[:1000], 24000, 16000)  # warm the kernel cache
    start = time.perf_counter()
    y = resample(x, 24000, 16000)
    elapsed = time.perf_counter() - start
    assert y.shape == (160000,)
    # Vectorised this takes a few ms; a per-sample Python loop would take seconds.
    assert elapsed < 0.5, f"resampling 10 s took {elapsed:.2f} s"
