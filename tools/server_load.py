"""Load test of the speech server: time to first audio of a streamed text, and throughput and latency with
1, 8 and 32 concurrent clients.

    python tools/server_load.py --url http://127.0.0.1:8000 [--api-key KEY]
    python tools/server_load.py --model M.gguf --codec C.gguf --backend cuda      # starts its own server

1. Time to first audio byte: a three-sentence text streamed (stream_format audio, pcm), from sending the
   request to the first byte of audio; --ttfb-repeats times, one after another.
2. For each client count C: C clients each send --requests whole requests (pcm) one after another (closed
   loop; the first round of one request each is a warm-up that is not counted when --warmup). Reported: audio
   seconds produced per wall second, requests per second, and request latency p50 / p95.

Results go to stdout as a Markdown table and, with --json, to a file (with the host's CPU, load and the
server's device).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

THREE = ("The first sentence is short. The second sentence is a little longer than the first one was. "
         "And the third sentence closes this small paragraph of text.")
ONE = "The quick brown fox jumps over the lazy dog near the bank of the river."
RATE = 24000


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def first_audio(client: httpx.AsyncClient, body: dict) -> dict:
    """Seconds to the first audio byte and to the end of one streamed request."""
    t0 = time.perf_counter()
    first, n = None, 0
    async with client.stream("POST", "/v1/audio/speech", json={**body, "stream_format": "audio",
                                                              "response_format": "pcm"}) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}")
        async for chunk in r.aiter_raw():
            if chunk and first is None:
                first = time.perf_counter() - t0
            n += len(chunk)
    return {"first_audio_s": first, "total_s": time.perf_counter() - t0, "audio_s": n / 2 / RATE}


async def one_request(client: httpx.AsyncClient, body: dict) -> tuple[float, float]:
    """(latency seconds, audio seconds) of one whole pcm request."""
    t0 = time.perf_counter()
    r = await client.post("/v1/audio/speech", json={**body, "response_format": "pcm"})
    if r.status_code != 200:
        raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
    return time.perf_counter() - t0, len(r.content) / 2 / RATE


async def concurrent(client: httpx.AsyncClient, body: dict, clients: int, requests: int, warmup: bool) -> dict:
    """`clients` closed-loop clients, `requests` each; figures over the counted requests."""
    if warmup:
        await asyncio.gather(*(one_request(client, {**body, "seed": 10_000 + i}) for i in range(clients)))
    latencies, audio = [], []

    async def worker(w: int) -> None:
        for i in range(requests):
            lat, sec = await one_request(client, {**body, "seed": w * 1000 + i})
            latencies.append(lat)
            audio.append(sec)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(clients)))
    wall = time.perf_counter() - t0
    return {"clients": clients, "requests": len(latencies), "wall_s": wall, "audio_s": sum(audio),
            "audio_s_per_s": sum(audio) / wall, "requests_per_s": len(latencies) / wall,
            "p50_s": percentile(latencies, 0.5), "p95_s": percentile(latencies, 0.95)}


async def run(args) -> dict:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    limits = httpx.Limits(max_connections=max(args.clients) + 4, max_keepalive_connections=max(args.clients) + 4)
    body = {"model": "tts-1", "voice": args.voice, "num_step": args.num_step, "language": "English"}
    async with httpx.AsyncClient(base_url=args.url, headers=headers, timeout=args.timeout, limits=limits) as client:
        health = (await client.get("/health")).json()
        await one_request(client, {**body, "input": ONE, "seed": 1})  # warm: graphs built, caches filled
        ttfb = [await first_audio(client, {**body, "input": THREE, "seed": 100 + i}) for i in range(args.ttfb_repeats)]
        rows = []
        for c in args.clients:
            rows.append(await concurrent(client, {**body, "input": ONE}, c, args.requests, args.warmup))
            print(f"  {c} clients: {rows[-1]['audio_s_per_s']:.2f} audio s/s, p50 {rows[-1]['p50_s']:.2f} s",
                  file=sys.stderr)
    return {"host": {"cpu": cpu_model(), "cores": os.cpu_count(), "loadavg_before": args.loadavg,
                     "loadavg_after": os.getloadavg()},
            "server": health, "num_step": args.num_step, "voice": args.voice,
            "first_audio": {"text": THREE, "runs": ttfb,
                            "median_s": statistics.median(r["first_audio_s"] for r in ttfb),
                            "min_s": min(r["first_audio_s"] for r in ttfb)},
            "concurrency": rows}


def markdown(result: dict) -> str:
    fa = result["first_audio"]
    out = [f"Host: {result['host']['cpu']} ({result['host']['cores']} cores), load average before "
           f"{result['host']['loadavg_before'][0]:.2f}; server: {result['server'].get('device')}, "
           f"model {result['server'].get('model')}, num_step {result['num_step']}, voice {result['voice']}",
           "",
           f"Time to first audio byte, streamed three-sentence text: median {fa['median_s'] * 1000:.0f} ms, "
           f"min {fa['min_s'] * 1000:.0f} ms ({len(fa['runs'])} runs)",
           "",
           "| clients | requests | audio s / s | x one client | requests / s | p50 latency s | p95 latency s |",
           "|---:|---:|---:|---:|---:|---:|---:|"]
    base = result["concurrency"][0]["audio_s_per_s"]
    for r in result["concurrency"]:
        out.append(f"| {r['clients']} | {r['requests']} | {r['audio_s_per_s']:.2f} | {r['audio_s_per_s'] / base:.2f} "
                   f"| {r['requests_per_s']:.2f} | {r['p50_s']:.2f} | {r['p95_s']:.2f} |")
    return "\n".join(out)


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
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; see {args.server_log}")
        try:
            if httpx.get(f"{args.url}/health", timeout=5).status_code == 200:
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
    p.add_argument("--ttfb-repeats", type=int, default=5)
    p.add_argument("--num-step", type=int, default=32, help="MaskGIT steps per request (default 32)")
    p.add_argument("--voice", default="alloy")
    p.add_argument("--timeout", type=float, default=600.0, help="per request, seconds")
    p.add_argument("--json", help="write the results here")
    g = p.add_argument_group("starting a server (without --url)")
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
    args.loadavg = os.getloadavg()
    proc = None
    if not args.url:
        proc = start_server(args)
    try:
        result = asyncio.run(run(args))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)
    print(markdown(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
