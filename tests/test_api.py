"""The Python API on the tiny checkpoint: defaults, callbacks, streaming, voices, long text, model resolution."""

from __future__ import annotations

import numpy as np
import pytest

import omnivoice
from omnivoice.api import _check_pair, resolve_model
from omnivoice.codec.voice import VoicePrompt
from omnivoice.pipeline import Cancelled

from tests.golden_paths import GOLDEN


@pytest.fixture(scope="module")
def ov(tiny_gguf, backend_spec):
    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend=backend_spec) as ov:
        yield ov


def test_synthesize_with_defaults(ov):
    r = ov.synthesize("Hello world.")
    assert r.sample_rate == 24000 and r.audio.dtype == np.float32 and r.audio.ndim == 1
    assert len(r.tokens) == 1 and r.tokens[0].dtype == np.int32 and r.tokens[0].shape[0] == 8
    assert np.abs(r.audio).max() <= 0.5 + 1e-6


def test_seed_makes_sampling_reproducible(ov):
    a = ov.synthesize("Same seed.", seed=7, num_step=6)
    b = ov.synthesize("Same seed.", seed=7, num_step=6)
    c = ov.synthesize("Same seed.", seed=8, num_step=6)
    np.testing.assert_array_equal(a.tokens[0], b.tokens[0])
    assert not np.array_equal(a.tokens[0], c.tokens[0])


def test_progress_and_cancel(ov):
    seen = []
    ov.synthesize("Progress please.", num_step=5, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    calls = []

    def cancel():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        ov.synthesize("Stop me.", num_step=8, cancel=cancel)


def test_stream_yields_each_sentence(ov):
    pieces = list(ov.stream("One sentence. Two sentences! Three?", num_step=4, seed=1))
    assert len(pieces) == 3 and all(p.dtype == np.float32 and len(p) > 0 for p in pieces)


def test_voice_prompt_round_trip(ov, tmp_path):
    d = np.load(GOLDEN / "ref_clone.npz")
    voice = ov.create_voice((d["ref_wav_input"], 24000), "Hello world, this is me")
    path = tmp_path / "v.rvq"
    voice.save(path)
    back = VoicePrompt.load(path)
    np.testing.assert_array_equal(back.codes, voice.codes)
    assert back.text == voice.text == "Hello world, this is me."
    assert back.rms == pytest.approx(voice.rms, rel=1e-6)
    a = ov.synthesize("Cloned.", voice=voice, num_step=4, seed=3)
    b = ov.synthesize("Cloned.", voice=back, num_step=4, seed=3)
    np.testing.assert_array_equal(a.audio, b.audio)


def test_voice_errors(ov):
    with pytest.raises(ValueError, match="ref_audio"):
        ov.synthesize("x", ref_text="transcript only")
    with pytest.raises(ValueError, match="ref_text"):
        ov.create_voice((np.zeros(24000, np.float32), 24000), "")


def test_hundred_thousand_characters_are_chunked(ov):
    text = ("The quick brown fox jumps over the lazy dog. " * 2300)[:100_000]
    plans = ov.pipeline.plan(text, ov.settings(text=text), None)
    assert len(plans) > 100
    assert all(p.num_target_tokens <= 15 * 25 * 1.5 for p in plans)
    assert "".join(p.text.replace(" ", "") for p in plans) == text.replace(" ", "")


def test_empty_text_is_refused(ov):
    with pytest.raises(ValueError, match="empty"):
        ov.synthesize("   ")


def test_model_codec_pair_check(tmp_path):
    lm = {"omnivoice.num_audio_codebook": 8, "omnivoice.audio_vocab_size": 1025}
    _check_pair(lm, {"omnivoice.n_codebooks": 8, "omnivoice.codebook_size": 1024}, tmp_path, tmp_path)
    with pytest.raises(ValueError, match="do not belong together"):
        _check_pair(lm, {"omnivoice.n_codebooks": 4, "omnivoice.codebook_size": 1024}, tmp_path, tmp_path)


def test_resolve_model_errors(tmp_path, tiny_gguf):
    with pytest.raises(FileNotFoundError, match="not found"):
        resolve_model(str(tmp_path / "missing.gguf"))
    lonely = tmp_path / "lm.gguf"
    lonely.write_bytes(tiny_gguf["f32"].read_bytes()[:64])
    with pytest.raises(FileNotFoundError, match="codec"):
        resolve_model(str(lonely))


def test_checkpoint_directory_is_converted_once(tiny_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("OMNIVOICE_CACHE", str(tmp_path))
    lm, codec = resolve_model(str(tiny_checkpoint))
    assert lm.is_file() and codec.is_file() and tmp_path in lm.parents
    mtime = lm.stat().st_mtime_ns
    assert resolve_model(str(tiny_checkpoint))[0].stat().st_mtime_ns == mtime


def test_checkpoint_is_converted_to_the_backends_weight_type(tiny_checkpoint, tmp_path, monkeypatch, runtime):
    from omnivoice.api import default_quant

    monkeypatch.setenv("OMNIVOICE_CACHE", str(tmp_path))
    with omnivoice.OmniVoice(str(tiny_checkpoint), backend=runtime.device.spec) as ov:
        quant = default_quant(runtime.device.backend)
        assert ov.model_path.name == f"omnivoice-base-{quant.upper()}.gguf"
    assert (default_quant("CPU"), default_quant("CUDA"), default_quant("Vulkan")) == ("f32", "bf16", "f16")


def test_repo_id_that_cannot_be_had_is_a_clear_error(monkeypatch, tmp_path):
    from omnivoice.api import ModelNotAvailable

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelNotAvailable, match="nobody/no-such-omnivoice"):
        resolve_model("nobody/no-such-omnivoice")
