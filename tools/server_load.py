"""Load test of the speech server: time to first audio of a streamed text, and throughput and latency with
1, 8 and 32 concurrent clients.

    python tools/server_load.py --url http://127.0.0.1:8000 [--api-key KEY]
    python tools/server_load.py --model M.gguf --codec C.gguf --backend cuda      # starts its own server
    python tools/server_load.py --model M.gguf --codec C.gguf --backend cuda --in-process   # the engine alone

1. Time to first audio byte: a three-sentence text streamed (stream_format audio, pcm), from sending the
   request to the first byte of audio; --ttfb-repeats times, one after another.
   Over the WebSocket (WS /v1/audio/speech/stream; not with --in-process): the same text sent as a chat model
   sends it, a token (a word, or a mark) every 1/--tokens-per-s seconds (default 30), and the first audio
   frame timed from the sending of the token that ends the first sentence (the server knows the sentence is
   complete one token later, when the next one has begun: that wait is part of the figure); --ws-repeats times.
2. For each client count C: C clients each send --requests whole requests (pcm) one after another (closed
   loop; the first round of one request each is a warm-up that is not counted when --warmup), all of one
   sentence, or with --vary of 2 to 18 words in turn. Reported: audio seconds produced per wall second,
   requests per second, and request latency p50 / p95; and, from the server's /metrics, what its engine
   thread did meanwhile (steps, mean batch, graph switches, seconds by phase; summed over a Ray Serve app's
   replicas, whose engines' seconds then add up to more than the wall time).

The Ray Serve app (docs/SERVING.md) is started with the server's own flags after --server-args:
    python tools/server_load.py --model M.gguf --codec C.gguf --backend cuda --server-args --ray --replicas 2

With --in-process there is no server: the same requests (the server's schema and voices make them) go to
`OmniVoice.engine()` in this process, so that a run beside one over HTTP shows what the web layer costs.
Streaming loads (--loads closed,conversational; the default `whole` is part 2 above): for each client count C,
C clients each send --requests streamed requests (stream_format audio, pcm) of one sentence each, of 1 to 25
words (--words LO:HI) drawn from a word list with --text-seed (every client its own texts, the same on every run
and every server):
  closed          each client sends its next request as soon as its last one has ended (no pause)
  conversational  each client plays its audio in real time before its next request (a voice agent): it waits
                  until the audio it received has played, counted from its first byte (not after its last);
                  the clients join at random times over the first --ramp-s seconds (default 5, about one
                  sentence's playback: users of a voice service do not all start in the same millisecond;
                  --ramp-s 0 is a burst, where first audio is the closed loop's at the same count)
Reported per load and count: first audio p50 / p90 / p99 (from sending to the first byte), audio seconds per
wall second, request latency p50, failed requests (errors) and 503 answers (rejected; the client waits the
Retry-After, at most --max-retry-after s, and sends its next request).

With --direct, once the server is done, the one-client requests (the same texts, voice and seeds, as the server's
schema makes them) run one after another through `OmniVoice.synthesize` in this process: the server's audio
seconds per second at one client against the library's (`direct.server_ratio`).

Results go to stdout as a Markdown table and, with --json, to a file (with the host's CPU, load and the
server's device).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # --in-process imports omnivoice from this tree

THREE = ("The first sentence is short. The second sentence is a little longer than the first one was. "
         "And the third sentence closes this small paragraph of text.")
ONE = "The quick brown fox jumps over the lazy dog near the bank of the river."
# --vary: each request one of these (2 to 18 words), so that the packed lengths differ as a real load's do
VARIED = ("Good morning.",
          "Please hold the door for me.",
          "The quick brown fox jumps over the lazy dog near the bank of the river.",
          "Our train leaves at seven, so pack your bags tonight and set an alarm.",
          "She opened the old wooden box and found a letter her grandmother had written long ago, "
          "folded twice.",
          "Rain again today.",
          "If the meeting runs late, start dinner without me and keep a plate warm in the oven.",
          "Numbers, dates and names all come out clearly when the speaker takes a breath between them.")
# --loads closed/conversational: sentences of 1 to 25 of these words, drawn with --text-seed
WORDS = ("the a of and to in is it you that he was for on are with as his they be at one have this from or had by "
         "word but what some we can out other were all there when up use your how said an each she which do "
         "their time if will way about many then them write would like so these her long make thing see him "
         "two has look more day could go come did number sound no most people my over know water than call "
         "first who may down side been now find any new work part take get place made live where after back "
         "little only round man year came show every good me give our under name very through just form "
         "sentence great think say help low line differ turn cause much mean before move right boy old too "
         "same tell does set three want air well also play small end put home read hand port large spell add "
         "even land here must big high such follow act why ask men change went light kind off need house "
         "picture try us again animal point mother world near build self earth father head stand own page "
         "should country found answer school grow study still learn plant cover food sun four between state "
         "keep eye never last let thought city tree cross farm hard start might story saw far sea draw left "
         "late run while press close night real life few north open seem together next white children begin "
         "got walk example ease paper group always music those both mark often letter until mile river car "
         "feet care second book carry took science eat room friend began idea fish mountain stop once base "
         "hear horse cut sure watch color face wood main enough plain girl usual young ready above ever red "
         "list though feel talk bird soon body dog family direct pose leave song measure door product black "
         "short numeral class wind question happen complete ship area half rock order fire south problem "
         "piece told knew pass since top whole king space heard best hour better true during hundred five "
         "remember step early hold west ground interest reach fast verb sing listen six table travel less "
         "morning ten simple several vowel toward war lay against pattern slow center love person money "
         "serve appear road map rain rule govern pull cold notice voice unit power town fine certain fly fall "
         "lead cry dark machine note wait plan figure star box noun field rest correct able pound done beauty "
         "drive stood contain front teach week final gave green oh quick develop ocean warm free minute "
         "strong special mind behind clear tail produce fact street inch multiply nothing course stay wheel "
         "full force blue object decide surface deep moon island foot system busy test record boat common "
         "gold possible plane stead dry wonder laugh thousand ago ran check game shape equate hot miss "
         "brought heat snow tire bring yes distant fill east paint language among").split()
RATE = 24000
PHASES = ("admit", "graph", "lm_ids", "lm_run", "lm_read", "wait", "maskgit", "decode")  # BatchEngine.timings


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def sentence_texts(seed: int, count: int, low: int = 1, high: int = 25) -> list[str]:
    """`count` one-sentence texts of `low` to `high` words (uniform) drawn from WORDS with `seed`: the same on
    every run, so that two servers measured one after another get the same requests."""
    import random

    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
        if len(words) > 6 and rng.random() < 0.5:  # a clause mark in some of the longer ones, as speech has
            words[rng.randrange(2, len(words) - 2)] += ","
        texts.append(" ".join(words).capitalize() + rng.choice(".....?!"))
    return texts


def client_texts(seed: int, client: int, count: int, words: tuple[int, int] = (1, 25)) -> list[str]:
    """The `count` texts client `client` of a streaming load sends with --text-seed `seed` (every client its own)."""
    return sentence_texts(seed * 100_003 + client, count, *words)


def word_range(text: str) -> tuple[int, int]:
    """--words LO:HI, 1 <= LO <= HI."""
    try:
        low, high = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI (two whole numbers, e.g. 12:15), got {text!r}") from None
    if not 1 <= low <= high:
        raise argparse.ArgumentTypeError(f"expected 1 <= LO <= HI, got {text!r}")
    return low, high


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Http:
    """The server over HTTP: whole requests (pcm), streamed ones, and its engine's counters from /metrics."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def describe(self) -> dict:
        return (await self.client.get("/health")).json()

    async def first_audio(self, body: dict) -> dict:
        """Seconds to the first audio byte and to the end of one streamed request."""
        t0 = time.perf_counter()
        first, n = None, 0
        async with self.client.stream("POST", "/v1/audio/speech",
                                      json={**body, "stream_format": "audio", "response_format": "pcm"}) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}")
            async for chunk in r.aiter_raw():
                if chunk and first is None:
                    first = time.perf_counter() - t0
                n += len(chunk)
        return {"first_audio_s": first, "total_s": time.perf_counter() - t0, "audio_s": n / 2 / RATE}

    async def stream_once(self, body: dict) -> dict:
        """One streamed pcm request, not raising: {"status", "first_audio_s", "total_s", "audio_s",
        "retry_after_s" (a 503's), "error" (other failures)}."""
        t0 = time.perf_counter()
        first, n = None, 0
        try:
            async with self.client.stream("POST", "/v1/audio/speech",
                                          json={**body, "stream_format": "audio", "response_format": "pcm"}) as r:
                if r.status_code != 200:
                    text = (await r.aread()).decode(errors="replace")[:300]
                    return {"status": r.status_code, "error": text, "total_s": time.perf_counter() - t0,
                            "retry_after_s": float(r.headers.get("retry-after") or 1)}
                async for chunk in r.aiter_raw():
                    if chunk and first is None:
                        first = time.perf_counter() - t0
                    n += len(chunk)
        except (httpx.HTTPError, OSError) as e:  # a dropped connection, a stream cut short: an error, counted
            return {"status": None, "error": f"{type(e).__name__}: {e}", "total_s": time.perf_counter() - t0}
        if first is None:
            return {"status": 200, "error": "no audio", "total_s": time.perf_counter() - t0}
        return {"status": 200, "first_audio_s": first, "total_s": time.perf_counter() - t0, "audio_s": n / 2 / RATE}

    async def ws_first_audio(self, body: dict, tokens_per_s: float) -> dict:
        """THREE over the WebSocket at `tokens_per_s`: seconds from the token that ends the first sentence (and
        from the first token) to the first audio frame, and to done."""
        from websockets.asyncio.client import connect

        tokens = re.findall(r"\s*\w+|\s*[^\w\s]", THREE)
        assert "".join(tokens) == THREE
        first_end = THREE.index(".") + 1  # THREE's first sentence ends at its first mark
        end_token = next(i for i in range(len(tokens)) if len("".join(tokens[:i + 1])) >= first_end)
        url = str(self.client.base_url).replace("http", "ws", 1) + "/v1/audio/speech/stream"
        headers = {k: v for k, v in self.client.headers.items() if k.lower() == "authorization"}
        start = {"type": "start", "response_format": "pcm", **{k: v for k, v in body.items() if k != "input"}}
        async with connect(url, additional_headers=headers, max_size=None) as ws:
            await ws.send(json.dumps(start))
            t0 = time.perf_counter()
            sent_end = None

            async def send() -> None:
                nonlocal sent_end
                for i, token in enumerate(tokens):
                    await asyncio.sleep(max(0.0, t0 + i / tokens_per_s - time.perf_counter()))
                    await ws.send(json.dumps({"type": "text", "text": token}))
                    if i == end_token:
                        sent_end = time.perf_counter()
                await ws.send(json.dumps({"type": "end"}))

            sender = asyncio.create_task(send())
            first, samples, segments = None, 0, 0
            async for message in ws:
                if isinstance(message, bytes):
                    first = time.perf_counter() if first is None else first
                    continue
                event = json.loads(message)
                if event["type"] == "error":
                    raise RuntimeError(f"WebSocket error: {event}")
                segments += event["type"] == "segment"
                if event["type"] == "done":
                    samples = event["samples"]
                    break
            await sender
        return {"first_audio_after_sentence_end_s": first - sent_end, "first_audio_after_first_token_s": first - t0,
                "total_s": time.perf_counter() - t0, "audio_s": samples / RATE, "segments": segments,
                "tokens": len(tokens), "tokens_per_s": tokens_per_s}

    async def one_request(self, body: dict) -> tuple[float, float]:
        """(latency seconds, audio seconds) of one whole pcm request."""
        t0 = time.perf_counter()
        # a whole answer (null: the server streams by default since it answers as OpenAI's API does)
        r = await self.client.post("/v1/audio/speech", json={**body, "response_format": "pcm", "stream_format": None})
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        return time.perf_counter() - t0, len(r.content) / 2 / RATE

    async def engine_counters(self) -> dict[str, float]:
        """The server's omnivoice_engine_* counters from /metrics (phases as `seconds_<phase>`), summed over the
        replicas of a Ray Serve app (labelled `replica`)."""
        from prometheus_client.parser import text_string_to_metric_families

        out = {}
        for family in text_string_to_metric_families((await self.client.get("/metrics")).text):
            for s in family.samples:
                if s.name.startswith("omnivoice_engine_") and s.name.endswith("_total"):
                    key = s.name[len("omnivoice_engine_"):-len("_total")]
                    key = f"{key}_{s.labels['phase']}" if "phase" in s.labels else key
                    out[key] = out.get(key, 0.0) + s.value
        return out


class InProcess:
    """The server's engine in this process, without HTTP (--in-process): the server's backend (its one door to the
    model, loaded as the server loads it), and each body made into the request the server would make of it (its
    schema and voices). Set beside a run over HTTP, it shows what the web layer costs the engine."""

    def __init__(self, args) -> None:
        from omnivoice.server.app import ServerConfig
        from omnivoice.server.engine_adapter import load_backend
        from omnivoice.server.schema import SpeechRequest, synthesis_request
        from omnivoice.server.voices import VoiceLibrary, resolve_voice

        batch = args.max_batch or ServerConfig.max_batch
        self.backend = load_backend(args.model, args.codec, backend=args.backend, threads=args.threads,
                                    max_batch=batch if batch == "auto" else int(batch),
                                    max_wait_ms=float(args.max_wait_ms or ServerConfig.max_wait_ms),
                                    max_queue=max(64, 2 * max(args.clients)))  # as start_server's --max-queue
        library = VoiceLibrary(args.voices)

        def request(body: dict):
            speech = SpeechRequest.model_validate(body)
            return synthesis_request(speech, *resolve_voice(library, speech.voice))
        self.request = request

    async def describe(self) -> dict:
        return {"device": f"{self.backend.device}, in process", "model": self.backend.model_name}

    async def first_audio(self, body: dict) -> dict:
        t0 = time.perf_counter()
        job = self.backend.submit(self.request(body), stream=True)
        pieces = iter(job.chunks())
        first, n = None, 0
        while (piece := await asyncio.to_thread(next, pieces, None)) is not None:
            first = time.perf_counter() - t0 if first is None else first
            n += len(piece)
        return {"first_audio_s": first, "total_s": time.perf_counter() - t0, "audio_s": n / RATE}

    async def stream_once(self, body: dict) -> dict:
        """As Http.stream_once: a full queue (EngineFull) is the server's 503."""
        from omnivoice.engine import EngineFull

        t0 = time.perf_counter()
        try:
            job = self.backend.submit(self.request(body), stream=True)
        except EngineFull as e:
            return {"status": 503, "error": str(e), "total_s": time.perf_counter() - t0,
                    "retry_after_s": e.retry_after}
        pieces = iter(job.chunks())
        first, n = None, 0
        try:
            while (piece := await asyncio.to_thread(next, pieces, None)) is not None:
                first = time.perf_counter() - t0 if first is None else first
                n += len(piece)
        except Exception as e:
            return {"status": 500, "error": f"{type(e).__name__}: {e}", "total_s": time.perf_counter() - t0}
        return {"status": 200, "first_audio_s": first, "total_s": time.perf_counter() - t0, "audio_s": n / RATE}

    async def one_request(self, body: dict) -> tuple[float, float]:
        t0 = time.perf_counter()
        result = await asyncio.wrap_future(self.backend.submit(self.request(body)).future)
        return time.perf_counter() - t0, result.duration

    async def engine_counters(self) -> dict[str, float]:
        c = self.backend.counters()
        return {**{k: v for k, v in c.items() if k != "seconds"},
                **{f"seconds_{k}": v for k, v in c["seconds"].items()}}

    def close(self) -> None:
        self.backend.close()


def engine_share(before: dict[str, float], after: dict[str, float], wall: float) -> dict:
    """What the engine did during a count's wall time: steps, mean requests a step, graph switches and reuses,
    and its thread's seconds by phase (their sum against the wall: the rest is the thread waiting for requests)."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    phases = {k[len("seconds_"):]: v for k, v in d.items() if k.startswith("seconds_")}
    return {"steps": d.get("steps", 0), "mean_batch": d.get("packed_requests", 0) / max(1, d.get("steps", 0)),
            "graphs": d.get("graphs", 0), "graphs_reused": d.get("graphs_reused", 0), "seconds": phases,
            "busy_share": sum(phases.values()) / wall}


async def concurrent(target, body: dict, clients: int, requests: int, warmup: bool, vary: bool = False) -> dict:
    """`clients` closed-loop clients, `requests` each (all `body`'s text, or with `vary` the VARIED texts in
    turn); figures over the counted requests, and the engine's share of them from /metrics."""
    if warmup:
        await asyncio.gather(*(target.one_request({**body, "seed": 10_000 + i}) for i in range(clients)))
    latencies, audio = [], []
    before = await target.engine_counters()

    async def worker(w: int) -> None:
        for i in range(requests):
            text = {"input": VARIED[(w * requests + i) % len(VARIED)]} if vary else {}
            lat, sec = await target.one_request({**body, **text, "seed": w * 1000 + i})
            latencies.append(lat)
            audio.append(sec)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": len(latencies), "wall_s": wall, "audio_s": sum(audio),
            "audio_s_per_s": sum(audio) / wall, "requests_per_s": len(latencies) / wall,
            "p50_s": percentile(latencies, 0.5), "p95_s": percentile(latencies, 0.95),
            "engine": engine_share(before, await target.engine_counters(), wall)}


async def streaming_load(target, body: dict, load: str, clients: int, requests: int, seed: int,
                         max_retry_after: float, ramp_s: float = 0.0, words: tuple[int, int] = (1, 25)) -> dict:
    """`clients` clients of `requests` streamed one-sentence requests each (texts of sentence_texts of `words`
    words, the client's own), closed loop or conversational (`load`): first audio percentiles, audio s per s,
    errors and 503s. A conversational client joins after a delay drawn uniformly from [0, ramp_s) (seeded: the
    same on every run)."""
    firsts, latencies, audio, errors, rejected, paused = [], [], [], [], 0, []
    samples = []  # per answered request: client, when it was sent (s from the load's start), words, first audio, audio
    before = await target.engine_counters()

    async def client(w: int) -> None:
        nonlocal rejected
        texts = client_texts(seed, w, requests, words)
        if load == "conversational" and ramp_s > 0:
            await asyncio.sleep(random.Random(seed * 100_003 + w).uniform(0.0, ramp_s))
        for i, text in enumerate(texts):
            sent = time.perf_counter() - t0
            r = await target.stream_once({**body, "input": text, "seed": w * 1000 + i})
            if r["status"] == 503:
                rejected += 1
                await asyncio.sleep(min(max_retry_after, r.get("retry_after_s", 1.0)))
                continue
            if "error" in r:
                errors.append(f"{r['status']}: {r['error'][:200]}")
                continue
            firsts.append(r["first_audio_s"])
            latencies.append(r["total_s"])
            audio.append(r["audio_s"])
            samples.append([w, round(sent, 4), len(text.split()), round(r["first_audio_s"], 4), round(r["audio_s"], 3)])
            if load == "conversational" and i < len(texts) - 1:  # the audio plays from its first byte on, in
                pause = max(0.0, r["first_audio_s"] + r["audio_s"] - r["total_s"])  # real time
                paused.append(pause)
                await asyncio.sleep(pause)

    t0 = time.perf_counter()
    await asyncio.gather(*(client(w) for w in range(clients)))
    wall = time.perf_counter() - t0
    return {"load": load, "clients": clients, "requests": clients * requests, "answered": len(firsts),
            "errors": len(errors), "rejected_503": rejected, "error_samples": errors[:5], "wall_s": wall,
            "audio_s": sum(audio), "audio_s_per_s": sum(audio) / wall,
            "first_audio_p50_s": percentile(firsts, 0.5), "first_audio_p90_s": percentile(firsts, 0.9),
            "first_audio_p99_s": percentile(firsts, 0.99), "first_audio_max_s": max(firsts, default=float("nan")),
            "latency_p50_s": percentile(latencies, 0.5), "paused_s": sum(paused),
            "ramp_s": ramp_s if load == "conversational" else 0.0,
            "samples": {"columns": ["client", "sent_s", "words", "first_audio_s", "audio_s"], "rows": samples},
            "engine": engine_share(before, await target.engine_counters(), wall)}


async def measure(target, args) -> tuple[dict, list[dict], list[dict], list[dict], list[dict]]:
    body = {"model": "tts-1", "voice": args.voice, "num_step": args.num_step, "language": "English"}
    health = await target.describe()
    await target.one_request({**body, "input": ONE, "seed": 1})  # warm: graphs built, caches filled
    streams = []
    for load in (x for x in args.loads if x != "whole"):
        for c in args.clients:
            streams.append(await streaming_load(target, body, load, c, args.requests, args.text_seed,
                                                args.max_retry_after, args.ramp_s, args.words))
            r = streams[-1]
            print(f"  {load}, {c} clients: first audio p50 {r['first_audio_p50_s'] * 1000:.0f} ms, p99 "
                  f"{r['first_audio_p99_s'] * 1000:.0f} ms, {r['audio_s_per_s']:.2f} audio s/s, {r['errors']} errors, "
                  f"{r['rejected_503']} 503", file=sys.stderr)
    ttfb = [await target.first_audio({**body, "input": THREE, "seed": 100 + i}) for i in range(args.ttfb_repeats)]
    ws = []
    try:  # a server without WebSocket support (uvicorn with neither websockets nor wsproto) still gets the rest
        for i in range(args.ws_repeats if hasattr(target, "ws_first_audio") else 0):
            ws.append(await target.ws_first_audio({**body, "seed": 200 + i}, args.tokens_per_s))
    except Exception as e:
        print(f"  WebSocket runs failed: {type(e).__name__}: {e}", file=sys.stderr)
        ws = [{"error": f"{type(e).__name__}: {e}"}]
    rows = []
    for c in args.clients if "whole" in args.loads else ():
        rows.append(await concurrent(target, {**body, "input": ONE}, c, args.requests, args.warmup, args.vary))
        print(f"  {c} clients: {rows[-1]['audio_s_per_s']:.2f} audio s/s, p50 {rows[-1]['p50_s']:.2f} s",
              file=sys.stderr)
    return health, ttfb, ws, rows, streams


def direct(args) -> dict:
    """The one-client requests through OmniVoice.synthesize in this process (after one uncounted request), one
    after another: audio seconds per wall second, and the latencies."""
    import omnivoice
    from omnivoice.server.schema import SpeechRequest, synthesis_request
    from omnivoice.server.voices import VoiceLibrary, resolve_voice

    library = VoiceLibrary(args.voices)
    body = {"model": "tts-1", "voice": args.voice, "num_step": args.num_step, "language": "English"}
    texts = [VARIED[i % len(VARIED)] if args.vary else ONE for i in range(args.requests)]
    with omnivoice.OmniVoice(args.model, args.codec, backend=args.backend, n_threads=args.threads) as ov:
        def say(text: str, seed: int) -> float:
            speech = SpeechRequest.model_validate({**body, "input": text, "seed": seed})
            r = synthesis_request(speech, *resolve_voice(library, speech.voice))
            return ov.synthesize(r.text, language=r.language, instruct=r.instruct, voice=r.voice,
                                 **r.options()).duration

        say(ONE, 1)  # warm: graphs built, caches filled
        latencies, audio = [], []
        t0 = time.perf_counter()
        for i, text in enumerate(texts):
            t1 = time.perf_counter()
            audio.append(say(text, i))  # the seeds of the server's first client
            latencies.append(time.perf_counter() - t1)
        wall = time.perf_counter() - t0
    return {"requests": len(texts), "wall_s": wall, "audio_s": sum(audio), "audio_s_per_s": sum(audio) / wall,
            "p50_s": percentile(latencies, 0.5)}


async def run(args) -> dict:
    if args.in_process:
        target = InProcess(args)
        try:
            health, ttfb, ws, rows, streams = await measure(target, args)
        finally:
            target.close()
    else:
        headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
        limits = httpx.Limits(max_connections=max(args.clients) + 4,
                              max_keepalive_connections=max(args.clients) + 4)
        async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=args.timeout,
                                     limits=limits) as client:
            health, ttfb, ws, rows, streams = await measure(Http(client), args)
    return {"host": {"cpu": cpu_model(), "cores": os.cpu_count(), "loadavg_before": args.loadavg,
                     "loadavg_after": os.getloadavg()},
            "server": health, "num_step": args.num_step, "voice": args.voice, "vary": args.vary,
            "first_audio": {"text": THREE, "runs": ttfb,
                            "median_s": statistics.median(r["first_audio_s"] for r in ttfb) if ttfb else None,
                            "min_s": min((r["first_audio_s"] for r in ttfb), default=None)},
            "ws_first_audio": ws_summary(ws),
            "concurrency": rows, "streaming_loads": streams, "text_seed": args.text_seed, "words": list(args.words),
            "label": args.label, "server_args": args.server_args}


def ws_summary(runs: list[dict]) -> dict | None:
    if not runs or "error" in runs[0]:
        return {"error": runs[0]["error"]} if runs else None
    return {"text": THREE, "runs": runs,
            "median_s": statistics.median(r["first_audio_after_sentence_end_s"] for r in runs),
            "min_s": min(r["first_audio_after_sentence_end_s"] for r in runs)}


def markdown(result: dict) -> str:
    fa = result["first_audio"]
    out = [f"Host: {result['host']['cpu']} ({result['host']['cores']} cores), load average before "
           f"{result['host']['loadavg_before'][0]:.2f}; server: {result['server'].get('device')}, "
           f"model {result['server'].get('model')}, num_step {result['num_step']}, voice {result['voice']}"
           + (f"; {result['label']}" if result.get("label") else ""), ""]
    if result["streaming_loads"]:
        out += streaming_table(result["streaming_loads"], result.get("label")) + [""]
    if fa["runs"]:
        out += [f"Time to first audio byte, streamed three-sentence text: median {fa['median_s'] * 1000:.0f} ms, "
                f"min {fa['min_s'] * 1000:.0f} ms ({len(fa['runs'])} runs)", ""]
    wf = result["ws_first_audio"]
    if wf and "error" in wf:
        out += [f"WebSocket first audio: failed ({wf['error']})", ""]
    elif wf:
        out += [f"WebSocket, text at {wf['runs'][0]['tokens_per_s']:g} tokens/s: first audio after the first "
                f"sentence's end: median {wf['median_s'] * 1000:.0f} ms, min {wf['min_s'] * 1000:.0f} ms "
                f"({len(wf['runs'])} runs; after the first token: median "
                f"{statistics.median(r['first_audio_after_first_token_s'] for r in wf['runs']) * 1000:.0f} ms)", ""]
    if not result["concurrency"]:
        return "\n".join(out)
    out += ["| clients | requests | audio s / s | x one client | requests / s | p50 latency s | p95 latency s |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    base = result["concurrency"][0]["audio_s_per_s"]
    for r in result["concurrency"]:
        out.append(f"| {r['clients']} | {r['requests']} | {r['audio_s_per_s']:.2f} | {r['audio_s_per_s'] / base:.2f} "
                   f"| {r['requests_per_s']:.2f} | {r['p50_s']:.2f} | {r['p95_s']:.2f} |")
    out += ["", "The engine thread meanwhile (its counters: from /metrics over HTTP, or the engine's own with --in-process): steps, mean requests a step, "
            "graph switches (reused), seconds by phase, and the phases' share of the wall time:", "",
            "| clients | steps | mean batch | graphs (reused) | " + " | ".join(PHASES) + " | busy |",
            "|---:|---:|---:|---:|" + "---:|" * len(PHASES) + "---:|"]
    for r in result["concurrency"]:
        e = r["engine"]
        out.append(f"| {r['clients']} | {e['steps']:.0f} | {e['mean_batch']:.1f} | {e['graphs']:.0f} "
                   f"({e['graphs_reused']:.0f}) | " + " | ".join(f"{e['seconds'].get(p, 0):.3f}" for p in PHASES)
                   + f" | {e['busy_share']:.0%} |")
    return "\n".join(out)


def streaming_table(rows: list[dict], label: str | None = None) -> list[str]:
    """The streaming loads as Markdown rows (with a first column `label` when given, to set runs side by side)."""
    head = "| tree " if label is not None else ""
    out = [head + "| load | clients | requests | first audio p50 ms | p90 ms | p99 ms | audio s / s | latency p50 s "
           "| errors | 503 |", ("|---" if label is not None else "") + "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ms = [f"{r[k] * 1000:.0f}" for k in ("first_audio_p50_s", "first_audio_p90_s", "first_audio_p99_s")]
        out.append((f"| {label} " if label is not None else "") + f"| {r['load']} | {r['clients']} | {r['requests']} | "
                   + " | ".join(ms) + f" | {r['audio_s_per_s']:.2f} | {r['latency_p50_s']:.2f} | {r['errors']} | "
                   f"{r['rejected_503']} |")
    return out


def start_server(args) -> subprocess.Popen:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args.url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "omnivoice.server", "--port", str(port), "--backend", args.backend,
           "--voices", args.voices, "--max-queue", str(max(64, 2 * max(args.clients))), *args.server_args]
    for flag in ("model", "codec", "threads", "max_batch", "max_wait_ms"):
        value = getattr(args, flag)
        if value is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(value)]
    log = open(args.server_log, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + args.load_timeout
    # one client for every poll: a new one builds an SSL context each time, CPU time that the starting server's
    # busy-CPU sample (which picks its default thread count) would count as other work
    with httpx.Client(timeout=5) as client:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}; see {args.server_log}")
            try:
                if client.get(f"{args.url}/health").status_code == 200:
                    return proc
            except httpx.TransportError:
                pass
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError(f"server not ready after {args.load_timeout} s; see {args.server_log}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="a running server (else one is started with --model ...)")
    p.add_argument("--api-key", default=os.environ.get("OMNIVOICE_API_KEY"))
    p.add_argument("--clients", default="1,8,32", help="client counts (default 1,8,32)")
    p.add_argument("--requests", type=int, default=4, help="requests per client per client count (default 4)")
    p.add_argument("--warmup", action="store_true", help="one uncounted request per client before each count")
    p.add_argument("--vary", action="store_true",
                   help="texts of 2 to 18 words in turn (default: every request the same sentence)")
    p.add_argument("--loads", default="whole",
                   help="comma list of whole (whole requests, the concurrency table), closed and conversational "
                        "(streamed one-sentence requests: closed loop, or clients that play their audio in real "
                        "time before the next); default whole")
    p.add_argument("--text-seed", type=int, default=0, help="seed of the streaming loads' texts (default 0)")
    p.add_argument("--words", type=word_range, default=(1, 25), metavar="LO:HI",
                   help="the streaming loads' sentences have LO to HI words (default 1:25; 12:15 is about 5 s of "
                        "audio, the one-client first-audio target's request)")
    p.add_argument("--ramp-s", type=float, default=5.0,
                   help="conversational clients join at random times over this many seconds (default 5; 0: all "
                        "at once)")
    p.add_argument("--max-retry-after", type=float, default=2.0,
                   help="a client answered 503 waits its Retry-After, at most this many seconds (default 2)")
    p.add_argument("--label", help="a name for this run (e.g. the tree), in the JSON and the tables")
    p.add_argument("--ttfb-repeats", type=int, default=5)
    p.add_argument("--ws-repeats", type=int, default=5, help="WebSocket first-audio runs (default 5; 0: none)")
    p.add_argument("--tokens-per-s", type=float, default=30.0,
                   help="the WebSocket runs' text rate, tokens (words and marks) a second (default 30)")
    p.add_argument("--num-step", type=int, default=32, help="MaskGIT steps per request (default 32)")
    p.add_argument("--voice", default="alloy")
    p.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--in-process", action="store_true",
                   help="no server: the same requests to the server's engine in this process (with --model ...)")
    p.add_argument("--direct", action="store_true",
                   help="then the one-client requests through OmniVoice.synthesize in this process (with --model ...)")
    g = p.add_argument_group("starting a server (without --url), or the engine (--in-process)")
    g.add_argument("--model")
    g.add_argument("--codec")
    g.add_argument("--backend", default="auto")
    g.add_argument("--threads", type=int)
    g.add_argument("--max-batch")
    g.add_argument("--max-wait-ms")
    g.add_argument("--voices", default="/tmp/omnivoice-load-voices")
    g.add_argument("--server-log", default="/tmp/omnivoice-load-server.log")
    g.add_argument("--load-timeout", type=float, default=600.0)
    g.add_argument("--server-args", nargs=argparse.REMAINDER, default=[], help="more server arguments")
    args = p.parse_args(argv)
    args.clients = [int(c) for c in args.clients.split(",")]
    args.loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    unknown = set(args.loads) - {"whole", "closed", "conversational"}
    if unknown:
        p.error(f"--loads: unknown {', '.join(sorted(unknown))}; expected whole, closed, conversational")
    if not args.ramp_s >= 0:
        p.error(f"--ramp-s: expected seconds >= 0, got {args.ramp_s}")
    args.loadavg = os.getloadavg()
    proc = None
    if not args.url and not args.in_process:
        proc = start_server(args)
    try:
        result = asyncio.run(run(args))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    if args.direct:
        result["direct"] = d = direct(args)
        one = next((r for r in result["concurrency"] if r["clients"] == 1), None)
        d["server_ratio"] = one["audio_s_per_s"] / d["audio_s_per_s"] if one else None
    print(markdown(result))
    if "direct" in result:
        d = result["direct"]
        ratio = f", the server at one client {d['server_ratio']:.2f}x that" if d["server_ratio"] else ""
        print(f"\nOmniVoice.synthesize in process, the same {d['requests']} requests one after another: "
              f"{d['audio_s_per_s']:.2f} audio s/s, p50 {d['p50_s']:.2f} s{ratio}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
