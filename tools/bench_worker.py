#!/usr/bin/env python3
"""One side of tools/bench.py: a long-lived process that loads one implementation once, then runs cases.

    python3 tools/bench_worker.py --side ours         # our package, imported from the repository root
    VENV/bin/python tools/bench_worker.py --side installed   # our package as installed there (a wheel)
    REF_PYTHON tools/bench_worker.py --side ref       # the PyTorch reference (PyPI omnivoice 0.2.1), under
                                                      # its own interpreter / PYTHONPATH
tools/bench.py starts these; running one by hand is for debugging only.

Protocol: one JSON request per line on stdin, one JSON reply per line on the ORIGINAL stdout. File descriptor
1 is pointed at stderr first, so whatever the libraries print (Python or C) cannot corrupt the protocol.

    {"cmd": "load", ...}          -> {"ok": true, "load_s": ..., "info": {...}}
    {"cmd": "run", "case": {...}} -> {"ok": true, "result": {...}}     (timings of one synthesis)
    {"cmd": "stats"}              -> {"ok": true, "stats": {...}}      (peak RSS, peak GPU memory)
    {"cmd": "quit"}               -> {"ok": true}, then exit
    any failure                   -> {"ok": false, "error": "...", "traceback": "..."}

Both packages are named `omnivoice`: this file imports neither at module level and checks, after importing,
that it got the right one (ours from this repository, the reference from anywhere else).
Timers synchronize the GPU before reading the clock (the reference's CUDA calls are asynchronous; ours read
their results back, which synchronizes).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import platform
import resource
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OURS = REPO / "omnivoice"


def cpu_seconds() -> float:
    """User + system CPU time of this process (all threads) so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


class GpuMemory:
    """Peak device memory this process took, from the device's free-memory counter.

    The other workers share the GPU, but they sit idle while this one works, so only changes of the free
    counter seen during this worker's own activities (load, runs) are counted as ours. Excludes the CUDA
    context, which exists before the first reading.
    """

    def __init__(self, free_fn) -> None:
        self.free_fn = free_fn
        self.used = 0          # what this process holds between activities
        self.peak = 0
        self._start = self._low = None

    def begin(self) -> None:
        self._start = self._low = self.free_fn()

    def sample(self) -> None:
        if self._start is not None:
            self._low = min(self._low, self.free_fn())

    def end(self) -> None:
        if self._start is None:
            return
        self.sample()
        end = self.free_fn()
        self.peak = max(self.peak, self.used + self._start - self._low)
        self.used += self._start - end
        self._start = self._low = None


def _tokens_payload(tokens) -> dict:
    import numpy as np

    t = np.ascontiguousarray(np.asarray(tokens, dtype=np.int32))
    raw = t.tobytes()
    return {"shape": list(t.shape), "sha256": hashlib.sha256(raw).hexdigest()[:16],
            "b64": base64.b64encode(raw).decode("ascii")}


class _Recorder:
    """Per-run lists of timed calls."""

    def __init__(self) -> None:
        self.lm: list[float] = []
        self.graph: list[float] = []
        self.encode: list[float] = []
        self.decode: list[float] = []
        self.gen: list[float] = []
        self.tokens: list = []

    def reset(self) -> None:
        # cleared in place: the timing wrappers hold these very lists
        for v in vars(self).values():
            v.clear()


# --------------------------------------------------------------------------------------------------
# Our side
# --------------------------------------------------------------------------------------------------


def _loaded_libraries() -> list[str]:
    """The ggml CPU module and the package's kernels this process loaded (a wheel's ggml-cpu-<level> and
    omnivoice-ops-<level> say which x86 level it chose), from /proc/self/maps; empty where there is none."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    names = {Path(line.split()[-1]).name for line in maps.splitlines() if "/" in line}
    return sorted(n for n in names if n.startswith(("libggml-cpu", "libomnivoice-ops")))


class OursSide:
    """Our pipeline (omnivoice.OmniVoice) on a ggml backend: the repository's, or with `installed` the one installed
    in this interpreter (a wheel's venv; bench.py keeps the repository off its PYTHONPATH)."""

    def __init__(self, installed: bool = False) -> None:
        self.installed = installed
        self.rec = _Recorder()
        self.ov = None
        self.mem = None
        self.step_times: list[float] = []

    def load(self, req: dict) -> dict:
        if not self.installed:
            sys.path.insert(0, str(REPO))
        import omnivoice

        where = Path(omnivoice.__file__).resolve()
        if (where.parent == OURS) == self.installed:
            raise RuntimeError(f"our worker imported omnivoice from {where}, "
                               f"{'the repository, not an installed copy' if self.installed else 'not the repository'}")
        from omnivoice.ggml import ffi, lib
        from omnivoice.ggml.backend import find_device

        device, dev = find_device(req["backend"])
        if device.kind != "cpu":
            free, total = ffi.new("size_t *"), ffi.new("size_t *")

            def free_fn() -> int:
                lib.ggml_backend_dev_memory(dev, free, total)
                return int(free[0])

            self.mem = GpuMemory(free_fn)
            self.mem.begin()
        t0 = time.perf_counter()
        self.ov = omnivoice.OmniVoice(model=req["model"], codec=req["codec"], backend=req["backend"],
                                      n_threads=req["threads"], flash_attn=req.get("flash_attn"),
                                      cpu_products=req.get("cpu_products"))
        load_s = time.perf_counter() - t0
        if self.mem:
            self.mem.end()
        self._install_timers()
        rt = self.ov.runtime
        return {"load_s": load_s, "info": {
            "device": f"{rt.device.backend} {rt.device.description}", "threads": rt.n_threads,
            "flash_attn": bool(self.ov.lm.flash_attn), "cpu_products": self.ov.lm.cpu_products,
            "model": str(self.ov.model_path),
            "package": str(Path(omnivoice.__file__).parent), "python": platform.python_version(),
            "libraries": _loaded_libraries()}}

    def _install_timers(self) -> None:
        """Time the LM steps, graph builds and codec calls by wrapping the runner's methods."""
        from omnivoice.runners import lm as lm_runner

        rec, mem = self.rec, self.mem
        finish, session = lm_runner.ChunkSession.finish, lm_runner.LanguageModel.session

        def timed_finish(sess):
            # every step ends in finish (step is launch + finish; the engine calls the two halves): the
            # session's own times of the step, prepare + launch and wait + read, not the host's work between
            out = finish(sess)
            rec.lm.append(sum(sess.times))
            if mem:
                mem.sample()
            return out

        on_device = lm_runner.ChunkSession.run_on_device

        def timed_on_device(sess, tokens, plans, *args):
            # steps run queued on the device (CUDA): their mean, choices included, once a step
            t0 = time.perf_counter()
            out = on_device(sess, tokens, plans, *args)
            steps = len(plans[0])
            rec.lm += [(time.perf_counter() - t0) / steps] * steps
            if mem:
                mem.sample()
            return out

        def timed_session(model, *args, **kwargs):
            t0 = time.perf_counter()
            out = session(model, *args, **kwargs)
            rec.graph.append(time.perf_counter() - t0)
            return out

        lm_runner.ChunkSession.finish = timed_finish
        lm_runner.ChunkSession.run_on_device = timed_on_device
        lm_runner.LanguageModel.session = timed_session
        codec = self.ov.codec
        # encode() goes through encode_batch(), which create_voice() calls directly
        for name, sink in (("encode_batch", rec.encode), ("decode_batch", rec.decode)):
            orig = getattr(codec, name)

            def timed(*args, _orig=orig, _sink=sink, **kwargs):
                t0 = time.perf_counter()
                out = _orig(*args, **kwargs)
                _sink.append(time.perf_counter() - t0)
                if mem:
                    mem.sample()
                return out

            setattr(codec, name, timed)

    def run(self, case: dict) -> dict:
        rec = self.rec
        rec.reset()
        steps_seen = [0]

        def progress(done: int, total: int) -> None:
            steps_seen[0] = done

        kwargs = dict(language=case["language"], duration=case["duration"], num_step=case["steps"],
                      position_temperature=0.0, class_temperature=0.0, seed=case["seed"])
        if case.get("ref_audio"):
            kwargs.update(ref_audio=case["ref_audio"], ref_text=case["ref_text"])
        if self.mem:
            self.mem.begin()
        c0, t0 = cpu_seconds(), time.perf_counter()
        res = self.ov.synthesize(case["text"], progress=progress, **kwargs)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        if self.mem:
            self.mem.end()
        return {
            "wall_s": wall, "cpu_s": cpu, "gen_s": res.timings.get("generate"),
            "encode_s": sum(rec.encode) if rec.encode else None,
            "decode_s": sum(rec.decode) if rec.decode else res.timings.get("decode"),
            "lm_s": sum(rec.lm), "lm_calls": len(rec.lm),
            "lm_ms_median": 1000 * sorted(rec.lm)[len(rec.lm) // 2] if rec.lm else None,
            "graph_build_s": sum(rec.graph),
            "frames": int(sum(t.shape[1] for t in res.tokens)), "chunks": len(res.tokens),
            "audio_s": res.duration, "tokens": _tokens_payload(res.tokens[0]),
        }

    def stats(self) -> dict:
        return {"peak_rss_bytes": peak_rss_bytes(), "gpu_peak_bytes": self.mem.peak if self.mem else None}


# --------------------------------------------------------------------------------------------------
# The reference side
# --------------------------------------------------------------------------------------------------


class RefSide:
    """The PyTorch reference: OmniVoice.from_pretrained(...).generate(...), with timers on its methods."""

    def __init__(self) -> None:
        self.rec = _Recorder()
        self.model = None
        self.mem = None

    def load(self, req: dict) -> dict:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch

            import omnivoice
        except ImportError as e:
            raise RuntimeError(f"{e} under {sys.executable}: pass the reference's interpreter (--ref-python) "
                               f"and/or the folder holding its packages (--ref-pythonpath)") from e

        where = Path(omnivoice.__file__).resolve()
        if where.parent == OURS:
            raise RuntimeError(f"the reference worker imported OUR omnivoice ({where}); run it with the "
                               f"reference's interpreter / --ref-pythonpath and without the repository on the path")
        from omnivoice.models.omnivoice import OmniVoice, OmniVoiceGenerationConfig

        self.torch, self.GenConfig = torch, OmniVoiceGenerationConfig
        device = req["device"]
        self.cuda = device.startswith("cuda")
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError("--ref-device cuda, but torch sees no CUDA device")
        torch.set_num_threads(req["threads"])
        # float32 means float32: no TF32 shortcuts in matmuls or convolutions
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[req["dtype"]]
        if self.cuda:
            self.mem = GpuMemory(lambda: int(torch.cuda.mem_get_info()[0]))
            torch.cuda.reset_peak_memory_stats()
            self.mem.begin()
        kwargs = {"dtype": dtype, "attn_implementation": "sdpa"}
        if self.cuda:
            kwargs["device_map"] = device
        t0 = time.perf_counter()
        model = OmniVoice.from_pretrained(req["checkpoint"], **kwargs)
        model.eval()
        self._sync()
        load_s = time.perf_counter() - t0
        if self.mem:
            self.mem.end()
        self.model = model
        self._install_timers()
        import importlib.metadata as md

        versions = {}
        for pkg in ("omnivoice", "torch", "transformers", "torchaudio"):
            try:
                versions[pkg] = md.version(pkg)
            except md.PackageNotFoundError:
                versions[pkg] = None
        dev = torch.cuda.get_device_name(torch.device(device)) if self.cuda else platform.processor() or "cpu"
        return {"load_s": load_s, "info": {
            "device": f"torch {device} {dev}", "threads": torch.get_num_threads(), "dtype": req["dtype"],
            "lm_dtype": str(next(model.parameters()).dtype), "versions": versions,
            "package": str(where.parent), "python": platform.python_version()}}

    def _sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _timed(self, fn, sink: list, after=None):
        sync, mem = self._sync, self.mem

        def wrapper(*args, **kwargs):
            sync()
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            sync()
            sink.append(time.perf_counter() - t0)
            if mem:
                mem.sample()
            if after:
                after(out)
            return out

        return wrapper

    def _install_timers(self) -> None:
        m, rec = self.model, self.rec
        tok = m.audio_tokenizer
        # self(...) in the MaskGIT loop goes through nn.Module.__call__, which looks forward up on the instance
        m.forward = self._timed(m.forward, rec.lm)
        m._generate_iterative = self._timed(m._generate_iterative, rec.gen, after=rec.tokens.append)
        tok.encode = self._timed(tok.encode, rec.encode)
        tok.decode = self._timed(tok.decode, rec.decode)

    def run(self, case: dict) -> dict:
        torch, rec = self.torch, self.rec
        rec.reset()
        gen_config = self.GenConfig(num_step=case["steps"], position_temperature=0.0, class_temperature=0.0)
        kwargs = {"text": case["text"], "language": case["language"], "duration": case["duration"],
                  "generation_config": gen_config}
        if case.get("ref_audio"):
            kwargs.update(ref_audio=case["ref_audio"], ref_text=case["ref_text"])
        torch.manual_seed(case["seed"])
        if self.mem:
            self.mem.begin()
        self._sync()
        c0, t0 = cpu_seconds(), time.perf_counter()
        audios = self.model.generate(**kwargs)
        self._sync()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        if self.mem:
            self.mem.end()
        chunks = [t for call in rec.tokens for t in call]
        first = chunks[0].detach().cpu().numpy()
        return {
            "wall_s": wall, "cpu_s": cpu, "gen_s": sum(rec.gen),
            "encode_s": sum(rec.encode) if rec.encode else None,
            "decode_s": sum(rec.decode) if rec.decode else None,
            "lm_s": sum(rec.lm), "lm_calls": len(rec.lm),
            "lm_ms_median": 1000 * sorted(rec.lm)[len(rec.lm) // 2] if rec.lm else None,
            "graph_build_s": None,
            "frames": int(sum(t.shape[-1] for t in chunks)), "chunks": len(chunks),
            "audio_s": len(audios[0]) / self.model.sampling_rate, "tokens": _tokens_payload(first),
        }

    def stats(self) -> dict:
        torch = self.torch
        out = {"peak_rss_bytes": peak_rss_bytes(), "gpu_peak_bytes": self.mem.peak if self.mem else None}
        if self.cuda:
            out["torch_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
            out["torch_max_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        return out


# --------------------------------------------------------------------------------------------------
# Main loop
# --------------------------------------------------------------------------------------------------


def serve(side) -> int:
    # Keep the real stdout for replies; everything else written to fd 1 lands on stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            cmd = req.get("cmd")
            if cmd == "load":
                reply = side.load(req)
            elif cmd == "run":
                reply = {"result": side.run(req["case"])}
            elif cmd == "stats":
                reply = {"stats": side.stats()}
            elif cmd == "quit":
                proto.write(json.dumps({"ok": True}) + "\n")
                proto.flush()
                return 0
            else:
                raise ValueError(f"unknown command {cmd!r}")
            reply["ok"] = True
        except Exception as e:  # reported to the driver, which stops with the message
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="A bench.py worker (JSON lines on stdin/stdout).")
    ap.add_argument("--side", choices=("ours", "installed", "ref"), required=True)
    args = ap.parse_args(argv)
    # tools/ (this file's folder) must not shadow anything either side imports
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(here)]
    return serve(RefSide() if args.side == "ref" else OursSide(installed=args.side == "installed"))


if __name__ == "__main__":
    sys.exit(main())
