"""One Wyoming client connection (the `wyoming` package's AsyncEventHandler).

    describe                              -> info: the program, its voices and the 646 language ids
    synthesize {text, voice}              -> audio-start, audio-chunk (24 kHz, 16-bit, mono)..., audio-stop
    synthesize-start {voice}, synthesize-chunk {text}..., synthesize-stop
                                          -> audio-start, audio-chunk... as each sentence is ready, audio-stop,
                                             synthesize-stopped (a `synthesize` sent inside the stream, for
                                             servers that do not stream, is ignored)
    a bad request                         -> error {text, code}; the connection stays open

Voices: `auto` (a voice of the model's choosing, kept for the whole answer), the speech server's built-in
voice-design names (voices.BUILTIN_VOICES: alloy, ash, ...), and every voice of the --voices library, re-read
on each describe and request. A voice given by language only ({"language": ...}) is the default voice speaking
that language. A client that goes away mid-answer cancels the sentences still in the engine.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from typing import Optional

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, \
    SynthesizeVoice

from .. import __version__
from ..audio.io import encode_samples
from ..engine import EngineFull, SynthesisRequest
from ..server.engine_adapter import SpeechBackend
from ..server.textstream import TextStream
from ..server.voices import BUILTIN_VOICES, VoiceLibrary, VoiceNameError, VoiceNotFound, resolve_voice
from ..text.languages import UnknownLanguageError, language_ids, resolve_language

__all__ = ["AUTO", "Service", "Handler", "info"]

log = logging.getLogger("omnivoice.wyoming")

AUTO = "auto"
ATTRIBUTION = Attribution(name="k2-fsa", url="https://github.com/k2-fsa/OmniVoice")


@dataclass
class Service:
    """What every connection shares: the backend (one batched engine; None until the model is loaded), the voice
    library, and the defaults of each synthesis (`options`: SynthesisRequest fields from the command line;
    `voice`: the default voice)."""

    backend: Optional[SpeechBackend]
    library: VoiceLibrary
    options: dict = field(default_factory=dict)
    voice: str = AUTO
    samples_per_chunk: int = 1024

    def request(self, voice: Optional[SynthesizeVoice]) -> SynthesisRequest:
        """The engine request (text to come) for a Wyoming voice; ValueError naming what is wrong with it."""
        name = voice.name if voice is not None and voice.name else self.voice
        options = dict(self.options)
        if voice is not None and voice.language:
            try:
                options["language"] = resolve_language(voice.language)
            except UnknownLanguageError as e:
                raise ValueError(f"voice language: {e}") from None
        prompt, design = None, None
        if name != AUTO:
            try:
                prompt, design = resolve_voice(self.library, name)
            except (VoiceNameError, VoiceNotFound) as e:
                raise ValueError(f"{e}; describe lists the voices") from None
        request = SynthesisRequest(text="", voice=prompt, instruct=design, **options)
        replace(request, text="Hello.").validate()
        return request


def info(service: Service) -> Info:
    """The describe answer: one TTS program whose voices each speak the 646 languages (ids, e.g. en, cmn)."""
    languages = language_ids()

    def voice(name: str, description: str) -> TtsVoice:
        return TtsVoice(name=name, description=description, attribution=ATTRIBUTION, installed=True,
                        version=None, languages=languages)

    # Home Assistant shows a voice by its description: each begins with the voice's name
    voices = [voice(AUTO, f"{AUTO} (the model's choice, kept for the whole answer)")]
    voices += [voice(name, f"{name} ({attrs})") for name, attrs in BUILTIN_VOICES.items()]
    voices += [voice(name, f"{name} (saved voice)") for name in service.library.names()]
    program = TtsProgram(name="omnivoice", description="OmniVoice zero-shot text-to-speech (646 languages) on ggml",
                         attribution=ATTRIBUTION, installed=True, version=__version__, voices=voices,
                         supports_synthesize_streaming=True)
    return Info(tts=[program])


class Handler(AsyncEventHandler):
    """One client connection (see the module docstring)."""

    def __init__(self, service: Service, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.service = service
        self.stream: Optional[TextStream] = None     # the streamed answer under way
        self.speaker: Optional[asyncio.Task] = None  # sends its audio
        self.failed = False                          # the streamed answer's error was sent: ignore the rest of it

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            await self.write_event(info(self.service).event())
            return True
        if SynthesizeStart.is_type(event.type):
            return await self._start(SynthesizeStart.from_event(event).voice)
        if SynthesizeChunk.is_type(event.type):
            if self.stream is not None:
                self.stream.feed(SynthesizeChunk.from_event(event).text)
                return True
            if self.failed:
                return True  # the rest of an answer whose error was sent
            return await self._outside_stream("synthesize-chunk")
        if SynthesizeStop.is_type(event.type):
            return await self._stop()
        if Synthesize.is_type(event.type):
            if self.stream is not None or self.failed:
                return True  # the stream's text again, for servers that do not stream
            synthesize = Synthesize.from_event(event)
            return await self._synthesize(synthesize.text, synthesize.voice)
        return True  # events of other domains are not for this service

    # ------------------------------------------------------------------------------------------ requests
    async def _synthesize(self, text: str, voice: Optional[SynthesizeVoice]) -> bool:
        try:
            stream = TextStream(self.service.backend.start, self.service.request(voice))
        except ValueError as e:
            await self._error(e)
            return True
        stream.feed(text)
        stream.end()
        return await self._send_audio(stream, stopped=False)

    async def _start(self, voice: Optional[SynthesizeVoice]) -> bool:
        self._cancel()
        try:
            self.stream = TextStream(self.service.backend.start, self.service.request(voice))
        except ValueError as e:
            self.failed = True
            await self._error(e)
            return True
        self.failed = False
        self.speaker = asyncio.create_task(self._send_audio(self.stream, stopped=True))
        return True

    async def _stop(self) -> bool:
        if self.stream is None:
            if self.failed:
                self.failed = False
                return True
            return await self._outside_stream("synthesize-stop")
        self.stream.end()
        return await self.speaker  # False when the client went away

    async def _outside_stream(self, kind: str) -> bool:
        await self._error(ValueError(f"{kind} without synthesize-start"))
        return True

    # ------------------------------------------------------------------------------------------ audio
    async def _send_audio(self, stream: TextStream, stopped: bool) -> bool:
        """audio-start, the audio of each sentence as it comes, audio-stop (and synthesize-stopped for a streamed
        answer). False when the client went away (its sentences cancelled)."""
        rate = self.service.backend.sample_rate
        step = self.service.samples_per_chunk
        samples = 0
        try:
            await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
            async for segment in stream:
                pcm = encode_samples(segment.audio, "wav16")
                for at in range(0, len(pcm), 2 * step):
                    await self.write_event(AudioChunk(rate=rate, width=2, channels=1, audio=pcm[at:at + 2 * step],
                                                      timestamp=(samples + at // 2) * 1000 // rate).event())
                samples += len(pcm) // 2
            await self.write_event(AudioStop(timestamp=samples * 1000 // rate).event())
            if stopped:
                await self.write_event(SynthesizeStopped().event())
        except (ConnectionError, OSError):  # the client went away mid-answer
            _gone(stream)
            return False
        except Exception as e:  # a sentence that failed, or the engine stopping: say it, keep the connection
            stream.cancel()
            self.failed = stopped  # a streamed answer's later events are then ignored
            await self._error(e)
        finally:
            if self.stream is stream:
                self.stream, self.speaker = None, None
        return True

    async def _error(self, e: BaseException) -> None:
        if not isinstance(e, (ValueError, EngineFull)):
            log.error("synthesis failed", exc_info=e)
        try:
            await self.write_event(Error(text=str(e), code=type(e).__name__).event())
        except (ConnectionError, OSError):
            pass

    def _cancel(self) -> None:
        if self.stream is not None:
            self.stream.cancel()
        if self.speaker is not None:
            self.speaker.cancel()
        self.stream, self.speaker = None, None

    async def disconnect(self) -> None:
        if self.stream is not None and self.stream.busy:
            _gone(self.stream)
        self._cancel()


def _gone(stream: TextStream) -> None:
    """The client went away mid-answer: stop its sentences, and say so."""
    running, waiting = stream.unspoken
    log.info("client went away: %d sentence(s) in the engine cancelled, %d not started", running, waiting)
    stream.cancel()
