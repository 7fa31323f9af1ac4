#!/usr/bin/env python3
"""Re-apply the patch series of vendor/ggml/ggml.lock to another ggml source tree and report, hunk by hunk, what
still applies: the first step of moving the pin to a newer ggml.

    python3 vendor/ggml/reapply.py SOURCE [--out DIR] [--json REPORT] [--search LINES]
    python3 vendor/ggml/reapply.py --pinned [--out DIR]      # the pinned source (vendor/ggml/cache's archive)

SOURCE is a ggml folder (the one holding ggml's CMakeLists.txt, include/ and src/: a clone of ggml-org/ggml, or
the `ggml_subdir` of a newer sdist), or a .tar.gz holding one (give its folder inside with --subdir). The tree is
copied (to --out, else a temporary folder); each patch is applied in the lock's order, each hunk where it
applies:

    ok        the hunk's context and removed lines are at the line its header names
    moved N   they are, exactly, N lines from there (the nearest such place after the file's previous hunk)
    already   the hunk's result is there and its old lines are not (the new source has the change)
    FAILED    neither: the hunk is skipped, with the closest place (how many of its lines match there)

A failed hunk leaves the rest of its file's hunks and the later patches to run, so one report lists everything
an upgrade has to redo; hunks of later patches that build on a failed one fail too. Exit status 0 when every hunk
applied (ok, moved or already), 1 otherwise; with --out the patched tree stays there to build and test, and a
patch whose hunks all apply can be regenerated from it with `diff -u`. vendor/ggml/README.md, "Moving the pin",
has the whole procedure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import build_ext  # noqa: E402  (the diff parser, the lock and the patches' home)


def _find(lines: list[str], block: list[str], near: int, lo: int, limit: int) -> int | None:
    """The start of `block` in `lines` at or after `lo` nearest to `near` within `limit` lines, or None."""
    if not block:
        return max(near, lo) if max(near, lo) <= len(lines) else None
    for d in range(limit + 1):
        for at in ((near + d, near - d) if d else (near,)):
            if lo <= at <= len(lines) - len(block) and lines[at:at + len(block)] == block:
                return at
    return None


def _closest(lines: list[str], block: list[str], lo: int) -> tuple[int, int]:
    """The place at or after `lo` where most of `block`'s lines match, and how many do."""
    best, best_n = lo, -1
    for at in range(lo, max(lo + 1, len(lines) - len(block) + 1)):
        n = sum(a == b for a, b in zip(lines[at:at + len(block)], block))
        if n > best_n:
            best, best_n = at, n
    return best, max(best_n, 0)


def reapply(tree: Path, search: int = 2000) -> list[dict]:
    """Apply every patch of the lock to `tree` (in place), hunk by hunk; one report entry per hunk."""
    lock = build_ext.read_lock()
    report = []
    for entry in lock.get("patches", []):
        path = build_ext.PATCHES / entry["file"]
        digest = build_ext.sha256_of(path)
        if digest != entry["sha256"]:
            print(f"warning: {entry['file']}: sha256 {digest} is not the lock's {entry['sha256']}", file=sys.stderr)
        for rel, hunks in build_ext.parse_unified_diff(path.read_text(), entry["file"]):
            try:
                target = build_ext.patch_target(tree, rel, entry["file"])
            except RuntimeError:
                report += [{"patch": entry["file"], "file": rel, "hunk": h.header, "status": "FAILED",
                            "detail": "no such file"} for h in hunks]
                continue
            lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
            out: list[str] = []
            at, shift = 0, 0  # lines consumed; how far the file has moved against the headers so far
            for h in hunks:
                row = {"patch": entry["file"], "file": rel, "hunk": h.header}
                where = _find(lines, h.old, h.first + shift, at, search)
                if where is not None:
                    row["status"] = "ok" if where == h.first else f"moved {where - h.first:+d}"
                    out += lines[at:where] + h.new
                    at, shift = where + len(h.old), where - h.first
                elif h.new != h.old and _find(lines, h.new, h.first + shift, at, search) is not None:
                    row["status"] = "already"
                else:
                    near, n = _closest(lines, h.old, at)
                    row["status"] = "FAILED"
                    row["detail"] = f"closest: line {near + 1}, {n} of {len(h.old)} lines match"
                report.append(row)
            out += lines[at:]
            target.write_text("".join(out), encoding="utf-8")
    return report


def _source(arg: str, subdir: str | None, into: Path) -> Path:
    """Copy the ggml tree named by `arg` (a folder, or a .tar.gz with `subdir` inside) into `into`."""
    src = Path(arg)
    if src.is_dir():
        shutil.copytree(src, into, symlinks=True)
        return into
    if not subdir:
        raise SystemExit(f"{src}: an archive needs --subdir, the ggml folder inside it")
    prefix = subdir.rstrip("/") + "/"
    into.mkdir(parents=True)
    with tarfile.open(src) as tar:
        members = []
        for m in tar.getmembers():
            rel = m.name[len(prefix):] if m.name.startswith(prefix) else ""
            if rel and not rel.startswith("/") and ".." not in Path(rel).parts and (m.isfile() or m.isdir()):
                m.name = rel
                members.append(m)
        if not members:
            raise SystemExit(f"{src}: no {prefix} inside")
        tar.extractall(into, members=members)
    return into


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", nargs="?", help="a ggml folder, or a .tar.gz with --subdir")
    ap.add_argument("--pinned", action="store_true", help="the pinned archive (vendor/ggml/cache) as the source")
    ap.add_argument("--subdir", help="the ggml folder inside an archive (the lock's ggml_subdir for --pinned)")
    ap.add_argument("--out", type=Path, help="leave the patched tree here (a new folder); default: a temporary one")
    ap.add_argument("--json", type=Path, help="write the report here")
    ap.add_argument("--search", type=int, default=2000, help="how far (lines) a moved hunk is looked for")
    args = ap.parse_args(argv)
    if args.pinned == bool(args.source):
        ap.error("give a SOURCE or --pinned")
    source, subdir = args.source, args.subdir
    if args.pinned:
        lock = build_ext.read_lock()
        source, subdir = str(build_ext.CACHE / lock["filename"]), lock["ggml_subdir"]
        if not Path(source).is_file():
            ap.error(f"{source} is missing: `python build_ext.py fetch` downloads it")
    if args.out and args.out.exists():
        ap.error(f"{args.out} exists: --out makes a new folder")
    with tempfile.TemporaryDirectory() as tmp:
        tree = _source(source, subdir, args.out or Path(tmp) / "ggml")
        report = reapply(tree, args.search)
    width = max((len(r["patch"]) for r in report), default=10)
    failed = [r for r in report if r["status"] == "FAILED"]
    for r in report:
        if r["status"] != "ok":
            print(f"{r['patch']:<{width}}  {r['file']}  {r['hunk']}  {r['status']}  {r.get('detail', '')}".rstrip())
    patches = sorted({r["patch"] for r in report})
    bad = sorted({r["patch"] for r in failed})
    print(f"{len(report)} hunks in {len(patches)} patches: {len(report) - len(failed)} applied "
          f"({sum(r['status'].startswith('moved') for r in report)} moved, "
          f"{sum(r['status'] == 'already' for r in report)} already there), {len(failed)} failed"
          + (f" in {', '.join(bad)}" if bad else ""))
    if args.out:
        print(f"patched tree: {args.out}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
