"""What the in-process A/B tools (tools/host_overlap_ab.py, tools/graph_reuse_ab.py) share: the first audio of a
streamed request through the serving engine, and the end of the tool (medians per arm into the report and a
markdown row each, the two arms' tokens compared, the JSON written, a non-zero exit where the tokens differ:
both arms must compute the same)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np


def parser(doc: str) -> argparse.ArgumentParser:
    """The options every A/B tool takes: --model, --backend, --quant, --rounds, --json."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="folder with the LM and codec GGUFs")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--quant", default="auto")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    return ap


def tokens_of(result) -> np.ndarray:
    """A SynthesisResult's tokens, its chunks joined, flat."""
    return np.concatenate([t.reshape(-1) for t in result.tokens])


def first_audio(engine, text: str, seed: int = 7) -> tuple[float, np.ndarray]:
    """Seconds from submitting `text` to the engine, streamed, to its first audio chunk; and its tokens."""
    t0 = time.perf_counter()
    job = engine.submit({"text": text, "seed": seed}, stream=True)
    chunks = job.chunks()
    next(chunks)
    first = time.perf_counter() - t0
    for _ in chunks:
        pass
    return first, tokens_of(job.result())


def finish(report: dict, rows: dict[str, dict[str, list[float]]], tokens: dict[str, dict[str, np.ndarray]],
           row: Callable[[str, dict[str, float]], str], json_path: Path | None) -> None:
    """`rows[arm][case]`: wall seconds of each round; `tokens[arm][case]`: the last round's tokens (two arms);
    `row(arm, medians)`: the markdown row of an arm."""
    report.setdefault("variants", {})
    for arm, r in rows.items():
        med = {k: statistics.median(v) for k, v in r.items()}
        report["variants"][arm] = {"median_s": med, "all_s": r}
        print(row(arm, med))
    a, b = list(tokens)
    equal = {k: bool(np.array_equal(tokens[a][k], tokens[b][k])) for k in tokens[a]}
    report["tokens_equal"] = equal
    print(f"tokens equal between the two: {equal}")
    if json_path:
        json_path.write_text(json.dumps(report, indent=1))
    if not all(equal.values()):
        sys.exit("tokens differ between the variants")
