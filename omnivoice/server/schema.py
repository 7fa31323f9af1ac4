"""The speech request: OpenAI's fields plus OmniVoice's extensions, checked by pydantic, and its mapping onto
the engine's SynthesisRequest.

OpenAI's fields: model (any name; this server has one model), input, voice (a library voice, {"id": name}, or
a built-in name), instructions (voice design attributes, e.g. "female, low pitch, british accent"),
response_format (mp3 | opus | aac | flac | wav | pcm, default mp3; `ogg`, Ogg/Vorbis, is an extension), speed (0.25 to
4.0), stream_format (audio | sse; absent: one whole response).
Extensions: language, seed, num_step, duration, guidance_scale.
Unknown fields are refused (400 naming the field), as OpenAI's API does.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .encoding import FORMATS
from .engine_adapter import SynthesisRequest

__all__ = ["SpeechRequest", "VoiceId", "synthesis_request"]

ResponseFormat = Literal[tuple(FORMATS)]  # type: ignore[valid-type]


class VoiceId(BaseModel):
    """A custom voice by id: {"id": NAME}, a voice of the library."""

    model_config = ConfigDict(extra="forbid")
    id: str


class SpeechRequest(BaseModel):
    """POST /v1/audio/speech (JSON), and the form fields of POST /v1/audio/speech/clone (without voice)."""

    model_config = ConfigDict(extra="forbid")

    model: str = "omnivoice"
    input: str = Field(min_length=1)
    voice: Optional[Union[str, VoiceId]] = None
    instructions: Optional[str] = None
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    stream_format: Optional[Literal["audio", "sse"]] = None
    # extensions
    language: Optional[str] = None
    seed: Optional[int] = Field(None, ge=-1, lt=2**63)
    num_step: Optional[int] = Field(None, ge=1, le=256)
    duration: Optional[float] = Field(None, gt=0, le=600)
    guidance_scale: Optional[float] = Field(None, ge=0, le=100)


def synthesis_request(body: SpeechRequest, voice=None, design: Optional[str] = None, **extra) -> SynthesisRequest:
    """The engine request for `body`: `voice` is a library VoicePrompt, `design` a built-in voice's attributes
    (replaced by `instructions` when the request has them); `extra` goes through (ref_audio, ref_text)."""
    opts = dict(text=body.input, language=body.language, instruct=body.instructions or design, voice=voice,
                speed=body.speed, **extra)
    for name in ("seed", "num_step", "duration", "guidance_scale"):
        value = getattr(body, name)
        if value is not None:
            opts[name] = value
    return SynthesisRequest.from_dict(opts)
