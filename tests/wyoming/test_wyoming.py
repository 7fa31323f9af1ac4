"""python -m omnivoice.wyoming in a subprocess, spoken to by the `wyoming` package's own client (AsyncTcpClient):
describe, synthesize (two languages, a saved voice), the streaming events, a bad voice, a client that leaves,
many clients at once. Audio is compared with the Python API's on the same tiny model."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, \
    SynthesizeVoice

from omnivoice.audio.io import encode_samples
from omnivoice.codec.voice import VoicePrompt
from omnivoice.server.voices import BUILTIN_VOICES
from omnivoice.text.languages import language_ids

from tests.backend import BACKEND
from tests.golden_paths import GOLDEN
from tests.server.conftest import REF_TEXT, ROOT, free_port

SEED, STEPS = 7, 2


@pytest.fixture(scope="module")
def service(tiny_gguf, tmp_path_factory):
    """The Wyoming server on a free port; its voices folder holds `saved`, written by the tts CLI first."""
    import soundfile as sf

    folder = tmp_path_factory.mktemp("wyoming")
    (folder / "voices").mkdir()
    ref = folder / "ref.wav"
    sf.write(ref, np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"], 24000, subtype="PCM_16")
    model = ["--model", str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--backend", BACKEND,
             "--threads", "1"]
    subprocess.run([sys.executable, "-m", "omnivoice.tts", "Hi.", *model, "--steps", "1", "-q", "--ref-wav",
                    str(ref), "--ref-text", REF_TEXT, "--save-voice", str(folder / "voices" / "saved.rvq"), "-o",
                    str(folder / "cli.wav")], cwd=ROOT, check=True, capture_output=True, timeout=300)
    port = free_port()
    log = folder / "wyoming.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "omnivoice.wyoming", "--uri", f"tcp://127.0.0.1:{port}",
                                 *model, "--voices", str(folder / "voices"), "--seed", str(SEED),
                                 "--num-step", str(STEPS), "--log-level", "debug"],
                                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
        yield {"port": port, "log": log, "voices": folder / "voices", "proc": proc}
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(scope="module")
def ov(tiny_gguf):
    import omnivoice

    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend=BACKEND, n_threads=1) as ov:
        yield ov


def _client(service) -> AsyncTcpClient:
    return AsyncTcpClient("127.0.0.1", service["port"], read_timeout=300)


async def _answer(client, until: str) -> list:
    """Events up to and including the first of type `until` or an error."""
    events = []
    while True:
        event = await client.read_event()
        assert event is not None, f"the server closed the connection after {[e.type for e in events]}"
        events.append(event)
        if event.type in (until, "error"):
            return events


def _audio(events: list) -> bytes:
    """The audio of an answer, checking its framing: audio-start, 24 kHz s16 mono chunks, audio-stop."""
    kinds = [e.type for e in events]
    assert kinds[0] == "audio-start" and "audio-stop" in kinds, kinds
    start = AudioStart.from_event(events[0])
    assert (start.rate, start.width, start.channels) == (24000, 2, 1)
    stop = kinds.index("audio-stop")
    chunks = [AudioChunk.from_event(e) for e in events[1:stop]]
    assert chunks and all(e.type == "audio-chunk" for e in events[1:stop])
    assert all((c.rate, c.width, c.channels) == (24000, 2, 1) for c in chunks)
    return b"".join(c.audio for c in chunks)


async def _synthesize(service, text: str, voice: SynthesizeVoice | None = None) -> bytes:
    async with _client(service) as client:
        await client.write_event(Synthesize(text=text, voice=voice).event())
        return _audio(await _answer(client, "audio-stop"))


def _reference(ov, text: str, **kw) -> bytes:
    return encode_samples(ov.synthesize(text, seed=SEED, num_step=STEPS, **kw).audio, "wav16")


def test_describe_lists_the_program_voices_and_languages(service):
    async def go():
        async with _client(service) as client:
            await client.write_event(Describe().event())
            return Info.from_event((await _answer(client, "info"))[-1])

    info = asyncio.run(go())
    (program,) = info.tts
    assert program.name == "omnivoice" and program.supports_synthesize_streaming and program.installed
    names = [v.name for v in program.voices]
    assert names == ["auto", *BUILTIN_VOICES, "saved"]
    assert all(v.description.startswith(v.name + " (") for v in program.voices)  # what Home Assistant shows
    assert all(v.languages == language_ids() for v in program.voices)
    assert len(language_ids()) == 646 and {"en", "fr", "de"} <= set(language_ids())


@pytest.mark.parametrize("text, language", [("Hello there, my friend.", "en"), ("Bonjour tout le monde.", "fr")])
def test_synthesize_in_a_language_is_the_python_apis_audio(service, ov, text, language):
    audio = asyncio.run(_synthesize(service, text, SynthesizeVoice(language=language)))
    assert audio == _reference(ov, text, language=language)


def test_synthesize_with_a_saved_voice_and_a_design_preset(service, ov):
    saved = VoicePrompt.load(service["voices"] / "saved.rvq")
    audio = asyncio.run(_synthesize(service, "Saved voice here.", SynthesizeVoice(name="saved")))
    assert audio == _reference(ov, "Saved voice here.", voice=saved)
    audio = asyncio.run(_synthesize(service, "A designed voice.", SynthesizeVoice(name="onyx")))
    assert audio == _reference(ov, "A designed voice.", instruct=BUILTIN_VOICES["onyx"])


def test_streaming_events_speak_the_text_as_one_synthesize_does(service):
    text = "Hello there. How are you today? Fine, thanks."
    voice = SynthesizeVoice(name="alloy")

    async def go():
        async with _client(service) as client:
            await client.write_event(SynthesizeStart(voice=voice).event())
            for piece in ["Hello th", "ere. How ar", "e you today", "? Fine, thanks."]:
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text=text, voice=voice).event())  # as Home Assistant sends it
            await client.write_event(SynthesizeStop().event())
            return await _answer(client, "synthesize-stopped")

    events = asyncio.run(go())
    kinds = [e.type for e in events]
    assert kinds[-2:] == ["audio-stop", "synthesize-stopped"] and kinds.count("audio-start") == 1
    assert SynthesizeStopped.is_type(events[-1].type)
    assert _audio(events) == asyncio.run(_synthesize(service, text, voice))


def test_a_bad_voice_is_an_error_event_and_the_connection_stays_up(service):
    async def go():
        async with _client(service) as client:
            await client.write_event(Synthesize(text="Hi there.", voice=SynthesizeVoice(name="nobody")).event())
            error = Error.from_event((await _answer(client, "error"))[-1])
            # the streamed form: an error at start, its chunks and stop ignored
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="nobody")).event())
            await client.write_event(SynthesizeChunk(text="Ignored.").event())
            await client.write_event(SynthesizeStop().event())
            streamed = Error.from_event((await _answer(client, "error"))[-1])
            await client.write_event(Synthesize(text="Hi there.", voice=SynthesizeVoice(language="Klingon")).event())
            language = Error.from_event((await _answer(client, "error"))[-1])
            await client.write_event(Synthesize(text="Still here.").event())
            return error, streamed, language, _audio(await _answer(client, "audio-stop"))

    error, streamed, language, audio = asyncio.run(go())
    assert "voice 'nobody' not found" in error.text and "voice 'nobody' not found" in streamed.text
    assert "unknown language 'Klingon'" in language.text
    assert audio


def test_a_client_that_leaves_mid_answer_cancels_its_sentences(service):
    log = service["log"]
    before = log.read_text().count("client went away")
    text = " ".join(f"Sentence number {i} is here." for i in range(40))

    async def leave():
        client = _client(service)
        await client.connect()
        await client.write_event(Synthesize(text=text).event())
        assert (await client.read_event()).type == "audio-start"
        assert (await client.read_event()).type == "audio-chunk"
        await client.disconnect()

    asyncio.run(leave())
    deadline = time.monotonic() + 120
    while log.read_text().count("client went away") == before:
        assert time.monotonic() < deadline and service["proc"].poll() is None, log.read_text()[-3000:]
        time.sleep(0.1)
    line = log.read_text().split("client went away: ")[-1].split("\n")[0]
    running, waiting = (int(w) for w in line.split() if w.isdigit())
    assert running >= 1 and running + waiting >= 30, line  # the next sentences were generating; most never began
    assert asyncio.run(_synthesize(service, "Still serving."))


def test_many_clients_at_once_each_get_their_own_answer(service):
    texts = [("Good morning to you.", "en"), ("Guten Morgen.", "de"), ("Buenos días.", "es"), ("Hello.", "en")]

    async def all_at_once():
        return await asyncio.gather(*(_synthesize(service, t, SynthesizeVoice(language=lang)) for t, lang in texts))

    solo = [asyncio.run(_synthesize(service, t, SynthesizeVoice(language=lang))) for t, lang in texts]
    assert asyncio.run(all_at_once()) == solo
