#!/usr/bin/env python3
"""Throughput of the batched engine: N requests at once against the same N one by one, in one process.

    python3 tools/batch_bench.py --model GGUF [--codec GGUF] [--backend cpu|cuda] [--sizes 1,4,16,64]
        [--mix auto|mixed|multilingual] [--duration 5] [--steps 32] [--repeats 1] [--checkpoint CKPT --ref-python PY
        --ref-pythonpath DIR] [--json OUT] [--markdown OUT]

For each N it builds N requests of `--duration` seconds (a fixed duration, so every request is the same
length of audio; `--mix mixed` cycles auto, voice design and cloning from the synthetic clip of
tools/reference/synth_clip.py, `--mix multilingual` the same over texts in seven languages; seeds 0..N-1 with
the default sampling, position temperature 5), then times
    one by one   ov.synthesize() for each request in turn (clones reuse one voice prompt made beforehand),
    batched      ov.synthesize_batch(requests, batch_size=N) (clones from the clip: encoded once, cached),
alternating which goes first from one repeat to the next, after one untimed warm-up of each. Reported: the
aggregate audio seconds per wall second of each (best of the repeats), their ratio (batched / one by one), the
batched RTF (wall / audio), the peak memory of each phase (GPU: memory in use on the device, from its
free-memory counter; CPU: resident set size; sampled every 10 ms), and whether every request's tokens are equal
in both; the JSON also has every wall time, the process's CPU seconds per phase (about cores x wall when
nothing else takes the cores) and the load average.

With --checkpoint, --ref-python and --ref-pythonpath it also runs the reference's own batch CLI
(`omnivoice-infer-batch`, PyPI omnivoice 0.2.1) on the same requests written as its JSONL manifest, with
--batch_size N, and reports its own "Total synthesis time" (model loading excluded) beside ours.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tools"))

import bench  # noqa: E402  (the side-by-side tool: checkpoint conversion, the synthetic clip, machine info)

TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "She sells sea shells by the sea shore every single summer morning.",
    "A journey of a thousand miles begins with a single careful step.",
    "The weather today is bright and warm, with a gentle breeze from the west.",
    "Please remember to bring your notebook and a pen to the meeting tomorrow.",
    "Music has a way of reaching people when nothing else seems to help.",
    "The library opens at nine and closes late on the first Friday of each month.",
    "He walked slowly along the empty street, listening to the distant bells.",
]
INSTRUCTS = ["female, low pitch", "male, british accent", "female, young adult", "male, elderly, whisper"]
# --mix multilingual: (language, text), cycled beside the auto / design / clone modes (seven languages, so that
# every mode meets every language within 21 requests)
LANG_TEXTS = [
    ("English", "The quick brown fox jumps over the lazy dog near the river bank."),
    ("Chinese", "今天天气很好，我们一起去公园散步，顺便看看湖边的风景。"),
    ("French", "Le petit chat dort tranquillement sur le rebord de la fenêtre ensoleillée."),
    ("German", "Am Wochenende fahren wir mit dem Zug in die Berge und wandern den ganzen Tag."),
    ("Spanish", "La biblioteca abre a las nueve y cierra tarde el primer viernes de cada mes."),
    ("Japanese", "駅の近くに新しいパン屋さんができて、朝からたくさんの人が並んでいます。"),
    ("Italian", "Ogni mattina prendo un caffè al bar sotto casa prima di andare al lavoro."),
]


class PeakMemory:
    """Peak memory in use during a phase: the GPU's free-memory counter, or this process's resident set."""

    def __init__(self, runtime) -> None:
        self.runtime = runtime
        self._dev = None
        if runtime.is_gpu:
            from omnivoice.ggml.backend import find_device

            self._dev = find_device(runtime.device.spec)[1]

    def used(self) -> int:
        if self._dev is not None:
            from omnivoice.ggml import ffi, lib

            free, total = ffi.new("size_t *"), ffi.new("size_t *")
            lib.ggml_backend_dev_memory(self._dev, free, total)
            return int(total[0] - free[0])
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self) -> "PeakMemory":
        self.peak = self.used()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.used())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.used())


def make_requests(n: int, mix: str, duration: float, steps: int, clip: Path, transcript: str) -> list[dict]:
    out = []
    for i in range(n):
        r = {"id": f"r{i:03d}", "text": TEXTS[i % len(TEXTS)], "duration": duration, "num_step": steps, "seed": i}
        if mix == "multilingual":
            r["language"], r["text"] = LANG_TEXTS[i % len(LANG_TEXTS)]
        mode = i % 3 if mix in ("mixed", "multilingual") else 0
        if mode == 1:
            r["instruct"] = INSTRUCTS[i % len(INSTRUCTS)]
        elif mode == 2:
            r["ref_audio"], r["ref_text"] = str(clip), transcript
        out.append(r)
    return out


def one_by_one(ov, requests: list[dict], voice) -> list:
    results = []
    for r in requests:
        r = dict(r)
        r.pop("id")
        text = r.pop("text")
        if "ref_audio" in r:
            r.pop("ref_audio"), r.pop("ref_text")
            r["voice"] = voice
        results.append(ov.synthesize(text, **r))
    return results


def run_reference(args, requests: list[dict], n: int, workdir: Path) -> dict:
    """The reference's omnivoice-infer-batch on the same requests; its own synthesis time and audio."""
    manifest = workdir / f"ref-{n}.jsonl"
    with open(manifest, "w") as f:
        for r in requests:
            ref = {k: r[k] for k in ("id", "text", "ref_audio", "ref_text", "instruct", "duration") if k in r}
            if "language" in r:
                ref["language_id"] = r["language"]
            f.write(json.dumps(ref) + "\n")
    res_dir = workdir / f"ref-out-{n}"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    if args.ref_pythonpath:  # both packages are named omnivoice: only the reference's may be on the path
        env["PYTHONPATH"] = args.ref_pythonpath
    cmd = [args.ref_python, "-c", "import sys; from omnivoice.cli.infer_batch import main; sys.argv[0] = "
           "'omnivoice-infer-batch'; sys.exit(main())", "--model", str(args.checkpoint), "--test_list",
           str(manifest), "--res_dir", str(res_dir), "--num_step", str(args.steps), "--batch_size", str(n)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.ref_timeout, cwd=workdir)
    wall = time.perf_counter() - t0
    log = p.stdout + p.stderr
    synth = re.search(r"Total synthesis time: ([\d.]+)s", log)
    audio = re.search(r"Total audio duration: ([\d.]+)s", log)
    if p.returncode != 0 or not synth or not audio:
        return {"ok": False, "exit": p.returncode, "log_tail": log[-2000:]}
    return {"ok": True, "synthesis_s": float(synth.group(1)), "audio_s": float(audio.group(1)),
            "wall_with_load_s": wall, "audio_per_s": float(audio.group(1)) / float(synth.group(1))}


def cpu_seconds() -> float:
    """User + system CPU time of this process (all its threads) so far."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tokens_equal(a: list, b: list) -> bool:
    import numpy as np

    return all(len(x.tokens) == len(y.tokens) and all(np.array_equal(p, q) for p, q in zip(x.tokens, y.tokens))
               for x, y in zip(a, b))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="LM GGUF (or a checkpoint directory, converted into --gguf-dir)")
    p.add_argument("--codec", help="codec GGUF (default: beside the model)")
    p.add_argument("--quant", default="auto", help="weight type when --model is a checkpoint (default: by backend)")
    p.add_argument("--gguf-dir", help="where a checkpoint is converted (default CHECKPOINT-gguf)")
    p.add_argument("--backend", default="auto")
    p.add_argument("--threads", type=int)
    p.add_argument("--sizes", default="1,4,16,64")
    p.add_argument("--mix", default="mixed", choices=["auto", "mixed", "multilingual"])
    p.add_argument("--duration", type=float, default=5.0)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--no-one-by-one-above", type=int, default=None, metavar="N",
                   help="skip the one-by-one run for sizes above N (report batched only)")
    p.add_argument("--checkpoint", help="HF checkpoint for the reference's omnivoice-infer-batch")
    p.add_argument("--ref-python", help="the reference's interpreter")
    p.add_argument("--ref-pythonpath", help="PYTHONPATH that holds the reference's package")
    p.add_argument("--ref-timeout", type=float, default=600)
    p.add_argument("--write-manifest", metavar="JSONL",
                   help="only write the requests of the first size as a batch manifest (the clip beside it), exit")
    p.add_argument("--profile", action="store_true",
                   help="after each size, one more batched run with the engine's wall time by phase (device runs, "
                        "host's MaskGIT, decode, ...) and, under cProfile, the host functions that cost most")
    p.add_argument("--json", help="write every figure here (rewritten after each size)")
    p.add_argument("--markdown", help="write the table here")
    args = p.parse_args(argv)

    sizes = [int(x) for x in args.sizes.split(",")]
    if args.write_manifest:
        path = Path(args.write_manifest)
        path.parent.mkdir(parents=True, exist_ok=True)
        transcript = bench.write_clip(path.parent / "clip.wav")
        with open(path, "w") as f:
            for r in make_requests(sizes[0], args.mix, args.duration, args.steps, Path("clip.wav"), transcript):
                f.write(json.dumps(r) + "\n")
        return 0
    import omnivoice

    model = args.model
    if model and Path(model).is_dir():
        from omnivoice.api import default_quant
        from omnivoice.ggml import Runtime

        with Runtime(args.backend) as rt:
            quant = default_quant(rt.device.backend) if args.quant == "auto" else args.quant
        gguf_dir = Path(args.gguf_dir or f"{model.rstrip('/')}-gguf")
        model = str(bench.convert(Path(model), gguf_dir, [quant])[quant])
    work = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    clip = work / "clip.wav"
    transcript = bench.write_clip(clip)
    machine = bench.machine_info()
    print(f"machine: {machine}", file=sys.stderr)
    rows = []
    t_load = time.perf_counter()
    with omnivoice.OmniVoice(model, args.codec, backend=args.backend, n_threads=args.threads) as ov:
        load_s = time.perf_counter() - t_load
        dev = ov.runtime.device
        print(f"model {ov.model_path.name} on {dev.spec} ({dev.description}), loaded in {load_s:.1f}s",
              file=sys.stderr)
        voice = ov.create_voice(str(clip), transcript)
        warm = make_requests(2, args.mix, args.duration, args.steps, clip, transcript)
        one_by_one(ov, warm[:1], voice)
        ov.synthesize_batch(warm, batch_size=2)
        for n in sizes:
            requests = make_requests(n, args.mix, args.duration, args.steps, clip, transcript)
            walls = {"one": [], "batch": []}
            cpus = {"one": [], "batch": []}
            peaks = {"one": 0, "batch": 0}
            outs = {}
            do_one = args.no_one_by_one_above is None or n <= args.no_one_by_one_above
            for rep in range(args.repeats):
                order = ["one", "batch"] if rep % 2 == 0 else ["batch", "one"]
                for what in order:
                    if what == "one" and not do_one:
                        continue
                    with PeakMemory(ov.runtime) as mem:
                        t0, c0 = time.perf_counter(), cpu_seconds()
                        outs[what] = (one_by_one(ov, requests, voice) if what == "one"
                                      else ov.synthesize_batch(requests, batch_size=n))
                        walls[what].append(time.perf_counter() - t0)
                        cpus[what].append(cpu_seconds() - c0)
                    peaks[what] = max(peaks[what], mem.peak)
                    print(f"N={n} {what}: {walls[what][-1]:.2f} s wall, {cpus[what][-1]:.1f} CPU s, load "
                          f"{os.getloadavg()[0]:.1f}", file=sys.stderr)
            # what came out, post-processing's padding included (the reference reports the same measure)
            audio_s = sum(r.duration for r in outs["batch"])
            row = {"n": n, "mix": args.mix, "steps": args.steps, "duration": args.duration, "audio_s": audio_s,
                   "batched_wall_s": min(walls["batch"]),
                   "batched_audio_per_s": audio_s / min(walls["batch"]),
                   "batched_rtf": min(walls["batch"]) / audio_s, "batched_peak_bytes": peaks["batch"],
                   "walls": walls, "cpu_s": cpus, "loadavg_after": os.getloadavg()[0]}
            if do_one:
                row.update({"one_by_one_wall_s": min(walls["one"]), "one_by_one_audio_per_s": audio_s / min(walls["one"]),
                            "ratio": min(walls["one"]) / min(walls["batch"]), "one_by_one_peak_bytes": peaks["one"],
                            "tokens_equal": tokens_equal(outs["one"], outs["batch"])})
            if args.profile:
                row["profile"] = profile_batched(ov, requests, n)
            if args.checkpoint and args.ref_python:
                row["reference"] = run_reference(args, requests, n, work)
            rows.append(row)
            report = {"machine": machine, "device": f"{dev.spec} ({dev.description})", "model": str(model),
                      "threads": ov.runtime.n_threads, "rows": rows,
                      "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:])}
            if args.json:
                Path(args.json).write_text(json.dumps(report, indent=1))
    table = markdown(rows)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table)
    return 0


def profile_batched(ov, requests: list[dict], n: int, top: int = 25) -> dict:
    """One batched run through an engine of our own: its wall seconds by phase; then the same run under
    cProfile, the host functions by own time (cProfile slows Python, so only the ranking counts)."""
    import cProfile
    import io
    import pstats

    from omnivoice.engine import BatchEngine
    from omnivoice.engine.offline import prepare, run_batch

    prepared = [(i, r, s) for i, (r, s) in enumerate(prepare(requests))]
    out = {}
    for label in ("plain", "cprofile"):
        prof = cProfile.Profile() if label == "cprofile" else None
        with BatchEngine(ov, max_batch=n) as engine:
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            for _ in run_batch(ov, prepared, n, engine=engine):
                pass
            if prof:
                prof.disable()
            wall = time.perf_counter() - t0
        if prof is None:
            out = {"wall_s": wall, "steps": engine.stats["steps"], "graphs": engine.stats["graphs"],
                   "phases_s": dict(engine.timings)}
            phases = ", ".join(f"{k} {v:.2f}" for k, v in engine.timings.items())
            print(f"N={n} profile: {wall:.2f} s wall, {engine.stats['steps']} steps, {engine.stats['graphs']} "
                  f"graphs; seconds by phase: {phases}", file=sys.stderr)
        else:
            text = io.StringIO()
            pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
            out["cprofile_wall_s"] = wall
            out["cprofile_top"] = text.getvalue()
            print(text.getvalue(), file=sys.stderr)
    return out


def markdown(rows: list[dict]) -> str:
    gib = 2.0 ** 30
    lines = ["| N | mix | one by one: wall s, audio s/s | batched: wall s, audio s/s | batched ÷ one by one | "
             "batched RTF | peak memory GiB (one by one / batched) | tokens equal | reference infer-batch: "
             "synthesis s, audio s/s |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        one = (f"{r['one_by_one_wall_s']:.2f}, {r['one_by_one_audio_per_s']:.2f}" if "ratio" in r else "—")
        ref = r.get("reference")
        ref_s = (f"{ref['synthesis_s']:.2f}, {ref['audio_per_s']:.2f}" if ref and ref.get("ok")
                 else "failed" if ref else "—")
        lines.append(
            f"| {r['n']} | {r['mix']} | {one} | {r['batched_wall_s']:.2f}, {r['batched_audio_per_s']:.2f} | "
            + (f"{r['ratio']:.2f}×" if "ratio" in r else "—")
            + f" | {r['batched_rtf']:.4f} | "
            + (f"{r['one_by_one_peak_bytes'] / gib:.2f} / " if "ratio" in r else "")
            + f"{r['batched_peak_bytes'] / gib:.2f} | "
            + ("yes" if r.get("tokens_equal") else "no" if "tokens_equal" in r else "—")
            + f" | {ref_s} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
