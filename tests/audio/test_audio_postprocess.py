"""The reference's audio utilities and its clip pre-/output post-processing, against the reference.

Goldens come from tools/reference/goldens.py audio: ``audio_utils.npz`` runs the functions of
omnivoice/utils/audio.py, ``audio_pipeline.npz`` runs ``OmniVoice.create_voice_clone_prompt`` and
``OmniVoice._decode_and_post_process`` themselves (on a stub whose codec records its input).
"""

from __future__ import annotations

import numpy as np
import pytest

from audio_golden import case_ids, digest, golden, pcm_float
from omnivoice.audio import postprocess as pp

UTILS = "audio_utils.npz"
PIPE = "audio_pipeline.npz"


# ---------------------------------------------------------------------------
# omnivoice/utils/audio.py
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", case_ids(UTILS, "remove_silence"))
def test_remove_silence_on_float_audio(case):
    g = golden(UTILS)
    m = g.meta[case]
    got = pp.remove_silence(g.array(case, "x"), m["rate"], mid_sil=m["mid"], lead_sil=m["lead"], trail_sil=m["trail"])
    want = g.array(case, "y")
    assert got.shape == want.shape, m
    np.testing.assert_array_equal(pp.to_pcm16(got), want)
    np.testing.assert_array_equal(got, pcm_float(want))


@pytest.mark.parametrize("case", case_ids(UTILS, "to_pcm16"))
def test_int16_quantisation(case):
    g = golden(UTILS)
    np.testing.assert_array_equal(pp.to_pcm16(g.array(case, "x")), g.array(case, "y"))


@pytest.mark.parametrize("case", case_ids(UTILS, "trim_long_audio"))
def test_trim_long_audio(case):
    g = golden(UTILS)
    m = g.meta[case]
    x = pcm_float(g.array(case, "pcm"))
    got = pp.trim_long_audio(x, m["rate"], trim_threshold=m["trim_threshold"])
    assert got.dtype == np.float32
    assert digest(got) == m["y"], f"{m}: {len(got)} samples vs {m['y']['n']}"


@pytest.mark.parametrize("case", case_ids(UTILS, "fade_and_pad"))
def test_fade_and_pad(case):
    g = golden(UTILS)
    m = g.meta[case]
    got = pp.fade_and_pad(g.array(case, "x"), pad_duration=m["pad"], fade_duration=m["fade"], sample_rate=m["rate"])
    want = g.array(case, "y")
    assert got.shape == want.shape, m
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", case_ids(UTILS, "cross_fade_chunks"))
def test_cross_fade_chunks(case):
    g = golden(UTILS)
    m = g.meta[case]
    chunks = [g.array(case, f"x{k}") for k in range(m["n_chunks"])]
    got = pp.cross_fade_chunks(chunks, m["rate"], silence_duration=m["silence_duration"])
    want = g.array(case, "y")
    assert got.shape == want.shape, m
    np.testing.assert_array_equal(got, want)


def test_cross_fade_does_not_modify_its_inputs(rng):
    chunks = [rng.standard_normal(3000).astype(np.float32) for _ in range(3)]
    copies = [c.copy() for c in chunks]
    pp.cross_fade_chunks(chunks, 24000)
    for c, k in zip(chunks, copies):
        np.testing.assert_array_equal(c, k)


def test_cross_fade_needs_a_chunk():
    with pytest.raises(ValueError, match="at least one chunk"):
        pp.cross_fade_chunks([], 24000)


def test_stereo_is_not_accepted_where_the_reference_is_mono():
    with pytest.raises(ValueError, match="mono"):
        pp.fade_and_pad(np.zeros((2, 100), np.float32))


# ---------------------------------------------------------------------------
# create_voice_clone_prompt: preprocess_reference
# ---------------------------------------------------------------------------


def _reference_input(g, case, m, tmp_path):
    """The clone case's input as our API takes it, plus how the reference got it."""
    if m["input"] == "wav_pcm16":
        import soundfile as sf

        from omnivoice.audio.io import load_audio

        path = tmp_path / "ref.wav"
        sf.write(path, g.array(case, "pcm"), m["rate"], subtype="PCM_16")
        return load_audio(path)
    return pcm_float(g.array(case, "pcm")), m["rate"]


@pytest.mark.parametrize("case", case_ids(PIPE, "clone"))
def test_preprocess_reference(case, tmp_path):
    g = golden(PIPE)
    m = g.meta[case]
    audio, rate = _reference_input(g, case, m, tmp_path)
    if m["error"] is not None or m["y"]["n"] == 0:
        # The reference either refuses (silent clip) or hands the encoder an empty clip; we refuse.
        with pytest.raises(ValueError, match="silence removal|shorter than one codec frame"):
            pp.preprocess_reference(audio, rate, preprocess=m["preprocess"])
        return
    got, ref_rms = pp.preprocess_reference(audio, rate, preprocess=m["preprocess"])
    assert got.dtype == np.float32 and got.ndim == 1
    assert got.shape[-1] == m["y"]["n"], f"{m}: {got.shape[-1]} samples vs reference {m['y']['n']}"
    assert got.shape[-1] % 960 == 0
    if m["rate"] == 24000:
        # No resampling: every step is the reference's own float32 arithmetic, bit for bit.
        assert ref_rms == m["ref_rms"]
        assert digest(pp.to_pcm16(got) if m["preprocess"] else got) == m["y"]
        return
    # Resampled: numpy's convolution sums in another order than torch (about 1e-7), so the rms may
    # differ in its last bits and an int16 truncation may land one step away.
    assert ref_rms == pytest.approx(m["ref_rms"], rel=1e-6)
    want = g.array(case, "y")
    if m["preprocess"]:
        diff = np.abs(pp.to_pcm16(got).astype(np.int32) - want.astype(np.int32))
        assert diff.max() <= 1, f"{m}: int16 samples differ by up to {diff.max()}"
        assert np.mean(diff) < 0.01
    else:
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_preprocess_reference_downmixes_channels_like_the_reference(rng):
    left = rng.uniform(-0.5, 0.5, 9600).astype(np.float32)
    right = rng.uniform(-0.5, 0.5, 9600).astype(np.float32)
    got, rms = pp.preprocess_reference(np.stack([left, right]), 24000, preprocess=False)
    mono = (left + right) / np.float32(2)
    np.testing.assert_array_equal(got, mono)
    assert rms == pytest.approx(float(np.sqrt(np.mean(mono.astype(np.float64) ** 2))), rel=1e-6)


def test_quiet_reference_is_raised_to_rms_point_one(rng):
    x = (rng.standard_normal(9600) * 0.01).astype(np.float32)
    got, rms = pp.preprocess_reference(x, 24000, preprocess=False)
    assert rms == pytest.approx(0.01, rel=0.05)
    assert float(np.sqrt(np.mean(got.astype(np.float64) ** 2))) == pytest.approx(0.1, rel=1e-5)


@pytest.mark.parametrize(
    "audio, rate, message",
    [
        (np.zeros(0, np.float32), 24000, "empty"),
        (np.zeros(24000, np.float32), 24000, "silence removal"),
        (np.full(24, 0.3, np.float32), 24000, "shorter than one codec frame"),
        (np.full(8, 0.3, np.float32), 8000, "shorter than one codec frame"),
        (np.array([0.1, np.nan] * 600, np.float32), 24000, "NaN"),
    ],
)
def test_bad_references_raise_clear_errors(audio, rate, message):
    with pytest.raises(ValueError, match=message):
        pp.preprocess_reference(audio, rate)


# ---------------------------------------------------------------------------
# _decode_and_post_process: postprocess_output
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", case_ids(PIPE, "post"))
def test_postprocess_output(case):
    g = golden(PIPE)
    m = g.meta[case]
    chunks = [pcm_float(g.arrays[k]) * np.float32(m["scale"]) for k in m["chunks"]]
    decoded = chunks if len(chunks) > 1 else chunks[0]
    got = pp.postprocess_output(
        decoded, 24000, m["ref_rms"], postprocess=m["postprocess"], pad_duration=m["pad"], fade_duration=m["fade"]
    )
    assert got.dtype == np.float32 and got.ndim == 1
    assert got.shape[-1] == m["y"]["n"], f"{m}: {got.shape[-1]} samples vs reference {m['y']['n']}"
    assert float(np.abs(got).max()) == pytest.approx(m["y_abs_max"], rel=1e-6)
    assert float(np.sum(got, dtype=np.float64)) == pytest.approx(m["y_sum"], rel=1e-5, abs=1e-6)
    assert digest(got) == m["y"], f"{m}: same length and sums, but not bit-identical"


def test_peak_normalisation_without_reference(rng):
    x = (rng.standard_normal(4800) * 0.05).astype(np.float32)
    y = pp.postprocess_output(x, 24000, None, postprocess=False, pad_duration=0, fade_duration=0)
    assert float(np.abs(y).max()) == pytest.approx(0.5, rel=1e-6)
    np.testing.assert_allclose(y, x / np.abs(x).max() * 0.5, rtol=1e-6)


def test_silent_output_is_not_amplified():
    y = pp.postprocess_output(np.zeros(4800, np.float32), 24000, None, postprocess=False)
    assert y.shape == (4800 + 2 * 2400,) and not y.any()


def test_loud_reference_leaves_volume_alone(rng):
    x = (rng.standard_normal(4800) * 0.05).astype(np.float32)
    y = pp.postprocess_output(x, 24000, 0.25, postprocess=False, pad_duration=0, fade_duration=0)
    np.testing.assert_array_equal(y, x)
