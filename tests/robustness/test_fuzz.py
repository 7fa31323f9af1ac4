"""The mutation fuzzer's short run (tools/fuzz.py --ci, 236 mutants, a forked child each), one test per target
(the costliest two in two parts each, the same cases as one run): no mutant of a reader's input may crash the
process natively, hang it, end in an internal failure or leave a file behind. The long run and its table are in
docs/ROBUSTNESS.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT

TARGETS = ["lm-gguf", "codec-gguf", "wav", "srt", "rvq", "safetensors"]
# The costliest targets in two parts (a wav case synthesizes with the mutant as its voice reference, two of them a
# minute long; a safetensors case converts a whole checkpoint): each test then takes 7-16 s beside two CPU hogs on
# a 2-core host, where the wav and safetensors targets alone took 25-30 s.
PARTS = {"wav": 2, "safetensors": 2}
RUNS = [(t, k, PARTS.get(t, 1)) for t in TARGETS for k in range(PARTS.get(t, 1))]


@pytest.mark.parametrize("target, part, parts", RUNS, ids=[f"{t}-{k + 1}of{n}" for t, k, n in RUNS])
def test_no_mutant_crashes_hangs_or_fails_internally(target, part, parts, tiny_checkpoint, tiny_gguf, tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from fuzz import CI
    finally:
        sys.path.pop(0)
    first, end = part * CI[target] // parts, (part + 1) * CI[target] // parts
    report = tmp_path / "fuzz.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz.py"), "--work", str(tmp_path / "work"),
                        "--checkpoint", str(tiny_checkpoint), "--gguf", str(tiny_gguf["f32"].parent), "--ci",
                        "--targets", target, "--first", str(first), "--cases", str(end - first),
                        "--json", str(report)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(report.read_text())
    bad = [c for c in result["cases"] if c["outcome"] in ("native crash", "hang", "exit 1") or c["left"]]
    assert not bad, json.dumps(bad, indent=1)
    # every case ran, and the mutants both passed and failed the readers' checks
    counts = result["counts"][target]
    assert sum(counts.values()) == end - first, counts
    assert counts.get("clean error", 0) > 0 and counts.get("accepted", 0) > 0, counts


def test_the_hostile_http_mode_finds_the_server_clean(tiny_checkpoint, tiny_gguf, tmp_path):
    """tools/fuzz.py --http, 40 cases against a real server under ulimit -n 256: every answer a 4xx or the
    connection closed, the key's requests served through an idle-socket flood, no traceback in its log. (Its
    first run found a stalled body logged as a 500 with a traceback.)"""
    report = tmp_path / "http.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz.py"), "--work", str(tmp_path / "work"),
                        "--checkpoint", str(tiny_checkpoint), "--gguf", str(tiny_gguf["f32"].parent), "--http",
                        "--http-cases", "40", "--seed", "3", "--json", str(report)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(report.read_text())
    assert result["cases"] == 40 and result["server_alive"] and result["exit_status"] == 143, result
    assert result["tracebacks"] == 0 and result["too_many_open_files"] == 0, result
    kinds = result["counts"]
    assert all(set(c) <= {"clean"} for c in kinds.values()), kinds
    assert sum(1 for c in kinds.values() if c) >= 4, kinds  # the seed reaches most kinds
