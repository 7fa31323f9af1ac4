"""Auth, OpenAI's error shape for every failure, /v1/models, /health and /metrics."""

from __future__ import annotations

import httpx
import openai
import pytest

ERROR_KEYS = {"message", "type", "param", "code"}


def _error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    assert "Traceback" not in r.text
    return body["error"]


def test_401_without_the_key(server):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": server.api_key}):
        r = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "x"}, headers=headers)
        e = _error(r, 401)
        assert e["type"] == "authentication_error" and r.headers["www-authenticate"] == "Bearer"
    assert _error(httpx.get(f"{server.url}/v1/audio/voices"), 401)["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong", max_retries=0).audio.speech.create(
            model="tts-1", input="x", voice="alloy")
    assert httpx.get(f"{server.url}/health").status_code == 200  # health and metrics stay open


def test_401_is_counted_under_the_route_called(server):
    before = server.metric("omnivoice_requests_total", route="/v1/audio/voices/{name}", status="401")
    assert httpx.get(f"{server.url}/v1/audio/voices/someone").status_code == 401
    assert server.metric("omnivoice_requests_total", route="/v1/audio/voices/{name}", status="401") == before + 1


def test_an_unknown_response_format_lists_only_what_is_answered(server):
    with server.client() as c:
        e = _error(c.post("/v1/audio/speech", json={"input": "x", "response_format": "xyz"}), 400)
    assert e["param"] == "response_format" and e["code"] == "invalid_value"
    assert "'xyz'" in e["message"] and "mp3, opus, ogg, flac, wav, pcm" in e["message"], e
    assert "aac" not in e["message"], e


def test_bad_json_is_400_in_openai_shape(server):
    with server.client() as c:
        for body in (b"{bad json", b"", b"[1, 2]", b'"text"'):
            e = _error(c.post("/v1/audio/speech", content=body, headers={"content-type": "application/json"}), 400)
            assert e["code"] == "invalid_json" and e["type"] == "invalid_request_error"


@pytest.mark.parametrize("speed", [0.2, 4.5, -1, "fast"])
def test_out_of_range_speed_is_400(server, speed):
    with pytest.raises(openai.BadRequestError) as e:
        server.openai().audio.speech.create(model="tts-1", input="x", voice="alloy", speed=speed)
    assert e.value.status_code == 400
    assert set(e.value.body) == ERROR_KEYS and e.value.body["param"] == "speed"


@pytest.mark.parametrize("body, param, code", [
    ({"voice": "alloy"}, "input", "missing_required_parameter"),
    ({"input": ""}, "input", "invalid_value"),
    ({"input": "x", "colour": "red"}, "colour", "unknown_parameter"),
    ({"input": "x", "response_format": "m4a"}, "response_format", "invalid_value"),
    ({"input": "x", "response_format": "aac"}, "response_format", "unsupported_response_format"),
    ({"input": "x", "stream_format": "video"}, "stream_format", "invalid_value"),
    ({"input": "x", "num_step": 0}, "num_step", "invalid_value"),
    ({"input": "x", "duration": -2}, "duration", "invalid_value"),
    ({"input": "x", "language": "Klingon"}, None, "invalid_value"),
    ({"input": "x", "instructions": "purple, robot"}, None, "invalid_value"),
    ({"input": "x" * 5000}, "input", "input_too_long"),
])
def test_bad_requests_name_the_problem(server, body, param, code):
    with server.client() as c:
        e = _error(c.post("/v1/audio/speech", json=body), 400)
    assert e["param"] == param and e["code"] == code, e
    if code == "unsupported_response_format":
        assert "aac" in e["message"] and "libsndfile" in e["message"]


def test_unknown_routes_and_methods(server):
    with server.client() as c:
        assert _error(c.get("/v1/nothing"), 404)["code"] == "not_found"
        _error(c.get("/v1/audio/speech"), 405)
        _error(c.get("/v1/models/tts-9"), 404)


def test_models(server):
    models = server.openai().models.list()
    assert [m.id for m in models.data] == ["omnivoice"]
    assert server.openai().models.retrieve("omnivoice").id == "omnivoice"


def test_health(server):
    r = httpx.get(f"{server.url}/health")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["model"].endswith(".gguf")


def test_metrics_in_prometheus_text_format(server):
    with server.client() as c:
        c.post("/v1/audio/speech", json={"input": "Counted.", "response_format": "wav", "num_step": 1})
        c.post("/v1/audio/speech", json={"input": "x", "speed": 9})
    assert server.metric("omnivoice_requests_total", route="/v1/audio/speech", status="200") >= 1
    assert server.metric("omnivoice_requests_total", route="/v1/audio/speech", status="400") >= 1
    assert server.metric("omnivoice_audio_seconds_total") > 0
    assert server.metric("omnivoice_real_time_factor_count") >= 1
    assert server.metric("omnivoice_real_time_factor_bucket", le="+Inf") >= 1
    assert server.metric("omnivoice_queue_depth") == 0 and server.metric("omnivoice_model_loaded") == 1


def test_metrics_count_the_engines_work(server):
    names = ("omnivoice_engine_steps_total", "omnivoice_engine_packed_requests_total", "omnivoice_engine_graphs_total")
    before = [server.metric(n) for n in names]
    seconds = server.metric("omnivoice_engine_seconds_total", phase="lm_run")
    with server.client() as c:
        assert c.post("/v1/audio/speech", json={"input": "Three steps.", "response_format": "pcm",
                                                "num_step": 3}).status_code == 200
    # one request alone: three packed steps of one request, on one graph
    assert [server.metric(n) - b for n, b in zip(names, before)] == [3, 3, 1]
    assert server.metric("omnivoice_engine_seconds_total", phase="lm_run") > seconds
    assert server.metric("omnivoice_engine_seconds_total", phase="decode") > 0
