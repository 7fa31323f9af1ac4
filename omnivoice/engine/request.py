"""One synthesis request as data: the fields of `OmniVoice.synthesize`, checked before any model work.

    req = SynthesisRequest.from_dict({"text": "Hello.", "language": "English", "seed": 3})
    req.validate()                      # ValueError naming the field, the value and what was expected
    settings = req.settings()           # the same checks, and the pipeline Settings they resolve to
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from numbers import Integral
from typing import Any, Mapping, Optional, Union

import numpy as np

from ..codec.voice import VoicePrompt
from ..options import DEFAULTS as OPTIONS
from ..options import OptionError
from ..settings import Settings, make_settings
from ..text.languages import UnknownLanguageError
from ..text.voice_design import InstructError

AudioInput = Union[str, "os.PathLike[str]", tuple]

__all__ = ["SynthesisRequest", "InvalidRequests", "as_request"]


@dataclass
class SynthesisRequest:
    """What `synthesize` takes, as one record (defaults are the reference's).

    Voice: `voice` (a VoicePrompt), or `ref_audio` (a path, or (samples, sample_rate)) with its transcript
    `ref_text`, or `instruct` (voice design), or none of them (auto voice). `id` is the caller's name for the
    request (the batch CLI's output file name); the engine does not read it.
    """

    text: str
    language: Optional[str] = None
    instruct: Optional[str] = None
    ref_audio: Optional[AudioInput] = None
    ref_text: Optional[str] = None
    voice: Optional[VoicePrompt] = None
    # the options of synthesize, with omnivoice.options' defaults (tests/test_options.py: these are its table)
    duration: Optional[float] = OPTIONS["duration"]
    speed: float = OPTIONS["speed"]
    num_step: int = OPTIONS["num_step"]
    guidance_scale: float = OPTIONS["guidance_scale"]
    t_shift: float = OPTIONS["t_shift"]
    layer_penalty_factor: float = OPTIONS["layer_penalty_factor"]
    position_temperature: float = OPTIONS["position_temperature"]
    class_temperature: float = OPTIONS["class_temperature"]
    seed: Optional[int] = OPTIONS["seed"]
    denoise: bool = OPTIONS["denoise"]
    postprocess_output: bool = OPTIONS["postprocess_output"]
    preprocess_prompt: bool = True
    pad_duration: float = OPTIONS["pad_duration"]
    fade_duration: float = OPTIONS["fade_duration"]
    chunk_duration: float = OPTIONS["chunk_duration"]
    chunk_threshold: float = OPTIONS["chunk_threshold"]
    id: Optional[str] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "SynthesisRequest":
        """A request from a mapping of field names; an unknown key or a missing `text` is a ValueError."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a request must be a mapping of field names to values, got {type(d).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in d if k not in names)
        if unknown:
            raise ValueError(f"unknown request field{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(repr(k) for k in unknown)} (fields: {', '.join(sorted(names))})")
        if "text" not in d:
            raise ValueError("request has no 'text'")
        return cls(**dict(d))

    def options(self) -> dict:
        """The keyword options of `OmniVoice.synthesize` (omnivoice.options.TABLE: everything but text, language, instruct,
        the voice and id)."""
        return {k: getattr(self, k) for k in OPTIONS}

    def validate(self) -> "SynthesisRequest":
        """Check every field that can be checked without the model; return self, or raise ValueError naming
        the field, what it holds and what is expected (see settings)."""
        self.settings()
        return self

    def settings(self, wording: Optional[str] = None) -> Settings:
        """The checked request as pipeline Settings: the options, language and instruct by settings.make_settings,
        the one set of checks synthesize runs (OptionError, a ValueError, names a bad option); the text, the
        voice fields and id here. A `ref_audio` path must name a file soundfile can read (its header is read,
        the samples are not). `wording`: the text that decides whether instruct attributes are worded in
        Chinese (a stream's first sentence), by default the text."""
        if not isinstance(self.text, str):
            raise ValueError(f"text: expected a string, got {type(self.text).__name__}")
        if not self.text.strip():
            raise ValueError("text: is empty, nothing to synthesize")
        for name in ("language", "instruct", "ref_text"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ValueError(f"{name}: expected a string or null, got {type(value).__name__}")
        self._check_voice()
        if not isinstance(self.preprocess_prompt, (bool, np.bool_)):
            raise ValueError(f"preprocess_prompt: expected true or false, got {self.preprocess_prompt!r}")
        if self.id is not None and not isinstance(self.id, (str, Integral)):
            raise ValueError(f"id: expected a string, got {type(self.id).__name__}")
        try:
            return make_settings(wording or self.text, self.language, self.instruct, **self.options())
        except OptionError:
            raise
        except UnknownLanguageError as e:
            raise ValueError(f"language: {e}") from None
        except InstructError as e:
            raise ValueError(f"instruct: {e}") from None
        except TypeError as e:  # not expected from checked fields; still a bad request, not a crash
            raise ValueError(str(e)) from None

    def _check_voice(self) -> None:
        if self.voice is not None:
            if not isinstance(self.voice, VoicePrompt):
                raise ValueError(f"voice: expected a VoicePrompt, got {type(self.voice).__name__}")
            if self.ref_audio is not None:
                raise ValueError("voice and ref_audio: give one of them, not both")
            if self.ref_text is not None:
                raise ValueError("ref_text: a voice carries its own transcript; give ref_text only with ref_audio")
            return
        if self.ref_audio is None:
            if self.ref_text is not None:
                raise ValueError("ref_text: given without ref_audio (cloning needs the reference audio too)")
            return
        if self.ref_text is None or not self.ref_text.strip():
            raise ValueError("ref_text: the transcript of ref_audio is required for voice cloning")
        if isinstance(self.ref_audio, (str, os.PathLike)):
            _check_audio_file(self.ref_audio)
            return
        try:
            samples, rate = self.ref_audio
        except (TypeError, ValueError):
            raise ValueError("ref_audio: expected a path or a (samples, sample_rate) pair") from None
        a = np.asarray(samples)
        if a.dtype.kind != "f" or a.ndim not in (1, 2) or a.size == 0:
            raise ValueError(f"ref_audio: samples must be a non-empty float array [n] or [channels, n], "
                             f"got dtype {a.dtype} shape {a.shape}")
        if isinstance(rate, bool) or not isinstance(rate, Integral) or rate <= 0:
            raise ValueError(f"ref_audio: sample rate must be a positive integer, got {rate!r}")
        _check_reference_length("ref_audio", a.shape[-1], int(rate))


def _check_audio_file(path) -> None:
    import soundfile as sf

    p = os.fspath(path)
    if not os.path.exists(p):
        raise ValueError(f"ref_audio: {p}: no such file")
    if not os.path.isfile(p):
        raise ValueError(f"ref_audio: {p}: not a regular file")
    try:
        info = sf.info(p)
    except Exception as e:  # soundfile raises RuntimeError subclasses, or OSError for permissions
        raise ValueError(f"ref_audio: {p}: not a readable audio file ({e})") from None
    if info.frames == 0:
        raise ValueError(f"ref_audio: {p}: holds no audio samples")
    _check_reference_length(f"ref_audio: {p}", info.frames, info.samplerate)


def _check_reference_length(what: str, frames: int, rate: int) -> None:
    """A reference longer than synthesize takes (audio.MAX_REFERENCE_SECONDS) is refused before any work."""
    from ..audio import MAX_REFERENCE_SECONDS

    if frames > MAX_REFERENCE_SECONDS * rate:
        raise ValueError(f"{what}: {frames / rate:.1f} s long; a reference clip may be at most "
                         f"{MAX_REFERENCE_SECONDS:g} s")


class InvalidRequests(ValueError):
    """Some requests of a batch are invalid. `errors` lists (index, id, message) for each of them."""

    def __init__(self, errors: list[tuple[int, Optional[str], str]]) -> None:
        self.errors = errors
        lines = [f"request {i}{f' (id {rid!r})' if rid is not None else ''}: {msg}" for i, rid, msg in errors]
        super().__init__(f"{len(errors)} invalid request{'s' if len(errors) > 1 else ''}:\n  " + "\n  ".join(lines))


def as_request(item: Union[SynthesisRequest, Mapping[str, Any]]) -> SynthesisRequest:
    """A SynthesisRequest as it is, or one made from a mapping (SynthesisRequest.from_dict)."""
    if isinstance(item, SynthesisRequest):
        return item
    return SynthesisRequest.from_dict(item)
