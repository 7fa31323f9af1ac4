"""`python -m omnivoice.batch MANIFEST.jsonl -o OUTDIR`: a manifest of requests to a folder of audio files.

Argument parsing, the manifest and the output folder are checked before any model is loaded; then the items
not done yet run through the batched engine (or across a Ray cluster with --ray) and each is written as it
finishes. See omnivoice/batch/__init__.py.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
import time
from typing import Optional

from .. import cli
from ..arguments import add_model_options, add_quant_option, add_threads_option
from ..cli import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_OK, EXIT_OOM
from ..options import OptionError, add_arguments, flag_message, flags, from_arguments
from .manifest import OPTION_FIELDS, read_manifest
from .outputs import FAILURES, OutputDir, encode_result, exit_code_of

MANIFEST_HELP = textwrap.fill(
    'manifest: one JSON object per line, as the reference\'s omnivoice-infer-batch reads it: "id" and "text" '
    'required; "ref_audio" (relative paths are relative to the manifest\'s folder) with "ref_text" for cloning, '
    '"instruct" for voice design, "language_id" (or "language"), "duration", "speed"; and any of '
    f'{", ".join(OPTION_FIELDS)} (they override the options below). A line with any other field fails, the '
    'field and the nearest known one named.', 110)

EPILOG = f"""\
{MANIFEST_HELP}

output: OUTDIR/<id>.wav (or .flac, .mp3, .ogg, .opus), written whole or not at all; with --save-tokens also
OUTDIR/<id>.npy (int32 [8, T], the chunks' tokens joined). An id whose audio file exists is skipped (so a run
stopped by Ctrl-C resumes where it was) unless --overwrite. Items that cannot be synthesized are recorded in
OUTDIR/{FAILURES} ({{"id", "line", "reason"}}) and the run goes on.

exit status: 0 every item written (or already there); 2 some items failed as bad input, or the manifest, the
options or OUTDIR are bad (then nothing runs); 1 another failure; 3 out of memory; 130 interrupted (SIGINT);
143 terminated (SIGTERM). Interrupted, the finished items stay: run the same command again to resume.

examples:
  python -m omnivoice.batch lines.jsonl -o out/ --model ./OmniVoice
  python -m omnivoice.batch lines.jsonl -o out/ --format flac --save-tokens --seed 7
  python -m omnivoice.batch lines.jsonl -o out/ --ray                 # one actor per GPU of the cluster
  python -m omnivoice.batch lines.jsonl -o out/ --ray auto --cpu-actors 4
"""


# the synthesis options a flag sets for every line (omnivoice.options makes the flags); duration and speed are
# the lines' own
OPTION_FLAGS = ("num_step", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
                "class_temperature", "seed", "denoise", "postprocess_output", "chunk_duration", "chunk_threshold")
FLAGS = {"language": "--language", **flags(OPTION_FLAGS)}


def build_parser() -> argparse.ArgumentParser:
    from ..audio.io import OUTPUT_FORMATS

    p = argparse.ArgumentParser(prog="python -m omnivoice.batch", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Synthesize every line of a JSONL manifest, many at a time.")
    p.add_argument("manifest", help="JSONL manifest (see below)")
    p.add_argument("-o", "--output-dir", required=True, metavar="OUTDIR", help="output folder (created if needed)")
    p.add_argument("--format", default="wav16", choices=list(OUTPUT_FORMATS), help="audio format (default wav16)")
    p.add_argument("--overwrite", action="store_true", help="synthesize items whose output exists again")
    p.add_argument("--save-tokens", action="store_true", help="also write OUTDIR/<id>.npy (int32 [8, T])")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress or summary on stderr")
    p.add_argument("--verbose", "-v", action="store_true", help="log details on stderr")

    g = p.add_argument_group("model")
    add_model_options(g)
    add_quant_option(g)
    g.add_argument("--backend", default="auto", help="auto, cpu, cuda, vulkan, metal, optionally :INDEX")
    add_threads_option(g, "; with --cpu-actors, each actor's share of the cluster's CPUs")
    g.add_argument("--batch-size", default="auto",
                   help="requests per LM step (default auto: by device and free memory)")

    g = p.add_argument_group("generation (defaults for lines that do not set them)")
    g.add_argument("--language", help="language for lines without language_id")
    add_arguments(g, OPTION_FLAGS)
    g.add_argument("--no-preprocess-prompt", action="store_true",
                   help="skip reference silence trimming and transcript punctuation")

    g = p.add_argument_group("distributed (Ray, pip install 'omnivoice-ggml[ray]')")
    g.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="spread the items over a Ray cluster: one actor per GPU; ADDRESS as ray.init takes it "
                        "(none: $RAY_ADDRESS, else a local cluster)")
    g.add_argument("--cpu-actors", type=int, metavar="N", help="with --ray: N actors on CPUs instead of GPUs")
    g.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                   help="with --ray: GPU actors skip the small batch they run at load (see omnivoice.batch.ray)")
    return p


def defaults_of(args) -> dict:
    """SynthesisRequest fields from the command line, for lines that do not give them."""
    return dict(language=args.language, preprocess_prompt=not args.no_preprocess_prompt,
                **from_arguments(args, OPTION_FLAGS))


def check_defaults(defaults: dict) -> None:
    """The command line's options checked as synthesize checks them (settings.check_options): a bad one is bad
    input named by its flag, before the manifest is read, rather than a failure of every line."""
    from ..settings import check_options

    opts = {k: v for k, v in defaults.items() if k not in ("language", "preprocess_prompt")}
    try:
        check_options("", defaults["language"], None, **opts)
    except OptionError as e:
        raise ValueError(flag_message(e, FLAGS)) from None
    except ValueError as e:
        raise ValueError(f"--language: {e}") from None


def batch_size_of(value: str):
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--batch-size must be a positive integer or 'auto', got {value!r}")
    return n


class BatchProgress:
    """Items done, items/s and audio seconds per second on stderr: a bar on a terminal, else a line every
    few seconds."""

    def __init__(self, total: int, enabled: bool, every: float = 5.0) -> None:
        self.total, self.enabled = total, enabled
        self.tty = sys.stderr.isatty()
        self.every = every
        self.t0 = self.last = time.perf_counter()
        self.t_ready: Optional[float] = None
        self.t_last: Optional[float] = None   # the last item's end
        self.done = self.failed = 0
        self.audio_s = 0.0

    def ready(self) -> None:
        """The models are loaded: rates count from here."""
        self.t_ready = time.perf_counter()

    def update(self, audio_s: float = 0.0, failed: bool = False) -> None:
        self.done += 1
        self.failed += failed
        self.audio_s += audio_s
        now = self.t_last = time.perf_counter()
        if self.enabled and (self.tty or now - self.last >= self.every or self.done == self.total):
            self.last = now
            self._show(now)

    def line(self, now: Optional[float] = None) -> str:
        wall = max((now or time.perf_counter()) - (self.t_ready or self.t0), 1e-9)
        return (f"{self.done}/{self.total} items ({self.failed} failed)  {self.done / wall:.2f} items/s  "
                f"{self.audio_s / wall:.1f} audio s/s  {wall:.0f} s")

    def _show(self, now: float) -> None:
        if self.tty:
            width = 24
            fill = int(width * self.done / max(self.total, 1))
            sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {self.line(now)}")
            if self.done >= self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(self.line(now) + "\n")
        sys.stderr.flush()


def run(args) -> int:
    say = (lambda msg: None) if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    batch_size = batch_size_of(args.batch_size)
    if args.cpu_actors is not None and (args.ray is None or args.cpu_actors < 1):
        raise ValueError("--cpu-actors N needs --ray and N >= 1")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    defaults = defaults_of(args)
    check_defaults(defaults)
    manifest = read_manifest(args.manifest, defaults)
    try:
        out = OutputDir(args.output_dir, args.format, args.save_tokens)
    except OSError as e:
        raise ValueError(f"output folder {args.output_dir}: cannot be written ({e.strerror or e})") from None
    skipped = 0
    todo = []
    for it in manifest.items:
        if it.error is not None:
            out.fail(it.id, it.line, it.error)
        elif not args.overwrite and out.done(it.id):
            skipped += 1
        else:
            todo.append(it)
    bad = len(manifest.bad)
    say(f"{len(manifest.items)} items in {args.manifest}: {len(todo)} to do, {skipped} already done, {bad} bad")
    progress = BatchProgress(len(todo), not args.quiet)
    severity = [EXIT_BAD_INPUT] if bad else []
    try:
        return _run_items(args, todo, batch_size, out, progress, say, severity, skipped, bad)
    except (KeyboardInterrupt, cli.Terminated):
        print("finished items are kept; run the same command again to resume", file=sys.stderr)
        raise


def _run_items(args, todo, batch_size, out, progress, say, severity, skipped, bad) -> int:
    t0 = time.perf_counter()
    outcomes = None
    try:
        if todo:
            if args.ray is not None:
                from .ray import run_ray

                outcomes = run_ray(args, todo, say, progress.ready, batch_size)
            else:
                outcomes = run_local(args, todo, batch_size, say, progress.ready)
            for it, outcome in outcomes:
                if isinstance(outcome, BaseException):
                    out.fail(it.id, it.line, f"{type(outcome).__name__}: {outcome}" if not isinstance(
                        outcome, ValueError) else str(outcome))
                    severity.append(exit_code_of(outcome))
                    progress.update(failed=True)
                else:
                    audio_bytes, tokens, seconds = outcome
                    with cli.signals_deferred():  # an item's files are written whole, temporaries never left
                        out.write(it.id, audio_bytes, tokens)
                    progress.update(seconds)
    finally:
        if outcomes is not None:
            outcomes.close()  # stops the engine (or the Ray actors) now, also on Ctrl-C
        out.close()
    end = time.perf_counter()
    # the rates count from the models' loading to the last item: not the teardown after it (a local Ray
    # cluster's shutdown takes seconds, a large share of a short run's work; BENCHMARKS.md, Ray)
    wall, work = end - t0, (progress.t_last or end) - (progress.t_ready or t0)
    written = progress.done - progress.failed
    say(f"done: {written} written, {skipped} skipped (already there), {progress.failed + bad} failed"
        + (f" (see {out.path / FAILURES})" if progress.failed + bad else "")
        + (f"; {progress.audio_s:.1f} s of audio in {wall:.1f} s, {work:.2f} s from loading to the last item: "
           f"{written / max(work, 1e-9):.2f} items/s, {progress.audio_s / max(work, 1e-9):.1f} audio s/s "
           f"(RTF {work / max(progress.audio_s, 1e-9):.4f})" if written else ""))
    for code in (EXIT_FAILURE, EXIT_OOM, EXIT_BAD_INPUT):
        if code in severity:
            return code
    return EXIT_OK


def run_local(args, items, batch_size, say, on_ready=lambda: None):
    """(item, (audio bytes, tokens, seconds) or exception) for every item, in the order they finish."""
    from ..api import OmniVoice
    from ..engine import BatchEngine
    from ..engine.offline import prepare, run_batch

    t0 = time.perf_counter()
    with OmniVoice(args.model, args.codec, backend=args.backend, n_threads=args.threads, quant=args.quant,
                   cpu_products=args.cpu_products) as ov:
        say(f"model {ov.model_path.name} on {ov.runtime.label}, "
            f"loaded in {time.perf_counter() - t0:.1f}s")
        runnable = []
        for it, p in zip(items, prepare([it.request for it in items])):
            if isinstance(p, Exception):
                yield it, p
            else:
                runnable.append((it, p))
        with BatchEngine(ov, max_batch=batch_size) as engine:
            lim = engine.limits
            say(f"batch: up to {lim.max_requests} requests"
                + (f", {lim.max_positions} packed positions" if lim.max_positions else "") + " per step")
            on_ready()
            jobs = [(i, req, settings) for i, (_, (req, settings)) in enumerate(runnable)]
            for i, outcome in run_batch(ov, jobs, engine=engine):
                it = runnable[i][0]
                if isinstance(outcome, BaseException):
                    yield it, outcome
                    continue
                try:
                    encoded = encode_result(outcome, args.format)
                except ValueError as e:
                    yield it, e
                    continue
                yield it, encoded


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cli.setup_logging(logging.DEBUG if args.verbose else logging.WARNING if not args.quiet else logging.ERROR,
                      "%(levelname)s %(name)s: %(message)s")
    return cli.run(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
