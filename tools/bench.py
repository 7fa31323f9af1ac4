#!/usr/bin/env python3
"""Side-by-side benchmark: our ggml pipeline against the PyTorch reference, same checkpoint, same run.

    python3 tools/bench.py --checkpoint DIR [--backend cpu|cuda|vulkan] [--quant f32[,q8_0,...]]
        [--ref-python PATH] [--ref-pythonpath DIR] [--ref-device cpu|cuda] [--ref-dtype float32[,bfloat16]]
        [--cases auto5,clone5,auto20] [--repeats N] [--warmup N] [--steps 32] [--json OUT] [--markdown OUT]
        [--installed LABEL=PYTHON]

Examples (repository root):

    python3 tools/make_checkpoint.py --preset tiny --seed 0 -o /tmp/ckpt-tiny
    python3 tools/bench.py --checkpoint /tmp/ckpt-tiny --quant f32,q8_0 --repeats 3 --json /tmp/bench.json
    python3 tools/bench.py --checkpoint /tmp/ckpt-full --backend cuda --quant bf16,f32 \\
        --ref-python python3 --ref-pythonpath /tmp/ref-site --ref-dtype bfloat16,float32

What it does: converts the checkpoint once per quantization (``python -m omnivoice.convert``, into
``--gguf-dir``, reused while the checkpoint is unchanged), writes the deterministic synthetic reference clip
(tools/reference/synth_clip.py) as a 16-bit wav for the cloning cases, then starts one long-lived worker
process per column (tools/bench_worker.py: ours per quantization with this interpreter, the reference per
dtype with its own interpreter, since both packages are named ``omnivoice``), loads each model once, and per
case runs ``--warmup`` untimed syntheses on every worker, then ``--repeats`` timed ones, alternating the
workers (the order flips every repeat, and ``--pause`` idle seconds precede each timed run). Deterministic
mode on both sides: position_temperature 0, class_temperature 0, ``--steps`` MaskGIT steps, a fixed duration
(``duration=`` passed to both).

Reported per case and worker (medians over the repeats): end-to-end wall time of one synthesize/generate
call (cloning includes reading and encoding the reference clip), RTF = wall / seconds of generated audio
(frames / 25, the requested duration), LM milliseconds per MaskGIT step (ours: the runner's step, graph
compute plus read-back; the reference: its ``forward``, CUDA-synchronized), the whole MaskGIT loop, codec
encode and decode time; per worker: load time, peak RSS, peak GPU memory (free-memory counter deltas during
the worker's own activity, CUDA context excluded; for the reference also torch.cuda.max_memory_allocated);
per pair: the reference's wall time over ours, and whether the first chunk's tokens are identical.
``--installed wheel=VENV/bin/python`` adds, per quantization, a column of our package as installed in that
interpreter (a wheel, say: tools/wheel.py) beside the repository's own build, same files, same run.
The markdown table goes to stdout (and --markdown), everything to --json.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "tools" / "bench_worker.py"
# the converter's weight schemes (omnivoice.quantize.SCHEMES; not imported: this driver loads no omnivoice code)
QUANTS = ("f32", "f16", "bf16", "q8_0", "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s",
          "q5_k_m", "q6_k")
REF_DTYPES = ("float32", "bfloat16", "float16")
# the CPU products a worker can be asked for (omnivoice.runners.lm.CPU_PRODUCTS; not imported, as above)
PRODUCTS = ("auto", "ggml", "i16", "i8", "amx", "fma")

TEXT_SHORT = "Hello world. This is a test."
TEXT_LONG = ("The old lighthouse keeper climbed the stairs every evening, counting each step as he went. "
             "From the top he could see the harbour, the fishing boats coming home, and the long line of "
             "hills beyond the town. He lit the lamp, wrote a few words in his notebook, and waited for the "
             "first ship to pass safely through the narrow channel.")
CASES = {
    "auto5": {"mode": "auto", "duration": 5.0, "text": TEXT_SHORT},
    "clone5": {"mode": "clone", "duration": 5.0, "text": TEXT_SHORT},
    "auto20": {"mode": "auto", "duration": 20.0, "text": TEXT_LONG},
    "clone20": {"mode": "clone", "duration": 20.0, "text": TEXT_LONG},
}
FRAME_RATE = 25.0


class BenchError(RuntimeError):
    """A problem that stops the benchmark, with a message that says what and where."""


# --------------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------------


class Worker:
    """One tools/bench_worker.py process: JSON lines in and out, stderr forwarded with a name prefix."""

    def __init__(self, name: str, side: str, python: str, env: dict, load_req: dict, timeout: float) -> None:
        self.name, self.side, self.load_req, self.timeout = name, side, load_req, timeout
        self.info: dict = {}
        self.load_s = None
        self.stats: dict = {}
        self._tail: deque[str] = deque(maxlen=40)
        try:
            self.proc = subprocess.Popen([python, "-u", str(WORKER), "--side", side], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                         cwd=str(REPO if side == "ours" else WORKER.parent), text=True,
                                         bufsize=1)
        except OSError as e:
            raise BenchError(f"could not start worker {name} with {python}: {e}") from None
        self._replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._replies.put(line)
        self._replies.put(None)

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self._tail.append(line.rstrip("\n"))
            sys.stderr.write(f"[{self.name}] {line}")
            sys.stderr.flush()

    def call(self, req: dict, what: str) -> dict:
        """Send one request and wait for its reply; a crash, a hang or an error reply raises BenchError."""
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._died(what)
        try:
            line = self._replies.get(timeout=self.timeout)
        except queue.Empty:
            raise BenchError(f"worker {self.name} gave no answer within {self.timeout:.0f} s during {what} "
                             f"(raise --timeout if the machine is that slow)") from None
        if line is None:
            self._died(what)
        try:
            reply = json.loads(line)
        except ValueError:
            raise BenchError(f"worker {self.name} wrote a line that is not JSON during {what}: {line[:200]!r}")
        if not reply.get("ok"):
            raise BenchError(f"worker {self.name} failed during {what}: {reply.get('error')}\n"
                             f"{reply.get('traceback', '')}")
        return reply

    def _died(self, what: str):
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            rc = "unknown (still running)"
        time.sleep(0.2)  # let the stderr thread drain
        tail = "\n".join(self._tail)
        raise BenchError(f"worker {self.name} (pid {self.pid}) exited with status {rc} during {what}; "
                         f"its last stderr lines:\n{tail}")

    def load(self) -> None:
        reply = self.call({"cmd": "load", **self.load_req}, "load")
        self.load_s, self.info = reply["load_s"], reply["info"]

    def run(self, case: dict, what: str) -> dict:
        return self.call({"cmd": "run", "case": case}, what)["result"]

    def close(self, graceful: bool = True) -> None:
        """Ask the worker to quit (or, after a failure, just end it) and reap it."""
        if graceful and self.proc.poll() is None:
            try:
                self.call({"cmd": "quit"}, "quit")
                self.proc.wait(timeout=30)
            except (BenchError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _env_for(side: str, ref_pythonpath: list[str]) -> dict:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if side in ("ref", "installed"):
        # the repository's own omnivoice must stay invisible to the reference and to an installed copy of ours
        paths = [p for p in paths if Path(p).resolve() != REPO]
    if side == "installed":  # it loads its own ggml: a source build's folder would have it measure that build
        env.pop("OMNIVOICE_GGML_LIB_DIR", None)
    if side == "ref":
        paths = ref_pythonpath + paths
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
    elif side == "ours":
        paths = [str(REPO)] + paths
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


# --------------------------------------------------------------------------------------------------
# Preparation
# --------------------------------------------------------------------------------------------------


def _checkpoint_stamp(ckpt: Path) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "audio_tokenizer/config.json",
                 "audio_tokenizer/model.safetensors"):
        f = ckpt / name
        if not f.is_file():
            raise BenchError(f"{ckpt} is not an OmniVoice checkpoint directory: {name} is missing")
        st = f.stat()
        h.update(f"{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def convert(ckpt: Path, gguf_dir: Path, quants: list[str]) -> dict[str, Path]:
    """The LM GGUF per quantization plus the codec GGUF, converted once while the checkpoint is unchanged."""
    gguf_dir.mkdir(parents=True, exist_ok=True)
    stamp_file = gguf_dir / "bench-source.json"
    stamp = {"checkpoint": str(ckpt), "stamp": _checkpoint_stamp(ckpt)}
    try:
        old = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        old = None
    done = set(old.get("quants", [])) if old and old.get("stamp") == stamp["stamp"] else set()
    out = {}
    for q in quants:
        lm = gguf_dir / f"omnivoice-base-{q.upper()}.gguf"
        codec = gguf_dir / "omnivoice-tokenizer-F32.gguf"
        if q not in done or not lm.is_file() or not codec.is_file():
            print(f"converting {ckpt} ({q}) into {gguf_dir} ...", file=sys.stderr)
            t0 = time.time()
            r = subprocess.run([sys.executable, "-m", "omnivoice.convert", str(ckpt), "-o", str(gguf_dir),
                                "--quant", q, "-q"], cwd=str(REPO), env=_env_for("ours", []))
            if r.returncode != 0:
                raise BenchError(f"conversion of {ckpt} to {q} failed (exit status {r.returncode})")
            print(f"  done in {time.time() - t0:.1f} s", file=sys.stderr)
            done.add(q)
            stamp_file.write_text(json.dumps({**stamp, "quants": sorted(done)}))
        out[q] = lm
    return out


def write_clip(path: Path) -> str:
    """The synthetic reference clip as 16-bit PCM (its samples are k/32768, so the file holds them exactly)."""
    sys.path.insert(0, str(REPO / "tools" / "reference"))
    import soundfile as sf
    from synth_clip import SAMPLE_RATE, TRANSCRIPT, synth_clip

    sf.write(str(path), synth_clip(seed=0, duration=2.4), SAMPLE_RATE, subtype="PCM_16")
    return TRANSCRIPT


def machine_info() -> dict:
    info = {"platform": platform.platform(), "python": platform.python_version()}
    if hasattr(os, "getloadavg"):
        info["loadavg"] = [round(x, 2) for x in os.getloadavg()]
    try:
        info["cores"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["cores"] = os.cpu_count()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True)
        if r.returncode == 0:
            info["gpus"] = [x.strip() for x in r.stdout.splitlines() if x.strip()]
    return info


def nvidia_smi_per_pid() -> dict[int, int]:
    """Device memory (MiB) per process as nvidia-smi sees it; empty when unavailable (no tool, no PIDs)."""
    if not shutil.which("nvidia-smi"):
        return {}
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = int(parts[1])
    return out


# --------------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------------


def _median(runs: list[dict], key: str):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def summarize(runs: list[dict]) -> dict:
    """Medians over repeats, plus per-step LM time and RTF."""
    keys = ("wall_s", "cpu_s", "gen_s", "encode_s", "decode_s", "lm_s", "graph_build_s", "audio_s", "lm_ms_median")
    s = {k: _median(runs, k) for k in keys}
    calls = runs[0]["lm_calls"]
    frames = runs[0]["frames"]
    s["lm_calls"], s["frames"], s["chunks"] = calls, frames, runs[0]["chunks"]
    s["lm_ms_per_step"] = 1000 * s["lm_s"] / calls if calls else None
    s["rtf"] = s["wall_s"] / (frames / FRAME_RATE) if frames else None
    hashes = {r["tokens"]["sha256"] for r in runs}
    s["deterministic"] = len(hashes) == 1
    s["tokens_sha256"] = runs[0]["tokens"]["sha256"]
    return s


def _decode_tokens(t: dict):
    import numpy as np

    return np.frombuffer(base64.b64decode(t["b64"]), dtype=np.int32).reshape(t["shape"])


def compare_tokens(a: dict, b: dict) -> dict:
    """Whether two first-chunk token arrays are identical, and the fraction of equal entries."""
    import numpy as np

    x, y = _decode_tokens(a), _decode_tokens(b)
    if x.shape != y.shape:
        return {"identical": False, "equal_fraction": None, "shapes": [list(x.shape), list(y.shape)]}
    eq = float(np.mean(x == y))
    return {"identical": bool(eq == 1.0), "equal_fraction": eq}


def _f(v, fmt="{:.3f}", none="—") -> str:
    return none if v is None else fmt.format(v)


def _gib(v) -> str:
    return "—" if v is None else f"{v / 2**30:.2f}"


def markdown(report: dict) -> str:
    ws = report["workers"]
    bases = report["baselines"]
    lines = []
    m = report["machine"]
    lines.append(f"Machine: {m.get('cpu', '?')}, {m.get('cores')} cores, {m.get('memory_gib')} GiB"
                 + (f"; GPU {'; '.join(m['gpus'])}" if m.get("gpus") else "")
                 + (f"; load average {m['loadavg_before'][0]} before, {m['loadavg'][0]} after"
                    if m.get("loadavg_before") and m.get("loadavg") else "")
                 + f". Steps {report['settings']['steps']}, repeats {report['settings']['repeats']} "
                   f"(median), warm-up {report['settings']['warmup']}.")
    lines.append("")
    head = ["case", "worker", "wall s", "RTF", "CPU s", "LM ms/step", "MaskGIT s", "encode s", "decode s"]
    for b in bases:
        head += [f"{b} ÷ this", f"tokens = {b}"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for case, per in report["cases"].items():
        for w in ws:
            s = per[w["name"]]["median"]
            row = [case, w["name"] + ("" if s["deterministic"] else " (NOT deterministic)"),
                   _f(s["wall_s"]), _f(s["rtf"], "{:.2f}"), _f(s.get("cpu_s"), "{:.1f}"),
                   _f(s["lm_ms_per_step"], "{:.1f}"),
                   _f(s["gen_s"]), _f(s["encode_s"]), _f(s["decode_s"])]
            for b in bases:
                c = per[w["name"]].get("vs", {}).get(b)
                if c is None:
                    row += ["—", "—"]
                    continue
                tok = ("yes" if c["tokens"]["identical"] else
                       f"no ({_f(c['tokens']['equal_fraction'], '{:.1%}', '?')} equal)")
                row += [_f(c["wall_ratio"], "{:.2f}×"), tok]
            lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append("| worker | device | threads | load s | peak RSS GiB | peak GPU GiB | torch max alloc GiB "
                 "| nvidia-smi MiB |")
    lines.append("|---|---|---|---|---|---|---|---|")
    for w in ws:
        st = w["stats"]
        lines.append(f"| {w['name']} | {w['info'].get('device', '?')} | {w['info'].get('threads')} "
                     f"| {_f(w['load_s'], '{:.1f}')} | {_gib(st.get('peak_rss_bytes'))} "
                     f"| {_gib(st.get('gpu_peak_bytes'))} | {_gib(st.get('torch_max_allocated_bytes'))} "
                     f"| {st.get('nvidia_smi_mib', '—')} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------


def _list(value: str, allowed, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise SystemExit(f"error: {what} {value!r}: expected a comma list of {', '.join(allowed)}")
    return items


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="OmniVoice checkpoint directory (Hugging Face layout)")
    ap.add_argument("--backend", default="cpu",
                    help="our ggml backend: cpu, cuda, vulkan, ... (default cpu); a comma list runs each")
    ap.add_argument("--quant", default="f32", help=f"our LM storage, a comma list of {', '.join(QUANTS)}; "
                    f"QUANT:PRODUCTS also picks the CPU's products ({', '.join(PRODUCTS)}: OmniVoice's cpu_products), "
                    "e.g. f16:ggml,f16:i16")
    ap.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto", help="ours (default auto)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads of both sides (default: all cores)")
    default_ref = REPO / ".venv-ref" / "bin" / "python"
    ap.add_argument("--ref-python", default=str(default_ref) if default_ref.exists() else sys.executable,
                    help="the reference's interpreter (default: .venv-ref/bin/python if present)")
    ap.add_argument("--ref-pythonpath", action="append", default=[],
                    help="folder prepended to the reference's PYTHONPATH (repeatable)")
    ap.add_argument("--ref-device", default=None, help="cpu or cuda[:N] (default: cuda when --backend is cuda)")
    ap.add_argument("--ref-dtype", default="float32", help=f"comma list of {', '.join(REF_DTYPES)}")
    ap.add_argument("--no-reference", action="store_true", help="ours only")
    ap.add_argument("--installed", action="append", default=[], metavar="LABEL=PYTHON",
                    help="also our package as installed in this interpreter (a wheel's venv), per quantization, "
                         "in columns named LABEL (repeatable)")
    ap.add_argument("--cases", default="auto5,clone5,auto20", help=f"comma list of {', '.join(CASES)}")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--pause", type=float, default=1.0,
                    help="seconds of idle between runs, so that one worker's spinning threads (OpenMP, ggml's "
                         "thread pool) have gone quiet before the next one is timed (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--language", default="English")
    ap.add_argument("--gguf-dir", default=None, help="where conversions go (default: CHECKPOINT-gguf beside it)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds one worker request may take")
    ap.add_argument("--json", default=None, help="write the full report here")
    ap.add_argument("--markdown", default=None, help="also write the markdown tables here")
    args = ap.parse_args(argv)
    args.quants = _list(args.quant, [f"{q}{p}" for q in QUANTS for p in ("",) + tuple(":" + k for k in PRODUCTS)],
                        "--quant")
    args.ref_dtypes = _list(args.ref_dtype, REF_DTYPES, "--ref-dtype")
    args.case_names = _list(args.cases, tuple(CASES), "--cases")
    if args.repeats < 1 or args.warmup < 0 or args.steps < 1 or args.pause < 0:
        raise SystemExit("error: --repeats and --steps must be >= 1, --warmup and --pause >= 0")
    args.installed_pythons = []
    for item in args.installed:
        label, eq, python = item.partition("=")
        if not eq or not label.strip() or not python.strip():
            raise SystemExit(f"error: --installed {item!r}: expected LABEL=PYTHON, e.g. wheel=/tmp/venv/bin/python")
        args.installed_pythons.append((label.strip(), python.strip()))
    args.backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    if not args.backends:
        raise SystemExit("error: --backend is empty")
    if args.ref_device is None:
        args.ref_device = "cuda" if any(b.lower().startswith("cuda") for b in args.backends) else "cpu"
    if args.threads is None:
        try:
            args.threads = len(os.sched_getaffinity(0))
        except AttributeError:
            args.threads = os.cpu_count() or 1
    return args


def run(args: argparse.Namespace) -> dict:
    ckpt = Path(args.checkpoint).expanduser().resolve()
    if not ckpt.is_dir():
        raise BenchError(f"checkpoint directory not found: {ckpt}")
    gguf_dir = Path(args.gguf_dir).resolve() if args.gguf_dir else ckpt.with_name(ckpt.name + "-gguf")
    lms = convert(ckpt, gguf_dir, list(dict.fromkeys(q.partition(":")[0] for q in args.quants)))
    codec = gguf_dir / "omnivoice-tokenizer-F32.gguf"
    clip = gguf_dir / "bench-clip.wav"
    clip_text = write_clip(clip)

    flash = {"auto": None, "on": True, "off": False}[args.flash_attn]
    def ours(b: str, q: str) -> dict:
        return {"model": str(lms[q.partition(":")[0]]), "codec": str(codec), "backend": b,
                "threads": args.threads, "flash_attn": flash, "cpu_products": q.partition(":")[2] or None}

    columns = [(b, q) for b in args.backends for q in args.quants]
    specs = [(f"ours {q}" if len(args.backends) == 1 else f"ours {b} {q}", "ours", sys.executable, ours(b, q))
             for b, q in columns]
    specs += [(f"{label} {q}" if len(args.backends) == 1 else f"{label} {b} {q}", "installed", python, ours(b, q))
              for label, python in args.installed_pythons for b, q in columns]
    if not args.no_reference:
        specs += [(f"ref {d}", "ref", args.ref_python,
                   {"checkpoint": str(ckpt), "device": args.ref_device, "dtype": d, "threads": args.threads})
                  for d in args.ref_dtypes]

    cases = {}
    for name in args.case_names:
        c = dict(CASES[name], name=name, language=args.language, steps=args.steps, seed=args.seed)
        if c.pop("mode") == "clone":
            c.update(ref_audio=str(clip), ref_text=clip_text)
        cases[name] = c

    before = machine_info()
    if before.get("loadavg", [0])[0] > 0.5 * before.get("cores", 1):
        print(f"warning: load average {before['loadavg'][0]} on {before['cores']} cores: other work shares "
              f"the CPU and the timings will be noisy", file=sys.stderr)
    settings = {"checkpoint": str(ckpt), "backends": args.backends, "quants": args.quants,
                "ref_python": None if args.no_reference else args.ref_python,
                "ref_pythonpath": args.ref_pythonpath, "ref_device": args.ref_device,
                "ref_dtypes": [] if args.no_reference else args.ref_dtypes, "threads": args.threads,
                "installed": dict(args.installed_pythons),
                "steps": args.steps, "repeats": args.repeats, "warmup": args.warmup, "pause": args.pause,
                "seed": args.seed,
                "flash_attn": args.flash_attn,
                "cases": {k: {kk: vv for kk, vv in v.items() if kk != "ref_audio"} for k, v in cases.items()}}
    workers: list[Worker] = []
    results: dict[str, dict[str, list]] = {}
    ok = False
    try:
        # loaded one after another, so each worker's GPU-memory accounting sees only its own allocations
        for name, side, python, req in specs:
            w = Worker(name, side, python, _env_for(side, [str(Path(p).resolve()) for p in args.ref_pythonpath]),
                       req, args.timeout)
            workers.append(w)
            print(f"loading {name} ...", file=sys.stderr)
            w.load()
            print(f"  {name}: {w.info.get('device')} in {w.load_s:.1f} s", file=sys.stderr)

        for cname, case in cases.items():
            for w in workers:
                for i in range(args.warmup):
                    print(f"{cname}: warm-up {i + 1}/{args.warmup} {w.name}", file=sys.stderr)
                    w.run(case, f"{cname} warm-up")
            results[cname] = {w.name: [] for w in workers}
            for r in range(args.repeats):
                order = workers if r % 2 == 0 else workers[::-1]
                for w in order:
                    time.sleep(args.pause)
                    res = w.run(case, f"{cname} repeat {r + 1}")
                    results[cname][w.name].append(res)
                    print(f"{cname}: repeat {r + 1}/{args.repeats} {w.name}: {res['wall_s']:.3f} s",
                          file=sys.stderr)
            # a partial report after every case: a run cut short still leaves its figures behind
            write_outputs(args, build_report(settings, before, workers, results))
        smi = nvidia_smi_per_pid()
        for w in workers:
            w.stats = w.call({"cmd": "stats"}, "stats")["stats"]
            if w.pid in smi:
                w.stats["nvidia_smi_mib"] = smi[w.pid]
        ok = True
    finally:
        # after a failure or an interrupt a worker may be mid-run: end it rather than wait for it
        for w in workers:
            w.close(graceful=ok)
    return build_report(settings, before, workers, results)


def build_report(settings: dict, before: dict, workers: list[Worker], results: dict) -> dict:
    """The JSON report for the cases done so far (markdown included)."""
    report = {
        "command": [Path(sys.argv[0]).name] + sys.argv[1:],
        "machine": {**machine_info(), "loadavg_before": before.get("loadavg")},
        "settings": settings,
        "workers": [{"name": w.name, "side": w.side, "info": w.info, "load_s": w.load_s, "stats": w.stats}
                    for w in workers],
        "cases": {},
    }
    refs = [w for w in workers if w.side == "ref"]
    ours = [w for w in workers if w.side in ("ours", "installed")]
    # across backends, our first worker is also a baseline for the others' tokens (e.g. Vulkan against CPU)
    several_backends = len({w.load_req["backend"] for w in ours}) > 1
    baselines = refs + ours[:1] if several_backends else refs
    report["baselines"] = [b.name for b in baselines]
    for cname, res in results.items():
        per = {w.name: {"median": summarize(res[w.name]),
                        "runs": [{k: v for k, v in r.items() if k != "tokens"} for r in res[w.name]]}
               for w in workers}
        for w in ours:
            per[w.name]["vs"] = {}
            for b in baselines:
                if b is w:
                    continue
                mo, mb = per[w.name]["median"], per[b.name]["median"]
                per[w.name]["vs"][b.name] = {
                    "wall_ratio": mb["wall_s"] / mo["wall_s"],
                    "lm_step_ratio": (mb["lm_ms_per_step"] / mo["lm_ms_per_step"]
                                      if mb["lm_ms_per_step"] and mo["lm_ms_per_step"] else None),
                    "tokens": compare_tokens(res[w.name][0]["tokens"], res[b.name][0]["tokens"]),
                }
        report["cases"][cname] = per
    report["markdown"] = markdown(report)
    return report


def write_outputs(args: argparse.Namespace, report: dict) -> None:
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(report["markdown"])


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM (timeout(1), a job runner) ends the run like Ctrl-C: workers ended, partial report kept.
    # SIGINT is set explicitly because a shell's background job inherits it ignored.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    try:
        report = run(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; the cases finished so far are in --json / --markdown", file=sys.stderr)
        return 130
    print(report["markdown"])
    write_outputs(args, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
