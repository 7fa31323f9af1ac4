"""prepare_request equals the reference's _preprocess_all (language, instruct, target length, speed)."""

import pytest
from text_golden import load_golden_json

from omnivoice.text.languages import UnknownLanguageError
from omnivoice.text.request import prepare_request


def test_prepare_request_equals_reference():
    g = load_golden_json("text_preprocess.json")
    cases = g["cases"]
    assert len(cases) >= 200 and sum("error" in c for c in cases) > 5
    for c in cases:
        kwargs = dict(language=c["language"], instruct=c["instruct"], ref_text=c["ref_text"],
                      num_ref_audio_tokens=c["num_ref_audio_tokens"], duration=c["duration"], speed=c["speed"],
                      frame_rate=g["frame_rate"], strict_language=False)
        if "error" in c:
            with pytest.raises(ValueError) as e:
                prepare_request(c["text"], **kwargs)
            assert str(e.value).split("\n")[0] == c["error"]
            continue
        r = prepare_request(c["text"], **kwargs)
        assert r.text == c["out_text"]
        assert r.lang == c["lang"], c
        assert r.instruct == c["out_instruct"], c
        assert r.ref_text == c["out_ref_text"], c
        assert r.num_target_tokens == c["num_target_tokens"], c
        # The reference keeps no speed list when neither speed nor duration is given: chunking then uses 1.0.
        assert r.speed == (c["out_speed"] if c["out_speed"] is not None else 1.0), c


def test_strict_language_and_bad_values():
    with pytest.raises(UnknownLanguageError):
        prepare_request("hello", language="Klingon")
    with pytest.raises(ValueError, match="duration"):
        prepare_request("hello", duration=-1.0)
    with pytest.raises(TypeError, match="text must be a str"):
        prepare_request(None)
