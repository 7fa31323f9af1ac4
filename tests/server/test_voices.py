"""The voice library over HTTP: upload, use, list, delete; cloning; names that must never become paths."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.codec.voice import VoicePrompt
from omnivoice.server.routes import tokens_sha256

from .conftest import REF_TEXT

FAST = {"num_step": 2}


def _upload(client, name, ref_wav, transcript=REF_TEXT):
    with open(ref_wav, "rb") as f:
        return client.post("/v1/audio/voices", data={"name": name, "transcript": transcript},
                           files={"file": ("ref.wav", f, "audio/wav")})


def _say(client, voice, text="Cloned speech.", seed=4):
    r = client.post("/v1/audio/speech", json={"model": "tts-1", "input": text, "voice": voice,
                                              "response_format": "pcm", "seed": seed, "stream_format": None, **FAST})
    assert r.status_code == 200, r.text
    return r.headers["x-omnivoice-tokens-sha256"]


@pytest.fixture(scope="module")
def api_voice(ov, ref_wav):
    return ov.create_voice(str(ref_wav), REF_TEXT)


def test_uploaded_voice_equals_cloning_through_the_python_api(server, ov, ref_wav, api_voice):
    with server.client() as c:
        r = _upload(c, "me", ref_wav)
        assert r.status_code == 201, r.text
        assert r.json()["id"] == "me" and r.json()["transcript"] == api_voice.text
        stored = VoicePrompt.load(server.voices / "me.rvq")  # encoded once, kept in the VoicePrompt format
        np.testing.assert_array_equal(stored.codes, api_voice.codes)
        assert stored.text == api_voice.text and stored.rms == pytest.approx(api_voice.rms, rel=1e-6)
        expected = tokens_sha256(ov.synthesize("Cloned speech.", voice=api_voice, seed=4, **FAST).tokens)
        assert _say(c, {"id": "me"}) == expected
        assert _say(c, "me") == expected
        c.delete("/v1/audio/voices/me")


def test_one_off_clone_equals_the_python_api(server, ov, ref_wav):
    before = sorted(server.voices.iterdir())
    with server.client() as c, open(ref_wav, "rb") as f:
        r = c.post("/v1/audio/speech/clone", files={"file": ("ref.wav", f, "audio/wav")},
                   data={"transcript": REF_TEXT, "input": "Once only.", "response_format": "pcm", "seed": "6",
                         "num_step": "2", "speed": "1.1", "stream_format": ""})  # empty: one whole answer
    assert r.status_code == 200, r.text
    expected = ov.synthesize("Once only.", ref_audio=str(ref_wav), ref_text=REF_TEXT, seed=6, speed=1.1, **FAST)
    assert r.headers["x-omnivoice-tokens-sha256"] == tokens_sha256(expected.tokens)
    assert sorted(server.voices.iterdir()) == before  # nothing stored


def test_a_save_voice_folder_works_as_is(server, ov, ref_wav, api_voice):
    """`saved` was written by `python -m omnivoice.tts --save-voice` into the voices folder."""
    with server.client() as c:
        listed = {v["id"]: v for v in c.get("/v1/audio/voices").json()["data"]}
        assert listed["saved"]["type"] == "audio_sample" and listed["saved"]["transcript"] == api_voice.text
        assert listed["onyx"]["type"] == "builtin"
        expected = tokens_sha256(ov.synthesize("Cloned speech.", voice=api_voice, seed=4, **FAST).tokens)
        assert _say(c, "saved") == expected


def test_voice_lifecycle(server, ref_wav):
    with server.client() as c:
        assert _upload(c, "temp-1", ref_wav).status_code == 201
        again = _upload(c, "temp-1", ref_wav)
        assert again.status_code == 409 and again.json()["error"]["code"] == "voice_exists"
        got = c.get("/v1/audio/voices/temp-1").json()
        assert got["id"] == "temp-1" and got["duration"] > 0 and got["object"] == "audio.voice"
        assert c.delete("/v1/audio/voices/temp-1").json() == {"id": "temp-1", "object": "audio.voice.deleted",
                                                               "deleted": True}
        for r in (c.get("/v1/audio/voices/temp-1"), c.delete("/v1/audio/voices/temp-1")):
            assert r.status_code == 404 and r.json()["error"]["code"] == "voice_not_found"
        assert not list(server.voices.glob("temp-1*"))


def test_the_openai_client_can_create_and_delete_a_voice(server, ref_wav):
    client = server.openai()
    with open(ref_wav, "rb") as f:
        voice = client.audio.voices.create(name="from-openai", audio_sample=f, consent="recorded-consent",
                                           extra_body={"transcript": REF_TEXT})
    assert voice.id == "from-openai" and voice.type == "audio_sample"
    assert client.audio.voices.delete("from-openai").deleted


@pytest.mark.parametrize("name", ["../x", "a/b", "a" * 65, "..", "x y"])
def test_bad_voice_names_are_refused_everywhere(server, ref_wav, name, tmp_path):
    with server.client() as c:
        r = _upload(c, name, ref_wav)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_voice_name"
        r = c.post("/v1/audio/speech", json={"input": "x", "voice": name})
        assert r.status_code == 400 and r.json()["error"]["param"] == "voice"
        r = c.post("/v1/audio/speech", json={"input": "x", "voice": {"id": name}})
        assert r.status_code == 400
        quoted = name.replace("/", "%2F").replace(".", "%2E").replace(" ", "%20")
        for r in (c.get(f"/v1/audio/voices/{quoted}"), c.delete(f"/v1/audio/voices/{quoted}")):
            assert r.status_code in (400, 404) and "error" in r.json(), (r.status_code, r.text)
    assert not any(p.name.endswith(".rvq") for p in server.voices.parent.iterdir())


def test_unknown_voice_is_404(server):
    import openai

    with pytest.raises(openai.NotFoundError) as e:
        server.openai().audio.speech.create(model="tts-1", input="x", voice="nobody-here")
    assert e.value.status_code == 404 and e.value.body["code"] == "voice_not_found"
    with server.client() as c:
        r = c.post("/v1/audio/speech", json={"input": "x", "voice": {"id": "alloy"}})  # ids are library voices
        assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_bad_uploads_are_400(server, ref_wav):
    with server.client() as c:
        r = c.post("/v1/audio/voices", data={"name": "junk", "transcript": "t"},
                   files={"file": ("junk.wav", b"not audio at all", "audio/wav")})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_audio"
        message = r.json()["error"]["message"]
        assert "junk.wav" in message and "Format not recognised" in message
        assert "object at 0x" not in message and "BytesIO" not in message, message
        r = _upload(c, "notext", ref_wav, transcript=" ")
        assert r.status_code == 400 and r.json()["error"]["param"] == "transcript"
        r = c.post("/v1/audio/voices", data={"name": "nofile", "transcript": "t"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "file"
        with open(ref_wav, "rb") as f:
            r = c.post("/v1/audio/speech/clone", files={"file": ("ref.wav", f)},
                       data={"transcript": "t", "input": "x", "voice": "alloy"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"
    assert not list(server.voices.glob("junk*")) and not list(server.voices.glob("no*"))
