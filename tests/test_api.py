"""The Python API on the tiny checkpoint: defaults, callbacks, streaming, voices, long text, model resolution."""

from __future__ import annotations

import numpy as np
import pytest

import omnivoice
from omnivoice.api import _check_pair
from omnivoice.resolve import resolve_model
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

    def cancel():  # True from the second poll: the host polls before each step, the device path around its run
        calls.append(1)
        return len(calls) > 1

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
    from omnivoice.nn import amx, int8
    from omnivoice.resolve import default_quant

    monkeypatch.setenv("OMNIVOICE_CACHE", str(tmp_path))
    with omnivoice.OmniVoice(str(tiny_checkpoint), backend=runtime.device.spec) as ov:
        quant = default_quant(runtime.device.backend)
        assert ov.model_path.name == f"omnivoice-base-{quant.upper()}.gguf"
    assert (default_quant("CUDA"), default_quant("Vulkan")) == ("bf16", "f16")
    zen4 = frozenset({"AVX2", "F16C", "FMA", "AVX512", "AVX512_BF16"})
    monkeypatch.setattr(int8, "available", lambda: True)  # F16 on the package's int8 kernel
    assert default_quant("CPU", zen4) == "f16"
    monkeypatch.setattr(int8, "available", lambda: False)  # a build without it: ggml's BF16 dot products
    assert default_quant("CPU", zen4) == "bf16"
    amx_cpu = frozenset({"AVX2", "F16C", "AVX512", "AVX512_BF16", "AMX_INT8"})
    monkeypatch.setattr(amx, "available", lambda: True)  # BF16 on the package's AMX kernel
    assert default_quant("CPU", amx_cpu) == "bf16"
    monkeypatch.setattr(amx, "available", lambda: False)  # a build without it: Q8_0 in ggml's AMX buffer
    assert default_quant("CPU", amx_cpu) == "q8_0"
    assert default_quant("CPU", frozenset({"AVX2", "F16C", "FMA"})) == "f16"
    assert default_quant("CPU", frozenset({"SSE3", "AVX"})) == default_quant("CPU", frozenset({"NEON"})) == "f32"


def test_repo_id_offline_and_not_cached_is_a_download_error(monkeypatch, tmp_path):
    from omnivoice.resolve import DownloadError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(DownloadError, match="nobody/no-such-omnivoice"):
        resolve_model("nobody/no-such-omnivoice")


def test_progress_reports_each_step_once(ov):
    seen = []
    ov.synthesize("One. " * 3, num_step=3, progress=lambda d, t: seen.append((d, t)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_stream_takes_text_as_it_arrives(ov):
    whole = list(ov.stream("First one. Second one.", num_step=4, seed=2))
    pieces = list(ov.stream(iter(["First ", "one. Sec", "ond one."]), num_step=4, seed=2))
    assert len(pieces) == 2
    for a, b in zip(whole, pieces):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="empty"):
        list(ov.stream(iter(["  ", "\n"])))


def test_speaker_keeps_the_first_sentences_voice(ov):
    speaker = ov.speaker(num_step=4, seed=1, postprocess_output=False)
    assert speaker.voice is None
    first = speaker.say("Hello there.")
    assert speaker.voice is not None and speaker.voice.text == "Hello there."
    fixed = speaker.say("And again.", duration=0.8)
    assert first.dtype == np.float32 and len(fixed) == int(0.8 * 24000) + 2 * 2400  # 0.1 s padding each end


def test_dub_places_cues_and_keeps_empty_ones_silent(ov):
    from omnivoice.audio.srt import Cue

    cues = [Cue(1, 0.0, 0.8, "Hello there."), Cue(2, 1.0, 1.4, ""), Cue(3, 1.5, 2.2, "Goodbye now.")]
    r = ov.dub(cues, num_step=4, seed=0)
    assert r.sample_rate == 24000 and abs(r.duration - 2.2) < 1e-3
    assert len(r.tokens) == 2 and r.texts == ["Hello there.", "Goodbye now."]
    assert np.abs(r.audio[int(0.85 * 24000):int(1.45 * 24000)]).max() == 0


def test_no_padding_gives_the_duration_asked_for(ov):
    r = ov.synthesize("Exactly one second.", duration=1.0, postprocess_output=False, pad_duration=0,
                      fade_duration=0, num_step=4, seed=0)
    assert len(r.audio) == 24000
    r = ov.synthesize("Exactly one second.", duration=1.0, postprocess_output=False, num_step=4, seed=0)
    assert len(r.audio) == 24000 + 2 * 2400  # the reference's 0.1 s at each end


def test_debug_entry_points(ov, tmp_path):
    tokens = ov.generate_tokens("Good morning.", num_step=4, seed=0, dump=tmp_path)
    assert len(tokens) == 1 and tokens[0].shape[0] == 8
    np.testing.assert_array_equal(np.load(tmp_path / "tokens_0.npy"), tokens[0])
    logits = ov.llm_logits("Good morning.")
    assert logits.dtype == np.float32 and logits.shape == (8, tokens[0].shape[1], 1025)


def test_bad_options_fail_before_any_work(ov):
    from omnivoice.api import OptionError

    with pytest.raises(OptionError, match="num_step must be an integer >= 1"):
        ov.synthesize("Hi.", num_step=0)
    with pytest.raises(OptionError, match="duration"):
        ov.speaker(duration=float("inf"))


def test_a_closed_object_says_so(tiny_gguf):
    ov = omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend="cpu")
    ov.close()
    with pytest.raises(RuntimeError, match="closed"):
        ov.synthesize("Hi.")
    with pytest.raises(ValueError, match="n_threads"):
        omnivoice.OmniVoice(str(tiny_gguf["f32"]), n_threads=0)


@pytest.mark.parametrize("lm,quant,exact,env,want", [
    ("f32", "auto", None, "", True),    # an F32 file asks for F32 arithmetic with no --quant
    ("f32", "f32", None, "", True),
    ("f16", "auto", None, "", False),
    ("f16", "auto", None, "1", True),   # OMNIVOICE_EXACT_F32=1: every runtime
    ("f32", "auto", False, "", False),  # an explicit value wins
    ("f16", "auto", True, "", True)])
def test_exact_f32_follows_f32_weights(tiny_gguf, monkeypatch, lm, quant, exact, env, want):
    """F32 weights ask for F32 arithmetic (Vulkan's float32 shaders, F32 K/V): exact_f32 defaults to on for an F32
    LM file and for quant="f32", else to OMNIVOICE_EXACT_F32; an explicit value wins."""
    monkeypatch.setenv("OMNIVOICE_EXACT_F32", env)
    with omnivoice.OmniVoice(str(tiny_gguf[lm]), str(tiny_gguf["codec"]), backend="cpu", quant=quant,
                             exact_f32=exact) as tts:
        assert tts.runtime.exact_f32 is want


def test_exact_f32_for_an_f32_file_in_a_folder(tiny_gguf, monkeypatch, tmp_path):
    """A folder whose only LM file is F32 gives F32 arithmetic too (the file picked, not the argument, decides)."""
    monkeypatch.setenv("OMNIVOICE_EXACT_F32", "")
    for key in ("f32", "codec"):
        (tmp_path / tiny_gguf[key].name).symlink_to(tiny_gguf[key])
    with omnivoice.OmniVoice(str(tmp_path), backend="cpu") as tts:
        assert tts.model_path.name == tiny_gguf["f32"].name and tts.runtime.exact_f32 is True


def test_a_bad_backend_is_reported_before_the_model_is_read(tmp_path):
    with pytest.raises(ValueError, match="backend 'nosuch' is not available"):
        omnivoice.OmniVoice(str(tmp_path / "missing.gguf"), backend="nosuch")
