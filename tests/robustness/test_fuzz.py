"""The mutation fuzzer's short run (tools/fuzz.py --ci, about 200 mutants, a forked child each): no mutant of a
reader's input may crash the process natively, hang it, end in an internal failure or leave a file behind.
The long run and its table are in docs/ROBUSTNESS.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT

TARGETS = ["lm-gguf", "codec-gguf", "wav", "srt", "rvq", "safetensors"]


@pytest.mark.slow  # about 200 mutants, each in a forked child
def test_no_mutant_crashes_hangs_or_fails_internally(tiny_checkpoint, tiny_gguf, tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from fuzz import CI
    finally:
        sys.path.pop(0)
    report = tmp_path / "fuzz.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz.py"), "--work", str(tmp_path / "work"),
                        "--checkpoint", str(tiny_checkpoint), "--gguf", str(tiny_gguf["f32"].parent), "--ci",
                        "--targets", ",".join(TARGETS), "--json", str(report)],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(report.read_text())
    bad = [c for c in result["cases"] if c["outcome"] in ("native crash", "hang", "exit 1") or c["left"]]
    assert not bad, json.dumps(bad, indent=1)
    for t in TARGETS:  # every case ran, and the mutants both passed and failed the readers' checks
        counts = result["counts"][t]
        assert sum(counts.values()) == CI[t], (t, counts)
        assert counts.get("clean error", 0) > 0 and counts.get("accepted", 0) > 0, (t, counts)


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
