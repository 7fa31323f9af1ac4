#!/usr/bin/env python3
"""Mutation fuzzer for the package's file readers and the command lines behind them.

    python tools/fuzz.py --work /tmp/fuzz                       # the long run: the table of docs/ROBUSTNESS.md
    python tools/fuzz.py --work /tmp/fuzz --ci                  # the short run of tests/robustness/test_fuzz.py
    python tools/fuzz.py --work /tmp/fuzz --ci --targets wav --first 30 --cases 30   # a part of it
    python tools/fuzz.py --work /tmp/fuzz --replay wav:17       # one case again, as a plain subprocess
    python tools/fuzz.py --work /tmp/fuzz --http                # hostile HTTP against a server (below)

Targets and the command each case runs (one of the listed, by case number):

    lm-gguf       python -m omnivoice.tts "Hi." --model MUTANT --codec GOOD
    codec-gguf    python -m omnivoice.codec --model MUTANT -i seed.rvq | -i seed.wav
    wav           python -m omnivoice.tts ... --ref-wav MUTANT | python -m omnivoice.codec -i MUTANT
    srt           python -m omnivoice.tts --srt MUTANT
    rvq           python -m omnivoice.tts ... --ref-rvq MUTANT | python -m omnivoice.codec -i MUTANT
    safetensors   python -m omnivoice.convert CHECKPOINT -o OUT, one of its two safetensors files the mutant

Seeds are made from the tiny random checkpoint (--checkpoint, converted to GGUF once unless --gguf names the
converted files) and from synthetic audio; tools/fuzz_formats.py mutates them (bit flips, byte rewrites,
truncation, extension, and targeted rewrites of header and integer fields found by its own format walkers).

Each case runs in a child forked from a server that has imported the package (and, for the wav, srt and rvq
targets, loaded the tiny model once: the child's CLI gets that object instead of loading it again). The child
runs the CLI's main() under an address-space cap (RLIMIT_AS, --mem-gib) and a CPU-time limit (RLIMIT_CPU, --timeout
seconds: a limit on work done, so a busy machine does not turn slow cases into hangs), and is killed after ten
times that in wall-clock time (a case blocked without using the CPU). Outcomes:

    accepted      exit 0 (the mutant was still a valid input)
    clean error   exit 2 with an "error: ..." line and no traceback
    exit 1        internal failure (or exit 2 without a message)
    exit 3        out of memory, reported by the CLI
    native crash  killed by a signal (SIGSEGV, SIGABRT, ...)
    hang          killed at the CPU-time limit (SIGXCPU) or at the wall-clock limit

A case that fails with an error must also leave nothing behind: files left in its directory other than the
input are counted as "left files" (a killed case cannot clean up, and is not counted). Cases are
deterministic: (--seed, target, case number) gives the same mutant on every machine.
The parent never runs a ggml graph itself: libgomp's thread pool does not survive a fork.

--http, the hostile-HTTP mode: one real server on loopback, attacked within bounds (400 cases, at most
--http-seconds). The server (`python -m omnivoice.server`, the tiny model, an API key, `--open-files` as its
`ulimit -n`, short --header-timeout and --body-timeout) runs in a subprocess on a free 127.0.0.1 port; nothing
leaves the machine. Case kinds, chosen by (--seed, case number) as the file targets' are:

    nesting      a speech request whose voice, input or an unknown field is JSON nested 10 to 100 000 deep
    duplicate    two Authorization, Content-Length, Content-Type or Host headers, agreeing or not
    slow-head    a request head sent a few bytes at a time that never ends
    no-body      a head whose Content-Length promises a body that never comes
    idle-flood   more half-sent heads than the server may open files, then a client with the key must be served

Outcomes: `clean` (a 4xx in the API's JSON shape, or the connection closed by the server for the kinds that
never finish a request; for idle-flood: the key's requests answered 200 while the sockets are held), `5xx`,
`no answer` (nothing within the case's time), `server down` (the process exited). Afterwards the server's log is
searched for tracebacks and "Too many open files". Every case is bounded: at most --http-sockets sockets at a
time, a few seconds each, the whole run at most --http-seconds. --http-jobs cases run at a time (most wait on
the server's timeouts), an idle flood alone.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: the children compute single-threaded

import argparse
import faulthandler
import json
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tools")]

import numpy as np  # noqa: E402

import fuzz_formats as F  # noqa: E402
from tests.fixtures.servers import closed_by_server, free_port, stop_process  # noqa: E402

TARGETS = ("lm-gguf", "codec-gguf", "wav", "srt", "rvq", "safetensors")
OUTCOMES = ("accepted", "clean error", "exit 1", "native crash", "hang", "exit 3")
# Cases per target: the long run (the table in docs/ROBUSTNESS.md) and the CI run (about a minute on 2 cores).
LONG = {"lm-gguf": 320, "codec-gguf": 220, "wav": 220, "srt": 200, "rvq": 220, "safetensors": 160}
CI = {"lm-gguf": 12, "codec-gguf": 40, "wav": 60, "srt": 40, "rvq": 60, "safetensors": 24}
FAST = ["--backend", "cpu", "--threads", "1"]
TTS_FAST = FAST + ["--steps", "2", "--seed", "0", "--quiet"]
REF_TEXT = "Hello world. This is a short synthetic reference clip"


# ------------------------------------------------------------------------------------------------ seeds

@dataclass
class Context:
    """Where the seeds and the good model files are."""

    work: Path
    checkpoint: Path
    lm: Path
    codec: Path
    seeds: dict[str, list[Path]] = field(default_factory=dict)


def prepare(work: Path, checkpoint: Path | None, gguf: Path | None) -> Context:
    """Make (once) the tiny checkpoint's GGUF files and the seed inputs under `work`."""
    work.mkdir(parents=True, exist_ok=True)
    if checkpoint is None:
        checkpoint = work / "ckpt-tiny"
        if not (checkpoint / "config.json").is_file():
            subprocess.run([sys.executable, str(ROOT / "tools" / "make_checkpoint.py"), "--preset", "tiny",
                            "--seed", "0", "-o", str(checkpoint)], check=True, capture_output=True)
    if gguf is None:
        gguf = work / "gguf"
        if not (gguf / "omnivoice-tokenizer-F32.gguf").is_file():
            subprocess.run([sys.executable, "-m", "omnivoice.convert", str(checkpoint), "-o", str(gguf),
                            "--quant", "f32", "-q"], check=True, capture_output=True, cwd=ROOT)
    ctx = Context(work, checkpoint, gguf / "omnivoice-base-F32.gguf", gguf / "omnivoice-tokenizer-F32.gguf")
    seeds = work / "seeds"
    seeds.mkdir(exist_ok=True)
    ctx.seeds = {
        "lm-gguf": [ctx.lm],
        "codec-gguf": [ctx.codec],
        "wav": _wav_seeds(seeds),
        "srt": [_write(seeds / "seed.srt", F.SRT_SEED.encode())],
        "rvq": _rvq_seeds(seeds),
        "safetensors": [checkpoint / "audio_tokenizer" / "model.safetensors", checkpoint / "model.safetensors"],
    }
    return ctx


def _write(path: Path, data: bytes) -> Path:
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)
    return path


def _wav_seeds(seeds: Path) -> list[Path]:
    import soundfile as sf

    from reference.synth_clip import synth_clip

    out = []
    for name, rate, channels, subtype in (("mono24k_pcm16", 24000, 1, "PCM_16"), ("stereo44k_float", 44100, 2, "FLOAT"),
                                          ("mono16k_pcm24", 16000, 1, "PCM_24"), ("mono8k_u8", 8000, 1, "PCM_U8")):
        path = seeds / f"{name}.wav"
        if not path.is_file():
            clip = synth_clip(seed=len(out), duration=1.2, sr=rate)
            sf.write(path, np.stack([clip] * channels, axis=1) if channels > 1 else clip, rate, subtype=subtype)
        out.append(path)
    return out


def _rvq_seeds(seeds: Path) -> list[Path]:
    from omnivoice.codec import save_rvq

    rng = np.random.default_rng(0)
    out = []
    for name, rms in (("voice.rvq", 0.05), ("no_rms.rvq", None)):
        path = seeds / name
        if not path.is_file():
            save_rvq(path, rng.integers(0, 1024, (8, 40)), ref_rms=rms)
        out.append(path)
    return out


# ------------------------------------------------------------------------------------------------ cases

@dataclass
class Case:
    target: str
    index: int
    seed: str         # which seed file was mutated
    what: str         # the mutation
    cli: str          # tts, codec or convert
    argv: list[str]
    dir: Path
    shared_model: bool  # the child may use the server's preloaded model


_gguf_mutators: dict[Path, F.GgufMutator] = {}


def make_case(ctx: Context, target: str, index: int, seed: int) -> Case:
    """Build case `index` of `target`: write the mutant into its own directory, decide the command."""
    rng = random.Random(f"{seed}:{target}:{index}")
    src = rng.choice(ctx.seeds[target]) if target != "safetensors" else \
        ctx.seeds[target][0 if rng.random() < 0.7 else 1]
    data = src.read_bytes()
    if target.endswith("gguf"):
        if src not in _gguf_mutators:
            _gguf_mutators[src] = F.GgufMutator(data)
        mutant, what = _gguf_mutators[src](rng, data)
    else:
        mutant, what = F.FORMATS[target](rng, data)
    d = ctx.work / "cases" / f"{target}-{index:04d}"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    variant = index % 2
    model = ["--model", str(ctx.lm), "--codec", str(ctx.codec)]
    if target == "lm-gguf":
        path = _write(d / "model.gguf", mutant)
        cli, argv = "tts", ["Hi.", "--model", str(path), "--codec", str(ctx.codec), "--duration", "0.4", "-o",
                            "out.wav", *TTS_FAST]
    elif target == "codec-gguf":
        path = _write(d / "codec.gguf", mutant)
        inp = ctx.seeds["rvq"][0] if variant == 0 else ctx.seeds["wav"][0]
        cli, argv = "codec", ["--model", str(path), "-i", str(inp), "-o", "out" + (".wav" if variant == 0 else ".rvq"),
                              *FAST, "-q"]
    elif target in ("wav", "rvq"):  # a voice-cloning reference: in the tts, or through the codec CLI
        path = _write(d / ("ref.wav" if target == "wav" else "voice.rvq"), mutant)
        if variant == 0:
            cli, argv = "tts", ["Nice to meet you.", f"--ref-{target}", str(path), "--ref-text", REF_TEXT, *model,
                                "-o", "out.wav", *TTS_FAST]
        else:
            cli, argv = "codec", ["--model", str(ctx.codec), "-i", str(path), "-o",
                                  "out.rvq" if target == "wav" else "out.wav", *FAST, "-q"]
    elif target == "srt":
        path = _write(d / "subs.srt", mutant)
        cli, argv = "tts", ["--srt", str(path), *model, "-o", "out.wav", *TTS_FAST]
    else:  # safetensors: a checkpoint directory of links to the good files, one file replaced by the mutant
        ck = d / "ckpt"
        for f in ctx.checkpoint.rglob("*"):
            if f.is_file():
                (ck / f.relative_to(ctx.checkpoint)).parent.mkdir(parents=True, exist_ok=True)
                (ck / f.relative_to(ctx.checkpoint)).symlink_to(f)
        rel = src.relative_to(ctx.checkpoint)
        (ck / rel).unlink()
        _write(ck / rel, mutant)
        cli, argv = "convert", [str(ck), "-o", "out", "--quant", "f32", "-q"]
    return Case(target, index, f"{src.name}", what, cli, argv, d, target in ("wav", "srt", "rvq") and cli == "tts")


def _inputs(case: Case) -> set[str]:
    return {"model.gguf", "codec.gguf", "ref.wav", "subs.srt", "voice.rvq", "ckpt", "log.txt"}


# ------------------------------------------------------------------------------------------------ running

_CLI = {"tts": "omnivoice.tts", "codec": "omnivoice.codec", "convert": "omnivoice.convert"}


def _main_of(cli: str) -> Callable[[list[str]], int]:
    if cli == "tts":
        from omnivoice.tts import main
    elif cli == "codec":
        from omnivoice.codec.__main__ import main
    else:
        from omnivoice.convert.__main__ import main
    return main


class Server:
    """Imports everything once and keeps the tiny model loaded; forks one child per case."""

    def __init__(self, ctx: Context, mem_gib: float, cpu_seconds: float) -> None:
        import omnivoice.api as api

        for cli in _CLI:
            _main_of(cli)
        self.api = api
        self.real = api.OmniVoice
        self.model = self.real(str(ctx.lm), str(ctx.codec), backend="cpu", n_threads=1)
        self.key = (str(ctx.lm), str(ctx.codec))
        self.mem = int(mem_gib * 2**30)
        self.cpu = int(cpu_seconds)

    def _factory(self, model=None, codec=None, **kw):
        return self.model if (model, codec) == self.key else self.real(model, codec, **kw)

    def start(self, case: Case) -> int:
        pid = os.fork()
        if pid:
            return pid
        rc = 1
        try:
            resource.setrlimit(resource.RLIMIT_AS, (self.mem, self.mem))
            resource.setrlimit(resource.RLIMIT_CPU, (self.cpu, self.cpu + 5))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            os.chdir(case.dir)
            log = os.open("log.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            faulthandler.enable()  # a native crash prints the Python stack into the case's log
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the server's handler
            if case.shared_model:
                self.api.OmniVoice = self._factory
            rc = _main_of(case.cli)(case.argv)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            rc = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(rc)


@dataclass
class Result:
    case: Case
    outcome: str
    detail: str     # exit status or signal name
    seconds: float  # wall clock
    cpu: float      # CPU seconds (user + system)
    left: list[str]
    tail: str


def classify(case: Case, status: int | None, seconds: float, cpu: float = 0.0, cpu_limit: float = 0.0) -> Result:
    """The outcome of a case from its wait status (None: killed at the wall-clock limit) and CPU time."""
    log = case.dir / "log.txt"
    text = log.read_text(errors="replace") if log.is_file() else ""
    tail = "\n".join(text.strip().splitlines()[-6:])
    if status is None:
        outcome, detail = "hang", "killed at the wall-clock limit"
    elif os.WIFSIGNALED(status) and (os.WTERMSIG(status) == signal.SIGXCPU or
                                     (os.WTERMSIG(status) == signal.SIGKILL and cpu >= cpu_limit)):
        outcome, detail = "hang", f"{signal.Signals(os.WTERMSIG(status)).name}: CPU-time limit"
    elif os.WIFSIGNALED(status):
        outcome, detail = "native crash", signal.Signals(os.WTERMSIG(status)).name
    else:
        rc = os.WEXITSTATUS(status)
        detail = f"exit {rc}"
        if rc == 0:
            outcome = "accepted"
        elif rc == 2 and "error:" in text and "Traceback" not in text:
            outcome = "clean error"
        elif rc == 3:
            outcome = "exit 3"
        else:
            outcome = "exit 1"
    left = []
    if outcome not in ("accepted", "hang", "native crash"):
        left = sorted(str(p.relative_to(case.dir)) for p in case.dir.rglob("*")
                      if p.is_file() and not p.is_symlink() and p.relative_to(case.dir).parts[0] not in _inputs(case))
    return Result(case, outcome, detail, seconds, cpu, left, tail)


def run_cases(server: Server, cases, jobs: int, wall: float, on_result: Callable[[Result], None]) -> None:
    """Run every case (an iterator, consumed lazily) with at most `jobs` children at a time; kill a child after
    `wall` seconds."""
    running: dict[int, tuple[Case, float]] = {}
    try:
        _run(server, iter(cases), jobs, wall, on_result, running)
    finally:  # interrupted (or failed): leave no child behind
        for pid in running:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _run(server: Server, cases, jobs: int, wall: float, on_result: Callable[[Result], None],
         running: dict[int, tuple[Case, float]]) -> None:
    exhausted = False
    while running or not exhausted:
        while not exhausted and len(running) < jobs:
            case = next(cases, None)
            if case is None:
                exhausted = True
                break
            running[server.start(case)] = (case, time.monotonic())
        if not running:
            break
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        if pid:
            case, t0 = running.pop(pid)
            on_result(classify(case, status, time.monotonic() - t0, usage.ru_utime + usage.ru_stime, server.cpu))
            continue
        now = time.monotonic()
        for pid, (case, t0) in list(running.items()):
            if now - t0 > wall:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                running.pop(pid)
                on_result(classify(case, None, now - t0))
        time.sleep(0.01)


# ------------------------------------------------------------------------------------------------ report

def table(counts: dict[str, dict[str, int]], left: dict[str, int]) -> str:
    head = "| target | mutants | " + " | ".join(OUTCOMES) + " | left files |"
    rows = [head, "|" + "---|" * (len(OUTCOMES) + 3)]
    for t, c in counts.items():
        rows.append(f"| {t} | {sum(c.values())} | " + " | ".join(str(c.get(o, 0)) for o in OUTCOMES)
                    + f" | {left.get(t, 0)} |")
    return "\n".join(rows)


def replay(ctx: Context, target: str, index: int, seed: int, timeout: float, mem_gib: float) -> int:
    """Rebuild one case and run it as a plain subprocess (no fork server, no shared model), showing everything."""
    case = make_case(ctx, target, index, seed)
    cmd = [sys.executable, "-m", _CLI[case.cli], *case.argv]
    print(f"{target}:{index} seed {case.seed}: {case.what}\n  cd {case.dir} && {' '.join(cmd)}", flush=True)
    cap = int(mem_gib * 2**30)
    try:
        proc = subprocess.run(cmd, cwd=case.dir, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"},
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    except subprocess.TimeoutExpired:
        print(f"still running after {timeout} s")
        return 1
    print(f"exit status {proc.returncode}")
    return 0


# ------------------------------------------------------------------------------------------------ hostile HTTP (--http)
HTTP_KINDS = ("nesting", "duplicate", "slow-head", "no-body", "idle-flood")
HTTP_OUTCOMES = ("clean", "5xx", "no answer", "server down")  # and "status N": a success where none was due
API_KEY = "fuzz-key"
HEADER_TIMEOUT, BODY_TIMEOUT = 2.0, 2.0


class HttpTarget:
    """The server under attack: started on a free loopback port, its log in `log`."""

    def __init__(self, root: Path, lm: Path, codec: Path, work: Path, open_files: int) -> None:
        self.port, self.log = free_port(), work / "server.log"
        cmd = [sys.executable, "-m", "omnivoice.server", "--model", str(lm), "--codec", str(codec), "--backend", "cpu",
               "--threads", "1", "--host", "127.0.0.1", "--port", str(self.port), "--voices", str(work / "voices"),
               "--api-key", API_KEY, "--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT),
               "--max-queue", "8", "--log-level", "info"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=root, stdout=out, stderr=subprocess.STDOUT, preexec_fn=lambda:
                                         resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files)))
        deadline = time.monotonic() + 180
        while self.status("/health") != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start:\n{self.log.read_text()}")
            time.sleep(0.2)

    def connect(self, timeout: float = 10) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def exchange(self, raw: bytes, timeout: float = 30) -> bytes:
        """Send `raw`, read the answer until the server closes or `timeout` passes."""
        with self.connect(timeout) as s:
            s.sendall(raw)
            chunks = []
            try:
                while data := s.recv(65536):
                    chunks.append(data)
                    if _whole(b"".join(chunks)):
                        break
            except (socket.timeout, ConnectionResetError):
                pass
        return b"".join(chunks)

    def status(self, path: str, body: bytes | None = None, key: bool = False, timeout: float = 30) -> int | None:
        """The HTTP status of one well-formed request (None: no answer)."""
        head = [f"{'POST' if body is not None else 'GET'} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
        if key:
            head.append(f"Authorization: Bearer {API_KEY}")
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        try:
            return _status(self.exchange(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""), timeout))
        except OSError:
            return None

    def stop(self) -> int:
        return stop_process(self.proc)


def _status(answer: bytes) -> int | None:
    try:
        return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
    except (IndexError, ValueError):
        return None


def _whole(answer: bytes) -> bool:
    """Whether `answer` holds a whole response with a Content-Length (the server may keep the connection)."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return False


def _clean_4xx(answer: bytes) -> str:
    code = _status(answer)
    if code is None:
        return "no answer"
    if code >= 500:
        return "5xx"
    # a 4xx: the API's JSON error, or the HTTP parser's own 400 for a request it cannot take (plain text)
    return "clean" if 400 <= code < 500 else f"status {code}"


def nesting(t: HttpTarget, rng: random.Random) -> tuple[str, str]:
    depth = rng.choice([10, 100, 999, 1000, 5000, 100_000])
    field = rng.choice(["voice", "input", "extra"])
    nested = "[" * depth + "]" * depth
    doc = {"voice": '{"input": "Hallo.", "voice": %s}', "input": '{"input": %s}',
           "extra": '{"input": "Hallo.", "extra": %s}'}[field] % nested
    body = doc.encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return _clean_4xx(t.exchange(head + body)), f"{field} nested {depth} deep"


def duplicate(t: HttpTarget, rng: random.Random) -> tuple[str, str]:
    body = b'{"input": "Hi.", "num_step": 1, "response_format": "pcm"}'
    name = rng.choice(["Authorization", "Content-Length", "Content-Type", "Host"])
    values = {"Authorization": [f"Bearer {API_KEY}", "Bearer wrong"], "Content-Length": [str(len(body)), "5"],
              "Content-Type": ["application/json", "text/plain"], "Host": ["x", "y"]}[name]
    pair = [values[0], values[0] if rng.random() < 0.5 else values[1]]
    rng.shuffle(pair)
    lines = {"Host": "x", "Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json",
             "Content-Length": str(len(body))}
    head = ["POST /v1/audio/speech HTTP/1.1", "Connection: close"]
    head += [f"{k}: {v}" for k, v in lines.items() if k != name] + [f"{name}: {v}" for v in pair]
    answer = t.exchange(("\r\n".join(head) + "\r\n\r\n").encode() + body)
    return _clean_4xx(answer), f"{name} twice: {pair}"  # refused even when the two agree


def slow_head(t: HttpTarget, rng: random.Random) -> tuple[str, str]:
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    step, pause = rng.choice([1, 3, 10]), rng.choice([0.1, 0.3])
    with t.connect() as s:
        t0 = time.monotonic()
        for i in range(0, len(head), step):
            try:
                s.sendall(head[i:i + step])
            except OSError:
                return "clean", f"{step} bytes every {pause} s: closed after {time.monotonic() - t0:.1f} s"
            time.sleep(pause)
            if time.monotonic() - t0 > 4 * HEADER_TIMEOUT:
                break
        closed = closed_by_server(s, 2 * HEADER_TIMEOUT)
    return ("clean" if closed else "no answer"), f"{step} bytes every {pause} s"


def no_body(t: HttpTarget, rng: random.Random) -> tuple[str, str]:
    length = rng.choice([1, 100, 100_000])
    sent = rng.choice([0, length // 2])
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()
    with t.connect() as s:
        s.sendall(head + b"{" * sent)
        closed = closed_by_server(s, BODY_TIMEOUT + 10)
    return ("clean" if closed else "no answer"), f"Content-Length {length}, {sent} bytes sent"


def idle_flood(t: HttpTarget, rng: random.Random, open_files: int, max_sockets: int) -> tuple[str, str]:
    n = min(max_sockets, int(open_files * rng.choice([1.2, 1.5, 2.0])))
    socks = []
    try:
        for _ in range(n):
            try:
                s = t.connect()
                s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            except OSError:
                break
        body = b'{"input": "Hi.", "num_step": 1, "response_format": "pcm"}'
        codes = [t.status("/health"), t.status("/v1/audio/speech", body, key=True, timeout=60)]
    finally:
        for s in socks:
            s.close()
    ok = codes == [200, 200]
    return ("clean" if ok else "5xx" if any(c and c >= 500 for c in codes) else "no answer"), \
        f"{len(socks)} half-sent heads held; /health {codes[0]}, speech {codes[1]}"


def run_http(root: Path, lm: Path, codec: Path, work: Path, seed: int, cases: int, seconds: float,
             open_files: int, max_sockets: int, on_result, jobs: int = 4) -> dict:
    """Run `cases` cases (or until `seconds` pass) against one server, `jobs` at a time (an idle flood alone: it
    takes the server's every file); returns the summary. Results come in case order."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "voices").mkdir(exist_ok=True)
    t = HttpTarget(root, lm, codec, work, open_files)
    counts: dict[str, dict[str, int]] = {k: {} for k in HTTP_KINDS}
    t0, done = time.monotonic(), 0

    def case(kind: str, rng: random.Random) -> tuple[str, str]:
        if t.proc.poll() is not None:
            return "server down", f"exited with {t.proc.returncode}"
        if kind == "idle-flood":
            return idle_flood(t, rng, open_files, max_sockets)
        return {"nesting": nesting, "duplicate": duplicate, "slow-head": slow_head, "no-body": no_body}[kind](t, rng)

    def record(i: int, kind: str, outcome: str, what: str) -> None:
        nonlocal done
        counts[kind][outcome] = counts[kind].get(outcome, 0) + 1
        done += 1
        on_result(i, kind, outcome, what)

    # Most cases wait on the server's header or body timeout (seconds each, the CPU idle): several at a time
    pending: list[tuple[int, str, Future]] = []

    def collect(keep: int) -> None:
        while len(pending) > keep:
            i, kind, f = pending.pop(0)
            record(i, kind, *f.result())

    try:
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for i in range(cases):
                if time.monotonic() - t0 > seconds:
                    break
                rng = random.Random(f"{seed}:http:{i}")
                kind = rng.choice(HTTP_KINDS)
                if kind == "idle-flood" and rng.random() < 0.8:  # the costliest kind: one case in about 25
                    kind = "nesting"
                collect(0 if kind == "idle-flood" else max(1, jobs) - 1)
                pending.append((i, kind, pool.submit(case, kind, rng)))
                if kind == "idle-flood":
                    collect(0)
            collect(0)
        alive = t.proc.poll() is None and t.status("/health") == 200
    finally:
        status = t.stop()
    log = t.log.read_text(errors="replace")
    return {"counts": counts, "cases": done, "seconds": round(time.monotonic() - t0, 1), "server_alive": alive,
            "exit_status": status, "tracebacks": log.count("Traceback"),
            "too_many_open_files": log.count("Too many open files"), "log_lines": log.count("\n")}


def http_mode(ctx: Context, args) -> int:
    """--http: the hostile-HTTP cases against one server; prints the counts by kind (and writes --json)."""

    def on_result(i: int, kind: str, outcome: str, what: str) -> None:
        if outcome != "clean":
            print(f"  http:{i} {kind} {outcome}: {what}", flush=True)

    summary = run_http(ROOT, ctx.lm, ctx.codec, ctx.work / "http", args.seed, args.http_cases, args.http_seconds,
                       args.open_files, args.http_sockets, on_result, args.http_jobs)
    outcomes = list(HTTP_OUTCOMES) + sorted({o for c in summary["counts"].values() for o in c} - set(HTTP_OUTCOMES))
    print("| kind | cases | " + " | ".join(outcomes) + " |\n|---|---|" + "---|" * len(outcomes))
    for kind, c in summary["counts"].items():
        print(f"| {kind} | {sum(c.values())} | " + " | ".join(str(c.get(o, 0)) for o in outcomes) + " |")
    print(f"{summary['cases']} cases in {summary['seconds']:.0f} s (seed {args.seed}, ulimit -n {args.open_files}); "
          f"server alive after: {summary['server_alive']}, exit status {summary['exit_status']}; its log: "
          f"{summary['tracebacks']} tracebacks, {summary['too_many_open_files']} 'Too many open files', "
          f"{summary['log_lines']} lines")
    if args.json:
        args.json.write_text(json.dumps({**summary, "seed": args.seed}, indent=1))
    clean = summary["server_alive"] and not summary["tracebacks"] and not summary["too_many_open_files"]
    return 0 if clean and all(set(c) <= {"clean"} for c in summary["counts"].values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="scratch directory (seeds, converted model, cases)")
    ap.add_argument("--checkpoint", type=Path, help="tiny checkpoint directory (default: made in --work)")
    ap.add_argument("--gguf", type=Path, help="directory with its omnivoice-base-F32.gguf and "
                                              "omnivoice-tokenizer-F32.gguf (default: converted in --work)")
    ap.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated subset of {', '.join(TARGETS)}")
    ap.add_argument("--ci", action="store_true", help="the short run's case counts")
    ap.add_argument("--cases", type=int, help="cases per target (default: the long run's counts, or --ci's)")
    ap.add_argument("--first", type=int, default=0, metavar="N",
                    help="start at case number N of each target: the same cases as a run from 0 (a run in parts)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2, help="children at a time (default 2)")
    ap.add_argument("--mem-gib", type=float,
                    help="address-space cap per case (default 8 GiB, as the run of issue 14; 4 GiB with --ci)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="CPU seconds before a case counts as a hang (wall clock: ten times that)")
    ap.add_argument("--json", type=Path, help="write counts and every non-clean case here")
    ap.add_argument("--keep", action="store_true", help="keep every case's directory (a non-clean case's is always kept; a long run keeps tens of GB)")
    ap.add_argument("--replay", metavar="TARGET:N", help="rebuild case N of TARGET and run it in the foreground")
    ap.add_argument("--http", action="store_true",
                    help="the hostile-HTTP mode instead of the file targets: one server on loopback")
    ap.add_argument("--http-cases", type=int, default=400, help="cases of --http (default 400)")
    ap.add_argument("--http-seconds", type=float, default=300.0, help="the most --http runs, in seconds (default 300)")
    ap.add_argument("--open-files", type=int, default=256, help="the server's ulimit -n under --http (default 256)")
    ap.add_argument("--http-sockets", type=int, default=600,
                    help="the most sockets --http holds open at a time (default 600)")
    ap.add_argument("--http-jobs", type=int, default=4,
                    help="--http cases at a time (default 4; an idle flood runs alone)")
    args = ap.parse_args(argv)
    if args.mem_gib is None:
        args.mem_gib = 4.0 if args.ci else 8.0
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in targets if t not in TARGETS]
    if bad:
        ap.error(f"unknown target(s) {bad}; expected {', '.join(TARGETS)}")
    ctx = prepare(args.work.resolve(), args.checkpoint, args.gguf)
    if args.replay:
        target, _, n = args.replay.partition(":")
        return replay(ctx, target, int(n), args.seed, args.timeout, args.mem_gib)
    if args.http:
        return http_mode(ctx, args)

    counts = {t: {} for t in targets}
    seconds = {t: 0.0 for t in targets}
    left: dict[str, int] = {}
    noteworthy = []
    t0 = time.monotonic()

    def on_result(r: Result) -> None:
        c = counts[r.case.target]
        c[r.outcome] = c.get(r.outcome, 0) + 1
        seconds[r.case.target] += r.cpu
        if r.left:
            left[r.case.target] = left.get(r.case.target, 0) + 1
        if r.outcome not in ("accepted", "clean error") or r.left:
            noteworthy.append({"case": f"{r.case.target}:{r.case.index}", "seed": r.case.seed,
                               "mutation": r.case.what, "cli": r.case.cli, "outcome": r.outcome,
                               "detail": r.detail, "seconds": round(r.seconds, 2), "cpu": round(r.cpu, 2),
                               "left": r.left, "tail": r.tail})
            print(f"  {r.case.target}:{r.case.index} {r.outcome} ({r.detail}, {r.cpu:.1f} CPU s) "
                  f"[{r.case.cli}] {r.case.what}" + (f" left {r.left}" if r.left else ""), flush=True)
        elif not args.keep:
            shutil.rmtree(r.case.dir, ignore_errors=True)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind through run_cases' cleanup
    server = Server(ctx, args.mem_gib, args.timeout)
    plan = CI if args.ci else LONG
    cases = (make_case(ctx, t, i, args.seed) for t in targets
             for i in range(args.first, args.first + (args.cases or plan[t])))
    run_cases(server, cases, args.jobs, 10 * args.timeout, on_result)
    took = time.monotonic() - t0
    print(table(counts, left))
    per_case = (f"{t} {seconds[t] / max(1, sum(counts[t].values())):.2f}" for t in targets)
    print("CPU seconds per case: " + ", ".join(per_case))
    print(f"{sum(sum(c.values()) for c in counts.values())} cases in {took:.0f} s "
          f"(seed {args.seed}, {args.jobs} jobs, {args.mem_gib:g} GiB cap, {args.timeout:g} CPU s limit)")
    if args.json:
        args.json.write_text(json.dumps({"counts": counts, "left": left, "cases": noteworthy,
                                         "seconds": took, "seed": args.seed}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
