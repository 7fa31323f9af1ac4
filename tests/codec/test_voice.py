"""Voice prompt files (codec/voice.py): round trip, transcript beside the codes, a short repr, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.codec import read_rvq, save_rvq
from omnivoice.codec.voice import VoicePrompt, transcript_path


def test_save_and_load_round_trip(tmp_path, rng):
    voice = VoicePrompt(rng.integers(0, 1024, (8, 50)).astype(np.int64), "Hello there.", 0.0625)
    path = tmp_path / "me.rvq"
    voice.save(path)
    assert transcript_path(path) == tmp_path / "me.rvq.txt"
    assert transcript_path(path).read_text(encoding="utf-8") == "Hello there."
    assert read_rvq(path).ref_rms == pytest.approx(0.0625)
    back = VoicePrompt.load(path)
    assert back.codes.dtype == np.int32
    np.testing.assert_array_equal(back.codes, voice.codes)
    assert (back.text, back.rms) == ("Hello there.", pytest.approx(0.0625))


def test_repr_is_one_short_line(rng):
    voice = VoicePrompt(rng.integers(0, 1024, (8, 500)), "A transcript that goes on and on for quite a while.",
                        0.05)
    text = repr(voice)
    assert text == "VoicePrompt(8 codebooks x 500 frames, text='A transcript that goes on and on for...', rms=0.05)"


def test_any_rvq_with_a_transcript_is_a_voice(tmp_path):
    save_rvq(tmp_path / "clip.rvq", np.ones((8, 3), np.int32))
    with pytest.raises(FileNotFoundError, match="clip.rvq.txt"):
        VoicePrompt.load(tmp_path / "clip.rvq")
    assert VoicePrompt.load(tmp_path / "clip.rvq", text=" Hi. ").text == "Hi."
    (tmp_path / "clip.rvq.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(ValueError, match="not UTF-8"):
        VoicePrompt.load(tmp_path / "clip.rvq")


@pytest.mark.parametrize("codes, text, match", [
    (np.zeros((8, 0), np.int32), "Hi.", "frames > 0"),
    (np.zeros(8, np.int32), "Hi.", "codebooks, frames"),
    (np.zeros((8, 2), np.float32), "Hi.", "integers"),
    (np.zeros((8, 2), np.int32), "  ", "transcript"),
])
def test_bad_voice_prompts(codes, text, match):
    with pytest.raises(ValueError, match=match):
        VoicePrompt(codes, text)
