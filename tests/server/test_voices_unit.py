"""The voice library and the built-in voices, without a server."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.codec.voice import VoicePrompt
from omnivoice.server.voices import (BUILTIN_VOICES, VoiceExists, VoiceLibrary, VoiceNameError, VoiceNotFound,
                                     check_name, resolve_voice)
from omnivoice.server.schema import VoiceId
from omnivoice.text.voice_design import resolve_instruct

OPENAI_VOICES = ["alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
                 "marin", "cedar"]


def _voice(seed: int = 0) -> VoicePrompt:
    codes = np.random.default_rng(seed).integers(0, 1024, (8, 30)).astype(np.int32)
    return VoicePrompt(codes, "A transcript.", 0.05)


def test_every_openai_voice_maps_to_valid_distinct_attributes():
    assert sorted(BUILTIN_VOICES) == sorted(OPENAI_VOICES)
    resolved = {name: resolve_instruct(attrs) for name, attrs in BUILTIN_VOICES.items()}
    assert all(resolved.values()) and len(set(resolved.values())) == len(resolved)


@pytest.mark.parametrize("name", ["../x", "a/b", "a" * 65, "", ".", "..", "a b", "x.rvq", "é", "a\\b", "a\0b"])
def test_bad_names_are_refused(name):
    with pytest.raises(VoiceNameError, match="invalid voice name"):
        check_name(name)


def test_good_names():
    for name in ["a", "A-z_0", "a" * 64, "-", "_"]:
        assert check_name(name) == name


def test_library_round_trip_and_errors(tmp_path):
    lib = VoiceLibrary(tmp_path / "v")
    info = lib.save("me", _voice())
    assert info.name == "me" and info.transcript == "A transcript." and info.seconds == pytest.approx(30 / 25)
    assert (tmp_path / "v" / "me.rvq").is_file() and (tmp_path / "v" / "me.rvq.txt").is_file()
    np.testing.assert_array_equal(lib.load("me").codes, _voice().codes)
    with pytest.raises(VoiceExists):
        lib.save("me", _voice(1))
    np.testing.assert_array_equal(lib.load("me").codes, _voice().codes)  # not replaced
    lib.delete("me")
    assert lib.names() == []
    with pytest.raises(VoiceNotFound):
        lib.load("me")
    with pytest.raises(VoiceNotFound):
        lib.delete("me")
    with pytest.raises(VoiceNameError):
        lib.save("../me", _voice())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v"]


def test_library_serves_only_complete_well_named_files(tmp_path):
    lib = VoiceLibrary(tmp_path)
    _voice().save(tmp_path / "ok.rvq")
    _voice().save(tmp_path / "bad name.rvq")
    _voice().save(tmp_path / "lonely.rvq")
    (tmp_path / "lonely.rvq.txt").unlink()
    assert lib.names() == ["ok"] and [v.name for v in lib.list()] == ["ok"]


def test_resolve_voice(tmp_path):
    lib = VoiceLibrary(tmp_path)
    lib.save("alloy", _voice())  # a library voice wins over the built-in name of the same spelling
    lib.save("mine", _voice(2))
    assert resolve_voice(lib, None) == (None, None)
    assert resolve_voice(lib, "onyx") == (None, BUILTIN_VOICES["onyx"])
    assert resolve_voice(lib, "alloy")[0] is not None
    assert resolve_voice(lib, VoiceId(id="mine"))[0].text == "A transcript."
    with pytest.raises(VoiceNotFound):
        resolve_voice(lib, VoiceId(id="onyx"))  # {"id": ...} names a library voice only
    with pytest.raises(VoiceNotFound, match="nobody"):
        resolve_voice(lib, "nobody")
    with pytest.raises(VoiceNameError):
        resolve_voice(lib, "../alloy")
