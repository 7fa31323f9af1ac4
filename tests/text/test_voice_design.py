"""Voice design: instruct resolution and its errors equal the reference's _resolve_instruct on every golden input."""

import pytest
from text_golden import load_golden_json

from omnivoice.text import voice_design as vd
from omnivoice.text.voice_design import InstructError, category_of, instruct_uses_zh, resolve_instruct


@pytest.fixture(scope="module")
def golden():
    return load_golden_json("text_instructs.json")


def test_resolution_equals_reference(golden):
    cases = golden["cases"]
    assert len(cases) > 800
    assert sum("error" in c for c in cases) > 100 and sum("output" in c for c in cases) > 300
    tail = golden["error_tail"]
    for c in cases:
        if "error" in c:
            with pytest.raises(InstructError) as e:
                resolve_instruct(c["input"], use_zh=c["use_zh"])
            msg = str(e.value)
            if "Unsupported instruct items" in c["error"]:
                assert msg == c["error"] + tail, c
            else:
                assert msg == c["error"], c
        else:
            assert resolve_instruct(c["input"], use_zh=c["use_zh"]) == c["output"], c


def test_use_zh_rule(golden):
    for c in golden["use_zh"]:
        assert instruct_uses_zh(c["text"]) == c["use_zh"], c


def test_vocabulary_equals_reference(golden):
    t = golden["tables"]
    assert sorted(vd.ALL_VALID) == t["all_valid"]
    assert sorted(vd.VALID_EN) == t["valid_en"]
    assert sorted(vd.VALID_ZH) == t["valid_zh"]
    ref_cats = t["categories"]
    ours = [sorted(vd.GENDER.items()), sorted(vd.AGE.items()), sorted(vd.PITCH.items()), sorted(vd.STYLE.items()),
            sorted(vd.ACCENTS), sorted(vd.DIALECTS)]
    assert [[list(x) if isinstance(x, (list, tuple)) else x for x in c] for c in ours] == ref_cats


def test_error_names_bad_item_and_allowed_values():
    with pytest.raises(ValueError) as e:
        resolve_instruct("female, brittish accent")
    msg = str(e.value)
    assert "'brittish accent'" in msg and "did you mean 'british accent'" in msg
    assert "Valid English items:" in msg and "very high pitch" in msg and "四川话" in msg
    assert category_of("四川话") == "dialect" and category_of("low pitch") == "pitch" and category_of("x") is None
    with pytest.raises(TypeError, match="instruct must be a str"):
        resolve_instruct(["male"])
