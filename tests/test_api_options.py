"""Options are checked without a model, and errors name the option as the API spells it."""

from __future__ import annotations

import math

import pytest

import omnivoice
from omnivoice.api import MAX_DURATION, OPTIONS, OptionError, check_options, make_settings


@pytest.mark.parametrize("option, value, words", [
    ("num_step", 0, "num_step must be an integer >= 1"),
    ("num_step", 2.5, "num_step must be an integer"),
    ("duration", 1e9, "duration must be a number of seconds > 0 and <= 1638.4"),
    ("duration", math.inf, "duration must be"),
    ("duration", 0, "duration must be"),
    ("speed", math.nan, "speed must be a finite number > 0"),
    ("speed", 0, "speed must be"),
    ("chunk_duration", math.nan, "chunk_duration must be a finite number"),
    ("chunk_threshold", -1, "chunk_threshold must be"),
    ("guidance_scale", -0.5, "guidance_scale must be"),
    ("t_shift", 0, "t_shift must be"),
    ("layer_penalty_factor", math.inf, "layer_penalty_factor must be"),
    ("class_temperature", "hot", "class_temperature must be"),
    ("seed", 2**64, r"seed must be an integer below 2\*\*64"),
    ("seed", 1.5, "seed must be"),
    ("denoise", "yes", "denoise must be True or False"),
    ("pad_duration", 11, "pad_duration must be"),
])
def test_bad_option_values(option, value, words):
    with pytest.raises(OptionError, match=words) as e:
        check_options("Hello.", **{option: value})
    assert e.value.option == option and "GenerationConfig" not in str(e.value)


def test_unknown_option_and_bad_language():
    with pytest.raises(TypeError, match="unknown option.*num_steps"):
        check_options(num_steps=4)
    with pytest.raises(ValueError, match="Englsh"):
        check_options(language="Englsh")


def test_defaults_are_the_references():
    s = make_settings("Hello.")
    assert (s.sampler.num_step, s.sampler.guidance_scale, s.speed, s.duration) == (32, 2.0, 1.0, None)
    assert (s.pad_duration, s.fade_duration, s.chunk_duration) == (0.1, 0.1, 15.0)
    assert set(OPTIONS) >= {"num_step", "seed", "postprocess_output"} and MAX_DURATION == 1638.4
    assert make_settings(duration=MAX_DURATION, seed=-1).duration == MAX_DURATION


def test_package_lists_its_names():
    names = dir(omnivoice)
    assert {"OmniVoice", "VoicePrompt", "SynthesisResult", "Cancelled", "OptionError", "DownloadError"} <= set(names)
    assert omnivoice.VoicePrompt is __import__("omnivoice.codec.voice", fromlist=["VoicePrompt"]).VoicePrompt
