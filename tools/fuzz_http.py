"""The fuzzer's hostile-HTTP mode (tools/fuzz.py --http): one real server on loopback, attacked within bounds.

    python tools/fuzz.py --work /tmp/fuzz --http                 # 400 cases, about two minutes

The server (`python -m omnivoice.server`, the tiny model, an API key, `--open-files` as its `ulimit -n`, short
--header-timeout and --body-timeout) runs in a subprocess on a free 127.0.0.1 port; nothing leaves the machine.
Case kinds, chosen by (--seed, case number) as the file fuzzer's are:

    nesting      a speech request whose voice, input or an unknown field is JSON nested 10 to 100 000 deep
    duplicate    two Authorization, Content-Length, Content-Type or Host headers, agreeing or not
    slow-head    a request head sent a few bytes at a time that never ends
    no-body      a head whose Content-Length promises a body that never comes
    idle-flood   more half-sent heads than the server may open files, then a client with the key must be served

Outcomes: `clean` (a 4xx in the API's JSON shape, or the connection closed by the server for the kinds that
never finish a request; for idle-flood: the key's requests answered 200 while the sockets are held), `5xx`,
`no answer` (nothing within the case's time), `server down` (the process exited). Afterwards the server's log is
searched for tracebacks and "Too many open files". Every case is bounded: at most --http-sockets sockets at a
time, a few seconds each, the whole run at most --http-seconds.
"""

from __future__ import annotations

import random
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

KINDS = ("nesting", "duplicate", "slow-head", "no-body", "idle-flood")
OUTCOMES = ("clean", "5xx", "no answer", "server down")  # and "status N": a success where none was due
API_KEY = "fuzz-key"
HEADER_TIMEOUT, BODY_TIMEOUT = 2.0, 2.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Target:
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
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


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


def closed_by_server(s: socket.socket, within: float) -> bool:
    """Whether the server closes `s` within `within` seconds (what it sends first is read and dropped)."""
    s.settimeout(within)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except (socket.timeout, OSError):
        return False


def _clean_4xx(answer: bytes) -> str:
    code = _status(answer)
    if code is None:
        return "no answer"
    if code >= 500:
        return "5xx"
    # a 4xx: the API's JSON error, or the HTTP parser's own 400 for a request it cannot take (plain text)
    return "clean" if 400 <= code < 500 else f"status {code}"


def nesting(t: Target, rng: random.Random) -> tuple[str, str]:
    depth = rng.choice([10, 100, 999, 1000, 5000, 100_000])
    field = rng.choice(["voice", "input", "extra"])
    nested = "[" * depth + "]" * depth
    doc = {"voice": '{"input": "Hallo.", "voice": %s}', "input": '{"input": %s}',
           "extra": '{"input": "Hallo.", "extra": %s}'}[field] % nested
    body = doc.encode()
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return _clean_4xx(t.exchange(head + body)), f"{field} nested {depth} deep"


def duplicate(t: Target, rng: random.Random) -> tuple[str, str]:
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


def slow_head(t: Target, rng: random.Random) -> tuple[str, str]:
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


def no_body(t: Target, rng: random.Random) -> tuple[str, str]:
    length = rng.choice([1, 100, 100_000])
    sent = rng.choice([0, length // 2])
    head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode()
    with t.connect() as s:
        s.sendall(head + b"{" * sent)
        closed = closed_by_server(s, BODY_TIMEOUT + 10)
    return ("clean" if closed else "no answer"), f"Content-Length {length}, {sent} bytes sent"


def idle_flood(t: Target, rng: random.Random, open_files: int, max_sockets: int) -> tuple[str, str]:
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


def run(root: Path, lm: Path, codec: Path, work: Path, seed: int, cases: int, seconds: float, open_files: int,
        max_sockets: int, on_result) -> dict:
    """Run `cases` cases (or until `seconds` pass) against one server; returns the summary."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "voices").mkdir(exist_ok=True)
    t = Target(root, lm, codec, work, open_files)
    counts: dict[str, dict[str, int]] = {k: {} for k in KINDS}
    t0, done = time.monotonic(), 0
    try:
        for i in range(cases):
            if time.monotonic() - t0 > seconds:
                break
            rng = random.Random(f"{seed}:http:{i}")
            kind = rng.choice(KINDS)
            if kind == "idle-flood" and rng.random() < 0.8:  # the costliest kind: one case in about 25
                kind = "nesting"
            if t.proc.poll() is not None:
                outcome, what = "server down", f"exited with {t.proc.returncode}"
            elif kind == "idle-flood":
                outcome, what = idle_flood(t, rng, open_files, max_sockets)
            else:
                outcome, what = {"nesting": nesting, "duplicate": duplicate, "slow-head": slow_head,
                                 "no-body": no_body}[kind](t, rng)
            counts[kind][outcome] = counts[kind].get(outcome, 0) + 1
            done += 1
            on_result(i, kind, outcome, what)
        alive = t.proc.poll() is None and t.status("/health") == 200
    finally:
        status = t.stop()
    log = t.log.read_text(errors="replace")
    return {"counts": counts, "cases": done, "seconds": round(time.monotonic() - t0, 1), "server_alive": alive,
            "exit_status": status, "tracebacks": log.count("Traceback"),
            "too_many_open_files": log.count("Too many open files"), "log_lines": log.count("\n")}


if __name__ == "__main__":  # a module of tools/fuzz.py, whose --http runs it: say so
    print(__doc__)
