"""Fixtures of tests/loaders: damaged copies of the tiny converted model and a subprocess that loads them."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def load_in_subprocess(kind: str, paths: list[Path], timeout: int = 600,
                       max_gib: int | None = None) -> dict[str, dict]:
    """Load (and run) each file in one fresh process (load_each.py); {file name: its JSON result}.

    A native crash ends the process: the test then fails naming the file being loaded at that moment.
    `max_gib` caps the process's address space (a file that makes the loader allocate without bound then
    fails fast with MemoryError instead of filling the machine).
    """
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (max_gib << 30, max_gib << 30))

    r = subprocess.run([sys.executable, str(HERE / "load_each.py"), kind, *map(str, paths)], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout, preexec_fn=cap if max_gib else None)
    results: dict[str, dict] = {}
    for line in r.stdout.splitlines():
        if not line.startswith('{"file"'):
            continue  # what an abort inside ggml printed (its backtrace)
        entry = json.loads(line)
        results[Path(entry["file"]).name] = entry
    crashed = [name for name, e in results.items() if e["error"] == "started"]
    assert r.returncode == 0 and not crashed, (
        f"loading {crashed} ended the process with status {r.returncode}:\n{r.stderr[-3000:]}")
    return results
