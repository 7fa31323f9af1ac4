"""Languages: resolution equals the reference's _resolve_language on every golden input."""

import logging

import pytest
from text_golden import load_golden_json

from omnivoice.text.languages import (LANG_IDS, LANG_NAMES, UnknownLanguageError, lang_display_name, language_ids,
                                      language_names, resolve_language, suggest_languages)


@pytest.fixture(scope="module")
def golden():
    return load_golden_json("text_languages.json")


def test_resolution_equals_reference(golden, caplog):
    cases = golden["cases"]
    assert len(cases) > 2500
    for c in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="omnivoice.text.languages"):
            got = resolve_language(c["input"], strict=False)
        assert got == c["output"], c
        assert bool(caplog.records) == c["warned"], c


def test_strict_raises_exactly_where_reference_warns(golden):
    for c in golden["cases"]:
        if c["warned"]:
            with pytest.raises(UnknownLanguageError):
                resolve_language(c["input"])
        else:
            assert resolve_language(c["input"]) == c["output"]


def test_every_name_and_id(golden):
    names = golden["display_names"]
    assert len(LANG_NAMES) == len(names) == 646
    assert len(LANG_IDS) == 646
    assert language_names() == sorted(names)
    for name, display in names.items():
        assert lang_display_name(name) == display
        assert resolve_language(display) in LANG_IDS
    for i in language_ids():
        assert resolve_language(i) == i


def test_unknown_language_message_suggests_close_matches():
    with pytest.raises(UnknownLanguageError) as e:
        resolve_language("Englsh")
    msg = str(e.value)
    assert "'Englsh'" in msg and "'english'" in msg and "646" in msg
    assert "english" in suggest_languages("ENGLSH")
    with pytest.raises(UnknownLanguageError) as e:
        resolve_language("qqqqqqqqqqqqqqqq")
    assert "Did you mean" not in str(e.value)
    with pytest.raises(TypeError, match="language must be a str"):
        resolve_language(42)
