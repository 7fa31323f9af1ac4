"""What the Ray Serve layer adds to one request: the plain server and the Serve app side by side, in pairs.

    python tools/serve_overhead.py --model M.gguf --codec C.gguf [--backend cuda] [--pairs 40] [--json FILE]
    python tools/serve_overhead.py --plain-url http://127.0.0.1:8000 --ray-url http://127.0.0.1:8001

Without URLs it starts both on this machine: `python -m omnivoice.server` and `python -m omnivoice.server --ray
--replicas 1` (a local Ray cluster; one GPU with --backend cuda, vulkan or metal, else a CPU replica of --threads
threads), with the same model flags, one after the other on free ports, and stops both at the end.

One client, one request at a time: a streamed one-sentence request (stream_format audio, pcm; first audio byte and
last byte timed from sending) and then the same text as one whole answer (stream_format null), to the plain server
and to the Serve app in turn, `--pairs` times (after `--warmup` untimed pairs). Each pair's two requests run back to
back, so a slow spell of a shared machine slows both: the figure is the median of the pairs' differences (Serve
less plain), beside each server's own medians. Same seeds and texts on both: the audio is the same.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
TEXT = "The quick brown fox jumps over the lazy dog near the bank of the river."


def one_request(client: httpx.Client, stream: bool, seed: int, num_step: int) -> tuple[float, float]:
    """(first audio byte, last byte) in seconds from sending."""
    body = {"model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm", "seed": seed,
            "num_step": num_step}
    if not stream:
        body["stream_format"] = None
    t0 = time.perf_counter()
    first = None
    with client.stream("POST", "/v1/audio/speech", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{client.base_url}: HTTP {r.status_code}: {r.read()[:300]!r}")
        for chunk in r.iter_raw():
            if chunk and first is None:
                first = time.perf_counter() - t0
    return first if first is not None else float("nan"), time.perf_counter() - t0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, ray: bool, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "omnivoice.server", "--port", str(port), "--backend", args.backend,
           "--voices", args.voices]
    for flag in ("model", "codec", "threads"):
        if getattr(args, flag) is not None:
            cmd += [f"--{flag}", str(getattr(args, flag))]
    if ray:
        gpus = args.gpus_per_replica
        if gpus is None:
            gpus = 1.0 if args.backend.split(":")[0] in ("cuda", "vulkan", "metal") else 0.0
        cmd += ["--ray", "--replicas", "1", "--gpus-per-replica", f"{gpus:g}"]
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get(
        "PYTHONPATH", ""))
    env.pop("RAY_ADDRESS", None)
    out = open(log, "wb")
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.load_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server did not become ready in {args.load_timeout:g} s; see {log}")


def stop(proc: subprocess.Popen) -> None:
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # a Ray arm deletes its app and stops the cluster it started
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def measure(plain: str, ray: str, pairs: int, warmup: int, num_step: int, api_key) -> dict:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    rows = {k: [] for k in ("stream_first", "stream_total", "whole_total")}
    with httpx.Client(base_url=plain, timeout=600, headers=headers) as p, \
            httpx.Client(base_url=ray, timeout=600, headers=headers) as r:
        for i in range(warmup + pairs):
            # which server goes first alternates: neither always follows the other's work
            order = [("plain", p), ("ray", r)] if i % 2 == 0 else [("ray", r), ("plain", p)]
            got = {}
            for name, client in order:
                first, total = one_request(client, True, i, num_step)
                _, whole = one_request(client, False, i, num_step)
                got[name] = (first, total, whole)
            if i >= warmup:
                for k, j in (("stream_first", 0), ("stream_total", 1), ("whole_total", 2)):
                    rows[k].append((got["plain"][j], got["ray"][j]))
    out = {}
    for k, v in rows.items():
        out[k] = {"plain_ms": 1000 * statistics.median(a for a, _ in v),
                  "ray_ms": 1000 * statistics.median(b for _, b in v),
                  "ray_minus_plain_ms": 1000 * statistics.median(b - a for a, b in v),
                  "pairs": len(v)}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plain-url")
    p.add_argument("--ray-url")
    p.add_argument("--api-key", default=os.environ.get("OMNIVOICE_API_KEY"))
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--num-step", type=int, default=32, help="MaskGIT steps per request (default 32)")
    p.add_argument("--json", help="write the results here")
    g = p.add_argument_group("starting the servers (without URLs)")
    g.add_argument("--model")
    g.add_argument("--codec")
    g.add_argument("--backend", default="auto")
    g.add_argument("--threads", type=int)
    g.add_argument("--gpus-per-replica", type=float,
                   help="the replica's GPUs (default 1 with --backend cuda, vulkan or metal, else 0: a CPU replica)")
    g.add_argument("--voices", default="/tmp/omnivoice-overhead-voices")
    g.add_argument("--log-dir", default="/tmp", help="where the servers' logs go (default /tmp)")
    g.add_argument("--load-timeout", type=float, default=600.0)
    args = p.parse_args(argv)
    procs = []
    try:
        plain, ray = args.plain_url, args.ray_url
        if plain is None:
            proc, plain = start(args, False, Path(args.log_dir) / "serve-overhead-plain.log")
            procs.append(proc)
        if ray is None:
            proc, ray = start(args, True, Path(args.log_dir) / "serve-overhead-ray.log")
            procs.append(proc)
        device = httpx.get(f"{ray}/health", timeout=30).json().get("device")
        result = measure(plain, ray, args.pairs, args.warmup, args.num_step, args.api_key)
    finally:
        for proc in procs:
            stop(proc)
    host = {"machine": platform.machine(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()[0]}
    try:
        host["cpu"] = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                           if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    print(f"Host: {host.get('cpu', '?')} ({host['cpus']} CPUs), load average {host['load_avg']:.1f}; Serve app: "
          f"{device}; num_step {args.num_step}; {args.pairs} pairs\n")
    print("| one request, one client | plain ms (median) | Ray Serve ms (median) | Serve less plain ms (median of "
          "pairs) |")
    print("|---|---:|---:|---:|")
    names = {"stream_first": "streamed: first audio byte", "stream_total": "streamed: last byte",
             "whole_total": "whole answer"}
    for k, v in result.items():
        print(f"| {names[k]} | {v['plain_ms']:.1f} | {v['ray_ms']:.1f} | {v['ray_minus_plain_ms']:+.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"host": host, "device": device, "num_step": args.num_step,
                                               "text": TEXT, "results": result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
