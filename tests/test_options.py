"""Every surface's options are omnivoice.options' table: the same names, the reference's defaults, the same bounds
(but for the server's documented narrower ones)."""

from __future__ import annotations

import dataclasses
import math

import pydantic
import pytest

from omnivoice import options as O
from omnivoice.api import OPTIONS, OptionError, check_options
from omnivoice.batch import __main__ as batch_cli
from omnivoice.batch.manifest import OPTION_FIELDS
from omnivoice.engine.request import SynthesisRequest
from omnivoice.generate.maskgit import GenerationConfig
from omnivoice.pipeline import Settings
from omnivoice.server.schema import SpeechRequest
from omnivoice import tts

# The reference's defaults, written out from its OmniVoice.generate signature and OmniVoiceGenerationConfig
# (k2-fsa/OmniVoice): the table must keep them.
REFERENCE = {"duration": None, "speed": 1.0, "num_step": 32, "guidance_scale": 2.0, "t_shift": 0.1,
             "layer_penalty_factor": 5.0, "position_temperature": 5.0, "class_temperature": 0.0, "seed": None,
             "denoise": True, "postprocess_output": True, "pad_duration": 0.1, "fade_duration": 0.1,
             "chunk_duration": 15.0, "chunk_threshold": 30.0}

# values at and around each option's bounds, and some that are no number at all
PROBES = [-1e30, -2, -1, -0.5, 0, 1e-9, 0.1, 0.24, 0.25, 1, 2.5, 4, 4.01, 10, 10.5, 100, 101, 256, 257, 600, 601,
          1638.4, 1639, 86400, 86401, 2**63, 2**64 - 1, 2**64, math.inf, math.nan, "3", True, None]
# the server's narrower bounds, each with its reason in server/schema.py
SERVER_NARROWS = {"speed", "num_step", "duration"}


def test_the_table_keeps_the_reference_defaults():
    assert O.DEFAULTS == REFERENCE and OPTIONS == REFERENCE
    assert [o.name for o in O.TABLE] == list(REFERENCE)


def test_the_library_records_take_their_defaults_from_the_table():
    cfg = GenerationConfig()
    assert {k: getattr(cfg, k) for k in O.SAMPLER} == {k: REFERENCE[k] for k in O.SAMPLER}
    s = Settings()
    assert {k: getattr(s, k) for k in REFERENCE if k not in O.SAMPLER} == \
        {k: v for k, v in REFERENCE.items() if k not in O.SAMPLER}
    req = SynthesisRequest(text="x")
    assert req.options() == REFERENCE
    names = {f.name for f in dataclasses.fields(SynthesisRequest)}
    assert set(REFERENCE) <= names
    assert set(OPTION_FIELDS) - {"preprocess_prompt"} <= set(REFERENCE)


def test_the_command_lines_default_to_the_table():
    args = tts.build_parser().parse_args(["hello"])
    got = tts.synthesis_options(args)
    assert got.pop("language") is None and got.pop("instruct") is None
    assert got == REFERENCE
    args = batch_cli.build_parser().parse_args(["m.jsonl", "-o", "out"])
    got = batch_cli.defaults_of(args)
    assert {k: got[k] for k in batch_cli.OPTION_FLAGS} == {k: REFERENCE[k] for k in batch_cli.OPTION_FLAGS}


def test_flags_parse_to_options_and_old_spellings_still_work():
    args = tts.build_parser().parse_args(["hi", "--steps", "8", "--layer-penalty", "2", "--no-denoise",
                                          "--no-postprocess", "--seed", "7"])
    got = tts.synthesis_options(args)
    assert (got["num_step"], got["layer_penalty_factor"], got["denoise"], got["seed"]) == (8, 2.0, False, 7)
    assert got["postprocess_output"] is False and got["pad_duration"] == got["fade_duration"] == 0.0
    both = batch_cli.build_parser().parse_args(["m.jsonl", "-o", "o", "--steps", "5", "--layer-penalty-factor", "1"])
    assert (both.num_step, both.layer_penalty_factor) == (5, 1.0)


def _api_accepts(name, value) -> bool:
    try:
        check_options(**{name: value})
        return True
    except OptionError:
        return False


def _server_accepts(name, value) -> bool:
    try:
        SpeechRequest.model_validate({"input": "x", name: value})
    except pydantic.ValidationError:
        return False
    return True


@pytest.mark.parametrize("name", ["speed", "seed", "num_step", "duration", "guidance_scale"])
def test_the_server_bounds_are_the_tables_unless_it_says_why(name):
    for value in PROBES:
        if value is None or isinstance(value, (str, bool)):
            continue  # JSON's types: pydantic's lax mode converts "3"; the API takes Python values only
        api, server = _api_accepts(name, value), _server_accepts(name, value)
        if name in SERVER_NARROWS:
            assert api or not server, (name, value)  # narrower, never wider
        else:
            assert api == server, (name, value, api, server)
    if name in SERVER_NARROWS:  # and it does narrow: otherwise its comment is stale
        assert any(_api_accepts(name, v) and not _server_accepts(name, v) for v in PROBES if not isinstance(v, str))


@pytest.mark.parametrize("option", O.TABLE, ids=lambda o: o.name)
def test_one_check_everywhere(option):
    """The API, the sampler's own record and a flag's value are refused alike, with the table's words."""
    for value in PROBES:
        try:
            O.check(option.name, value)
            ok = True
        except OptionError as e:
            ok = False
            assert str(e) == f"{option.name} {option.problem()}, got {value!r}"
        assert _api_accepts(option.name, value) == ok, value
        if option.sampler:
            try:
                GenerationConfig(**{option.name: value})
                assert ok, value
            except OptionError:
                assert not ok, value


def test_a_flag_names_itself_in_errors():
    e = OptionError("num_step", O.BY_NAME["num_step"].problem(), 0)
    assert O.flag_message(e, tts.FLAGS) == "--steps must be an integer >= 1, got 0"
    assert O.flag_message(e, batch_cli.FLAGS) == "--num-step must be an integer >= 1, got 0"
    with pytest.raises(ValueError, match="not one of its flags"):
        O.flags(["num_step"], {"num_step": "--stpes"})


def test_unknown_options_are_named():
    with pytest.raises(TypeError, match="unknown option.*num_steps"):
        O.check_all({"num_steps": 3})
