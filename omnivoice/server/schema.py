"""The speech request: OpenAI's fields plus OmniVoice's extensions, checked by pydantic, and its mapping onto
the engine's SynthesisRequest.

OpenAI's fields: model (any name; this server has one model), input, voice (a library voice, {"id": name}, or
a built-in name), instructions (voice design attributes, e.g. "female, low pitch, british accent"),
response_format (mp3 | opus | aac | flac | wav | pcm, default mp3; `ogg`, Ogg/Vorbis, is an extension; checked by
encoding.unavailable, whose 400 names the formats this server answers: aac is refused), speed (0.25 to 4.0),
stream_format (audio | sse; absent: audio, as OpenAI's API defaults it; null, or an empty form field: one whole
response, with the X-OmniVoice-Tokens-SHA256 header that a stream cannot carry).
Extensions: language, seed, num_step, duration, guidance_scale (omnivoice.options: their bounds and help).
Unknown fields are refused (400 naming the field), as OpenAI's API does.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ..options import pydantic_field
from .engine_adapter import SynthesisRequest

__all__ = ["SpeechRequest", "VoiceId", "synthesis_request"]


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
    response_format: str = "mp3"
    # the options' bounds are omnivoice.options'; the server narrows three, each for its reason:
    # speed: OpenAI's documented range for this field, 0.25 to 4.0, which its clients expect refused outside it
    speed: float = pydantic_field("speed", 1.0, low=0.25, high=4.0)
    # streamed by default, as OpenAI's API does (every response format this server answers can stream:
    # encoding.py); an explicit null asks for one whole response
    stream_format: Optional[Literal["audio", "sse"]] = "audio"
    # extensions (absent: the table's default)
    language: Optional[str] = None
    seed: Optional[int] = pydantic_field("seed")
    # num_step and duration: one request's work on a shared server is bounded (256 steps, 10 minutes of speech
    # in one request; a longer text is chunked anyway), so one client cannot hold the engine for hours
    num_step: Optional[int] = pydantic_field("num_step", high=256)
    duration: Optional[float] = pydantic_field("duration", high=600)
    guidance_scale: Optional[float] = pydantic_field("guidance_scale")


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
