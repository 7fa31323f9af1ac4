"""Requests are checked before any work: every bad one named at once; limits; batched voice encoding."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from omnivoice import InvalidRequests, SynthesisRequest
from omnivoice.engine import Limits
from omnivoice.engine.memory import free_memory, measure_lm, resolve_limits
from omnivoice.runners.lm import MAX_GPU_POSITIONS


def test_from_dict_names_unknown_fields():
    r = SynthesisRequest.from_dict({"text": "Hi.", "language": "en", "seed": 3, "id": "a"})
    assert (r.text, r.language, r.seed, r.id, r.num_step) == ("Hi.", "en", 3, "a", 32)
    with pytest.raises(ValueError, match="'lang'.*fields:"):
        SynthesisRequest.from_dict({"text": "Hi.", "lang": "en"})
    with pytest.raises(ValueError, match="no 'text'"):
        SynthesisRequest.from_dict({"language": "en"})
    with pytest.raises(ValueError, match="mapping"):
        SynthesisRequest.from_dict(["Hi."])


@pytest.mark.parametrize("fields,match", [
    ({"text": "  "}, "text: is empty"),
    ({"text": 5}, "text: expected a string"),
    ({"text": "Hi.", "language": "Klingonese"}, "language: unknown language 'Klingonese'"),
    ({"text": "Hi.", "instruct": "female, purple"}, "instruct:"),
    ({"text": "Hi.", "ref_text": "only a transcript"}, "ref_text: given without ref_audio"),
    ({"text": "Hi.", "ref_audio": "/no/such/clip.wav", "ref_text": "x"}, "ref_audio: /no/such/clip.wav: no such file"),
    ({"text": "Hi.", "ref_audio": (np.zeros(10, np.float32), 24000)}, "ref_text: the transcript"),
    ({"text": "Hi.", "ref_audio": (np.zeros(0, np.float32), 24000), "ref_text": "x"}, "samples must be a non-empty"),
    ({"text": "Hi.", "ref_audio": (np.zeros(61 * 8000, np.float32), 8000), "ref_text": "x"}, "61.0 s long"),
    ({"text": "Hi.", "duration": 0}, "duration must be a number of seconds > 0"),
    ({"text": "Hi.", "duration": float("inf")}, "duration must be"),
    ({"text": "Hi.", "speed": -1}, "speed must be a finite number > 0"),
    ({"text": "Hi.", "num_step": 0}, "num_step must be an integer >= 1"),
    ({"text": "Hi.", "num_step": 2.5}, "num_step"),
    ({"text": "Hi.", "guidance_scale": -0.5}, "guidance_scale must be a finite number >= 0"),
    ({"text": "Hi.", "position_temperature": float("nan")}, "position_temperature"),
    ({"text": "Hi.", "seed": "7"}, "seed must be an integer"),
    ({"text": "Hi.", "denoise": "yes"}, "denoise must be True or False"),
    ({"text": "Hi.", "preprocess_prompt": 1}, "preprocess_prompt: expected true or false"),
])
def test_validate_names_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        SynthesisRequest.from_dict(fields).validate()


def test_unreadable_reference_file_is_refused(tmp_path):
    bad = tmp_path / "clip.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk" * 3)
    with pytest.raises(ValueError, match="not a readable audio file"):
        SynthesisRequest("Hi.", ref_audio=str(bad), ref_text="x").validate()
    long = tmp_path / "long.wav"
    sf.write(long, np.zeros(61 * 8000, np.float32), 8000)
    with pytest.raises(ValueError, match="long.wav: 61.0 s long; a reference clip may be at most 60 s"):
        SynthesisRequest("Hi.", ref_audio=str(long), ref_text="x").validate()
    good = tmp_path / "ok.wav"
    sf.write(good, np.zeros(2400, np.float32), 24000)
    SynthesisRequest("Hi.", ref_audio=str(good), ref_text="x").validate()


def test_synthesize_batch_reports_every_bad_request_before_any_work(ov, monkeypatch):
    calls = []
    monkeypatch.setattr(ov.lm, "session", lambda *a, **k: calls.append(1))
    items = [{"text": "fine"}, {"text": "", "id": "empty"}, {"text": "Hi.", "language": "xx-nowhere"},
             SynthesisRequest("ok too"), {"txt": "typo"}, {"text": "x", "speed": 0}]
    with pytest.raises(InvalidRequests) as err:
        ov.synthesize_batch(items)
    assert [i for i, _, _ in err.value.errors] == [1, 2, 4, 5]
    text = str(err.value)
    assert "4 invalid requests" in text and "request 1 (id 'empty'): text: is empty" in text
    assert "request 4: unknown request field 'txt'" in text and "speed must be a finite number > 0" in text
    assert not calls


def test_limits(ov, monkeypatch):
    gpu = ov.lm.runtime.is_gpu
    assert resolve_limits(ov, 5) == Limits(5, MAX_GPU_POSITIONS if gpu else None)
    # On a GPU one graph holds at most MAX_GPU_POSITIONS packed positions, whatever is asked for.
    monkeypatch.setattr(type(ov.lm.runtime), "is_gpu", property(lambda self: True))
    assert resolve_limits(ov, 5) == Limits(5, MAX_GPU_POSITIONS)
    assert resolve_limits(ov, 5, max_positions=10 ** 6) == Limits(5, MAX_GPU_POSITIONS)
    assert resolve_limits(ov, 5, max_positions=1000) == Limits(5, 1000)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="positive integer or 'auto'"):
        resolve_limits(ov, 0)
    per_position, fixed = measure_lm(ov.lm)
    assert per_position > 0 and fixed >= 0
    auto = resolve_limits(ov, "auto")
    assert auto.max_requests >= 1 and auto.max_positions > 1000
    assert auto.max_positions * per_position <= free_memory(ov.lm.runtime)


def test_voices_are_encoded_together_as_alone(ov, ref_clip, tmp_path):
    (samples, rate), text = ref_clip
    path = tmp_path / "ref.wav"
    sf.write(path, samples, rate, subtype="FLOAT")
    shorter = (samples[: len(samples) * 2 // 3], rate)
    items = [((samples, rate), text, True), (str(path), text, True), (shorter, "Hello world", False),
             ((np.zeros(100, np.float32), rate), text, True)]
    got = ov.create_voices(items)
    assert isinstance(got[3], ValueError)  # a silent clip fails alone
    for item, voice in zip(items[:3], got[:3]):
        alone = ov.create_voice(*item)
        np.testing.assert_array_equal(voice.codes, alone.codes)
        assert voice.text == alone.text and voice.rms == alone.rms
    clips = [ov._reference_clip(*item)[0] for item in items[:3]]
    for clip, codes in zip(clips, ov.codec.encode_batch(clips)):
        np.testing.assert_array_equal(codes, ov.codec.encode(clip))
