"""The speech server on Ray Serve: a local CPU Ray cluster, `python -m omnivoice.server --ray --address ...`
with two CPU replicas of the tiny model in a subprocess, driven by the official openai client and httpx; and
`serve run`'s application (behind Serve's HTTP proxy) beside it for one test.

One app for the whole module (Ray and Serve take a while to start); the replica is killed in the last test."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the [ray] extra is not installed (CI installs it: .ci/run)")
pytest.importorskip("ray.serve", reason="the [ray] extra installs ray[serve]")

from omnivoice.server.routes import tokens_sha256  # noqa: E402
from omnivoice.server.voices import BUILTIN_VOICES  # noqa: E402

from tests.audio_decode import CONTAINER, RATE, container, decode  # noqa: E402
from tests.fixtures.ray_cluster import local_cluster  # noqa: E402
from tests.fixtures.servers import closed_by_server  # noqa: E402

from .conftest import API_KEY, REF_TEXT, ROOT, Server, free_port, stop_server, wait_ready  # noqa: E402

FORMATS = ["mp3", "opus", "ogg", "flac", "wav", "pcm"]
THREE = "The first one. A second sentence here! And the third?"
PREFIX = "SERVE_REPLICA::omnivoice#SpeechModel#"
PROXY_PORT = free_port()
PROXY_READY_VAR = "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of four CPUs (the command's two replicas of one CPU each, one replica of the app behind
    Serve's proxy, one to spare), its object store kept small; its address. Serve is started here, its HTTP
    proxy on PROXY_PORT (keep_alive_timeout_s 2): the command, which starts none, leaves it as it is."""
    from ray import serve

    os.environ.pop("RAY_ADDRESS", None)
    # Serve's controller kills a proxy not ready within 5 s, and the proxy's ready reference then fails the start:
    # beside two CPU hogs on 2 cores every test of the module errored so. The controller inherits this from the
    # raylet, which this process starts.
    saved = os.environ.get(PROXY_READY_VAR)
    os.environ[PROXY_READY_VAR] = "60"
    try:
        with local_cluster(ROOT, num_cpus=4, object_store_memory=100 * 2**20, logging_level="ERROR") as address:
            serve.start(http_options={"host": "127.0.0.1", "port": PROXY_PORT, "keep_alive_timeout_s": 2})
            yield address
    finally:
        if saved is None:
            os.environ.pop(PROXY_READY_VAR, None)
        else:
            os.environ[PROXY_READY_VAR] = saved


@pytest.fixture(scope="module")
def rserver(cluster, tiny_gguf, tmp_path_factory):
    """`python -m omnivoice.server --ray` joined to the cluster: two CPU replicas, an API key."""
    folder = tmp_path_factory.mktemp("ray-server")
    port = free_port()
    log = folder / "server.log"
    cmd = [sys.executable, "-m", "omnivoice.server", "--ray", "--address", cluster, "--replicas", "2",
           "--gpus-per-replica", "0", "--threads", "1", "--model", str(tiny_gguf["f32"]),
           "--codec", str(tiny_gguf["codec"]), "--port", str(port), "--voices", str(folder / "voices"),
           "--header-timeout", "2", "--max-upload-mb", "1"]
    env = dict(os.environ, OMNIVOICE_API_KEY=API_KEY, RAY_USAGE_STATS_ENABLED="0")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    srv = Server(f"http://127.0.0.1:{port}", folder / "voices", proc, log, API_KEY)
    try:
        wait_ready(srv, timeout=300)
        _wait_replicas(srv, 2)
        yield srv
    finally:
        stop_server(srv)


def _replica_metric(server: Server, name: str) -> dict[str, float]:
    """{replica id: value} of one per-replica series of /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(httpx.get(f"{server.url}/metrics", timeout=30).text):
        for s in family.samples:
            if s.name == name and "replica" in s.labels:
                out[s.labels["replica"]] = s.value
    return out


def _wait_replicas(server: Server, n: int, timeout: float = 180, exclude: frozenset = frozenset()) -> set:
    """Wait until /metrics shows `n` loaded replicas (none of `exclude`); their ids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loaded = {r for r, v in _replica_metric(server, "omnivoice_model_loaded").items() if v == 1}
        if len(loaded) == n and not loaded & exclude:
            return loaded
        time.sleep(0.5)
    pytest.fail(f"/metrics did not show {n} replicas:\n{server.log.read_text()[-3000:]}")


def _say(server: Server, body: dict) -> httpx.Response:
    with server.client() as c:
        return c.post("/v1/audio/speech", json={"model": "tts-1", "response_format": "pcm", "stream_format": None,
                                                **body})


# ----------------------------------------------------------------------------------------------- the API
@pytest.fixture(scope="module")
def pcm_reference(rserver, ov):
    r = rserver.openai().audio.speech.with_raw_response.create(
        model="tts-1", input="Hello there.", voice="alloy", response_format="pcm", extra_body={"seed": 5,
                                                                                                "num_step": 2,
                                                                                                "stream_format": None})
    solo = ov.synthesize("Hello there.", instruct=BUILTIN_VOICES["alloy"], seed=5, num_step=2)
    assert r.headers["x-omnivoice-tokens-sha256"] == tokens_sha256(solo.tokens)
    return decode(r.content, "pcm"), r.headers["x-omnivoice-tokens-sha256"]


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format(rserver, pcm_reference, fmt):
    reference, sha = pcm_reference
    r = rserver.openai().audio.speech.with_raw_response.create(
        model="tts-1", input="Hello there.", voice="alloy", response_format=fmt, extra_body={"seed": 5,
                                                                                              "num_step": 2,
                                                                                              "stream_format": None})
    assert r.headers["x-omnivoice-tokens-sha256"] == sha
    if fmt != "pcm":
        assert container(r.content) == CONTAINER[fmt]
    audio = decode(r.content, fmt)
    assert len(audio) == len(reference)
    if fmt in ("flac", "wav"):
        np.testing.assert_array_equal(audio, reference)


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_streams_come_a_sentence_at_a_time(rserver):
    body = {"model": "tts-1", "input": THREE, "voice": "ash", "response_format": "pcm", "seed": 9, "num_step": 2}
    with rserver.client() as c, c.stream("POST", "/v1/audio/speech", json={**body, "stream_format": "audio"}) as r:
        assert r.status_code == 200 and r.headers.get("transfer-encoding") == "chunked"
        pieces = [p for p in r.iter_raw() if p]
    assert len(pieces) >= 3  # one per sentence at least: relayed as they come, not gathered
    with rserver.openai().audio.speech.with_streaming_response.create(
            model="tts-1", input=THREE, voice="ash", response_format="pcm", stream_format="sse",
            extra_body={"seed": 9, "num_step": 2}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(block[len("data: "):]) for block in r.read().decode().split("\n\n") if block.strip()]
    assert [e["type"] for e in events] == ["speech.audio.delta"] * 3 + ["speech.audio.done"]
    assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == b"".join(pieces)
    assert events[-1]["usage"]["input_tokens"] > 0


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_the_websocket_speaks_text_in_pieces_as_the_whole_text(rserver):
    """WS /v1/audio/speech/stream through Serve's proxy: each sentence is a request of its own (on either
    replica); text split at every character gives the whole text's sentences and audio."""
    from omnivoice.text.streaming import stream_sentences

    from .test_ws import TEXT, _check_offsets, _utterance, _ws

    with _ws(rserver) as ws:
        whole, audio, _ = _utterance(ws, {"seed": 7, "language": "English"}, [TEXT])
    with _ws(rserver) as ws:
        split, audio_split, _ = _utterance(ws, {"seed": 7, "language": "English"}, list(TEXT))
    assert _check_offsets(whole) == _check_offsets(split) == stream_sentences(TEXT)
    assert audio_split == audio


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_auth_and_errors_are_the_plain_servers(rserver):
    r = httpx.post(f"{rserver.url}/v1/audio/speech", json={"input": "x"}, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = httpx.post(f"{rserver.url}/v1/audio/speech", json={"input": "x"}, timeout=30,
                   headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{rserver.url}/health", timeout=30).status_code == 200  # open, as in the plain server
    for body, status, code in (({"input": "x", "speed": 9}, 400, "invalid_value"),
                               ({"input": "x", "colour": 1}, 400, "unknown_parameter"),
                               ({"input": "x", "response_format": "aac"}, 400, "unsupported_response_format"),
                               ({"input": "x", "voice": "nobody"}, 404, "voice_not_found"),
                               ({"input": "x", "language": "Klingonese"}, 400, "invalid_value")):
        r = _say(rserver, body)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    from openai import NotFoundError

    with pytest.raises(NotFoundError):
        rserver.openai().models.retrieve("whisper-1")


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_an_uploaded_voice_serves_from_both_replicas(rserver, ov, ref_wav):
    """Uploaded once, used by eight requests at once: both replicas make some of them, with the tokens of the
    Python API cloning from the same clip."""
    with rserver.client() as c, open(ref_wav, "rb") as f:
        r = c.post("/v1/audio/voices", data={"name": "me", "transcript": REF_TEXT},
                   files={"file": ("ref.wav", f, "audio/wav")})
    assert r.status_code == 201, r.text
    voice = ov.create_voice(str(ref_wav), REF_TEXT)
    before = _settled(rserver)
    bodies = [{"input": f"Cloned line {i} is here.", "voice": "me", "seed": i, "num_step": 8} for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda b: _say(rserver, b), bodies))
    for body, r in zip(bodies, answers):
        assert r.status_code == 200, r.text
        solo = ov.synthesize(body["input"], voice=voice, seed=body["seed"], num_step=8)
        assert r.headers["x-omnivoice-tokens-sha256"] == tokens_sha256(solo.tokens)
    after = _settled(rserver, before, 8)
    assert all(after[r] > before.get(r, 0) for r in after), (before, after)  # both replicas made some


def _settled(server: Server, before: dict | None = None, more: int = 0, timeout: float = 60) -> dict:
    """Each replica's packed requests so far, once the replicas' reports (a second old at most) count `more`
    requests than `before` in all."""
    deadline = time.monotonic() + timeout
    while True:
        now = _replica_metric(server, "omnivoice_engine_packed_requests_total")
        if before is None or sum(now.values()) - sum(before.values()) >= more or time.monotonic() > deadline:
            return now
        time.sleep(0.3)


def _sixteen() -> list[dict]:
    voices = [None, "alloy", "me", "onyx"]
    texts = ["Hi.", "Hello there.", "Good morning to you.", "One more."]
    out = []
    for i in range(16):
        body = {"input": texts[i % 4], "seed": 100 + i, "num_step": 1 + i % 3, "speed": 1.0 + 0.1 * (i % 2)}
        if voices[i // 4]:
            body["voice"] = voices[i // 4]
        out.append(body)
    return out


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_16_concurrent_requests_equal_their_solo_synthesis(rserver, ov, ref_wav):
    voice = ov.create_voice(str(ref_wav), REF_TEXT)
    bodies = _sixteen()
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda b: _say(rserver, b), bodies))
    for i, (body, r) in enumerate(zip(bodies, answers)):
        assert r.status_code == 200, r.text
        v = body.get("voice")
        kw = ({"voice": voice} if v == "me" else {"instruct": BUILTIN_VOICES[v]} if v else {})
        solo = ov.synthesize(body["input"], seed=body["seed"], num_step=body["num_step"], speed=body["speed"], **kw)
        assert r.headers["x-omnivoice-tokens-sha256"] == tokens_sha256(solo.tokens), f"request {i}"


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_metrics_label_each_replica_and_carry_serves(rserver):
    assert len(_replica_metric(rserver, "omnivoice_model_loaded")) == 2
    assert len(_replica_metric(rserver, "omnivoice_engine_steps_total")) == 2
    deadline = time.monotonic() + 60  # Ray's metrics agent exports what the workers report every few seconds
    while "ray_serve_" not in httpx.get(f"{rserver.url}/metrics", timeout=30).text:
        assert time.monotonic() < deadline, "no ray_serve_* metrics in /metrics"
        time.sleep(1)


def _guards_hold(server: Server, head_timeout: bool) -> None:
    """A keep-alive connection idle after a response is closed; with `head_timeout`, also one that never sends a
    whole head; two Authorization headers are a 400, a body over the 1 MiB limit a 413 (by its Content-Length, or
    sent chunked)."""
    import socket

    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert s.recv(12) == b"HTTP/1.1 200"
        assert closed_by_server(s, within=60)  # Serve's default keep_alive_timeout_s is 90
    if head_timeout:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: loc")
            assert closed_by_server(s, within=60)
    r = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "x"}, timeout=30,
                   headers=[("Authorization", f"Bearer {API_KEY}"), ("Authorization", f"Bearer {API_KEY}")])
    assert (r.status_code, r.json()["error"]["code"]) == (400, "duplicate_header")
    big = b"x" * (2 * 2**20)
    with server.client() as c:
        r = c.post("/v1/audio/speech", content=big, headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()["error"]["code"]) == (413, "request_too_large")
        r = c.post("/v1/audio/speech", content=iter([big[:2**18]] * 8), headers={"Content-Type": "application/json"})
        assert (r.status_code, r.json()["error"]["code"]) == (413, "request_too_large")


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_the_commands_connection_guards_hold(rserver):
    """The command serves HTTP itself, with the plain server's guards (--header-timeout 2, --max-upload-mb 1)."""
    _guards_hold(rserver, head_timeout=True)


@pytest.fixture
def proxied(rserver, tiny_gguf, tmp_path):
    """The application of `serve run omnivoice.server.ray:app` (SpeechIngress behind Serve's HTTP proxy, one CPU
    replica), deployed beside the command's on the same cluster, its key and a 1 MiB body limit; deleted after."""
    from ray import serve

    from omnivoice.server.app import ServerConfig
    from omnivoice.server.ray import absolute_paths, build

    config = ServerConfig(model=str(tiny_gguf["f32"]), codec=str(tiny_gguf["codec"]), backend="cpu", threads=1,
                          voices=tmp_path / "voices", api_key=API_KEY, max_upload_bytes=2**20)
    serve.run(build(absolute_paths(config), gpus_per_replica=0), name="proxied", route_prefix="/")
    server = Server(f"http://127.0.0.1:{PROXY_PORT}", tmp_path / "voices", None, tmp_path / "none.log", API_KEY)
    deadline = time.monotonic() + 120
    while httpx.get(f"{server.url}/health", timeout=30).status_code != 200:  # the ingress's backend loads
        assert time.monotonic() < deadline, "the app behind Serve's proxy never became ready"
        time.sleep(0.3)
    try:
        yield server
    finally:
        serve.delete("proxied")


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_behind_serves_proxy_the_apps_guards_hold_and_a_client_that_leaves_stops_the_work(proxied, rserver):
    """`serve run`'s application behind Serve's HTTP proxy (docs/SERVING.md, "Connections"): the same tokens as
    the command's; the proxy closes a keep-alive connection idle after a response (its keep_alive_timeout_s) and
    the app's gates answer through it; a client that leaves a stream, having told Ray 2.60's proxy not to watch
    for that (x-request-disconnect-disabled, a header the proxy takes from any client), still stops its work:
    the ingress sees the disconnect itself."""
    body = {"input": "Hello there.", "voice": "alloy", "seed": 5, "num_step": 2}
    here, there = _say(proxied, body), _say(rserver, body)
    assert here.status_code == 200, here.text
    assert here.headers["x-omnivoice-tokens-sha256"] == there.headers["x-omnivoice-tokens-sha256"]
    _guards_hold(proxied, head_timeout=False)

    _leave_a_long_stream(proxied, {"x-request-disconnect-disabled": "?1"})


def _leave_a_long_stream(server: Server, headers: dict | None = None) -> None:
    """Stream 40 sentences of 64 steps, read the first audio and hang up; return once /metrics counts the request
    cancelled and no replica has an active request."""
    cancelled0 = server.metric("omnivoice_cancelled_requests_total")
    long = " ".join(f"Sentence number {i} is here." for i in range(40))
    body = {"model": "tts-1", "input": long, "response_format": "pcm", "num_step": 64, "stream_format": "audio"}
    with server.client() as c, c.stream("POST", "/v1/audio/speech", json=body, headers=headers) as r:
        assert r.status_code == 200
        assert next(r.iter_raw())
    deadline = time.monotonic() + 120
    while server.metric("omnivoice_cancelled_requests_total") <= cancelled0 or \
            sum(_replica_metric(server, "omnivoice_active_requests").values()) > 0:
        assert time.monotonic() < deadline, "the request was not cancelled"
        time.sleep(0.3)


@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_a_client_that_leaves_a_stream_stops_the_replicas_work(rserver):
    """40 sentences of 64 steps streamed; the client reads the first audio and hangs up: the replicas run far
    fewer than the 40 x 64 steps the whole request needs, and go idle."""
    steps0 = sum(_replica_metric(rserver, "omnivoice_engine_steps_total").values())
    _leave_a_long_stream(rserver)
    time.sleep(2.5)  # over two routing-stats periods: the replicas' last steps are in /metrics
    steps = sum(_replica_metric(rserver, "omnivoice_engine_steps_total").values()) - steps0
    assert 0 < steps < 40 * 64


# ----------------------------------------------------------------------------------------------- faults (last)
@pytest.mark.slow  # the module's Ray cluster and Serve app (15-30 s to start here)
def test_a_replica_killed_under_load_fails_its_requests_cleanly_and_is_replaced(rserver):
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    replicas = sorted(n[len(PREFIX):] for n in names if n.startswith(PREFIX))
    assert len(replicas) == 2
    victim = replicas[0]
    text = " ".join(f"Load sentence {i} goes here." for i in range(6))
    bodies = [{"input": text, "seed": i, "num_step": 32} for i in range(12)]
    with ThreadPoolExecutor(12) as pool:
        # a request every 0.2 s, so that each is routed knowing where the ones before it went (a burst sent at
        # once was, beside a CPU hog, routed whole to one replica: its queue-length probe answered first)
        futures = []
        for b in bodies:
            futures.append(pool.submit(_say, rserver, b))
            time.sleep(0.2)
        deadline = time.monotonic() + 60
        while not all(_replica_metric(rserver, "omnivoice_active_requests").get(r, 0) for r in replicas):
            assert time.monotonic() < deadline, "the requests never ran on both replicas"
            time.sleep(0.1)
        ray.kill(ray.get_actor(PREFIX + victim, namespace="serve"), no_restart=True)
        answers = [f.result(timeout=180) for f in futures]  # no hang
    failed = [r for r in answers if r.status_code != 200]
    assert failed, "no request was on the killed replica"
    assert len(failed) < len(answers)
    for r in failed:
        assert r.status_code == 503 and r.json()["error"]["code"] == "replica_failed", r.text
    for r in answers:
        if r.status_code == 200:
            assert len(r.content) > 0
    # Serve replaces it; requests meanwhile and after are served
    after = _wait_replicas(rserver, 2, exclude=frozenset({victim}))
    assert victim not in after
    r = _say(rserver, {"input": "After the fault.", "num_step": 2, "seed": 1})
    assert r.status_code == 200, r.text


def test_the_documented_serve_config_builds_the_app():
    """docs/serve.yaml is a valid Serve config, and its application's args build the app (two deployments, the
    model's autoscaled by queue length, routed by LeastQueuedAudio)."""
    import yaml
    from ray.serve.schema import ServeDeploySchema

    from omnivoice.server.ray import WORKER_ENV, app

    config = ServeDeploySchema.model_validate(yaml.safe_load((ROOT / "docs" / "serve.yaml").read_text()))
    (spec,) = config.applications
    assert spec.import_path == "omnivoice.server.ray:app"
    built = app(spec.args)
    model = built._bound_deployment.init_args[0]._bound_deployment
    assert {d.name for d in spec.deployments} == {"SpeechModel", "SpeechIngress"}
    assert model.name == "SpeechModel"
    auto = model._deployment_config.autoscaling_config
    assert (auto.min_replicas, auto.max_replicas, auto.target_ongoing_requests) == (1, 4, 16)
    assert model._deployment_config.request_router_config.request_router_class.endswith("LeastQueuedAudio")
    # both deployments' workers return audio inline (WORKER_ENV), also where the config replaces the options
    ingress = built._bound_deployment
    for options in (model.ray_actor_options, ingress.ray_actor_options,
                    next(d.ray_actor_options for d in spec.deployments if d.name == "SpeechModel").model_dump()):
        assert options["runtime_env"]["env_vars"].items() >= WORKER_ENV.items()
    with pytest.raises(ValueError, match="--replicas"):
        app({**spec.args, "replicas": "4..1"})


def test_serve_args_are_typed_as_the_server_configs_fields():
    """A Serve arg comes as text: a flag's "false" is False (bool("false") is True), numbers are numbers."""
    import typing

    from omnivoice.server.app import ServerConfig
    from omnivoice.server.ray import _typed

    hints = typing.get_type_hints(ServerConfig)
    assert _typed("short_first_piece", hints["short_first_piece"], "false") is False
    assert _typed("short_first_piece", hints["short_first_piece"], "True") is True
    assert _typed("max_step_positions", hints["max_step_positions"], "8192") == 8192
    assert _typed("first_audio_ms", hints["first_audio_ms"], "150") == 150.0
    with pytest.raises(ValueError, match="short_first_piece='maybe' is not true or false"):
        _typed("short_first_piece", hints["short_first_piece"], "maybe")


def test_bad_ray_flags_are_one_error_line_before_ray_starts(tiny_gguf):
    r = subprocess.run([sys.executable, "-m", "omnivoice.server", "--ray", "--replicas", "3..1", "--model",
                        str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"])], cwd=ROOT, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, RAY_ADDRESS=""))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "error: --replicas 3..1: need 1 <= MIN <= MAX"
    import socket

    with socket.socket() as taken:  # a port in use: the command binds it before Ray starts
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "omnivoice.server", "--ray", "--gpus-per-replica", "0", "--model",
                            str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--port", str(port)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, RAY_ADDRESS=""))
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines()[-1] == f"error: cannot listen on 127.0.0.1:{port}: Address already in use " \
                                                "(--host, --port)"
