"""tools/bench.py and tools/bench_worker.py: the bookkeeping and the worker protocol (no models loaded)."""

from __future__ import annotations

import base64
import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", TOOLS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = _load("bench")
worker = _load("bench_worker")


def _payload(tokens: np.ndarray) -> dict:
    t = np.ascontiguousarray(tokens, dtype=np.int32)
    return {"shape": list(t.shape), "sha256": "x", "b64": base64.b64encode(t.tobytes()).decode()}


def test_gpu_memory_counts_only_own_allocations():
    """Other processes allocate and free between this worker's activities; the peak is ours alone."""
    rng = np.random.default_rng()
    total = 10**12
    state = {"ours": 0, "foreign": 0}
    mem = worker.GpuMemory(lambda: total - state["ours"] - state["foreign"])
    true_peak = 0
    for _ in range(20):
        state["foreign"] = max(0, state["foreign"] + int(rng.integers(-5, 6)) * 10**9)  # between activities
        mem.begin()
        for _ in range(int(rng.integers(1, 6))):
            state["ours"] = max(0, state["ours"] + int(rng.integers(-3, 8)) * 10**8)
            true_peak = max(true_peak, state["ours"])
            mem.sample()
        mem.end()
    assert mem.peak == true_peak
    assert mem.used == state["ours"]


def test_compare_tokens_counts_equal_entries():
    rng = np.random.default_rng()
    a = rng.integers(0, 1024, size=(8, int(rng.integers(20, 200))))
    b = a.copy()
    k = int(rng.integers(1, a.size))
    idx = rng.choice(a.size, size=k, replace=False)
    b.flat[idx] = (b.flat[idx] + 1) % 1024
    same = bench.compare_tokens(_payload(a), _payload(a))
    diff = bench.compare_tokens(_payload(a), _payload(b))
    assert same == {"identical": True, "equal_fraction": 1.0}
    assert not diff["identical"] and diff["equal_fraction"] == pytest.approx(1 - k / a.size)
    assert not bench.compare_tokens(_payload(a), _payload(a[:, 1:]))["identical"]


def test_summarize_medians_rtf_and_determinism():
    rng = np.random.default_rng()
    frames, calls = int(rng.integers(50, 500)), 32
    walls = rng.uniform(0.5, 5.0, size=5)
    lm = rng.uniform(0.1, 2.0, size=5)
    runs = [{"wall_s": w, "gen_s": w / 2, "encode_s": None, "decode_s": 0.1, "lm_s": l, "graph_build_s": 0.0,
             "audio_s": 5.0, "lm_ms_median": 1.0, "lm_calls": calls, "frames": frames, "chunks": 1,
             "tokens": {"sha256": "same"}} for w, l in zip(walls, lm)]
    s = bench.summarize(runs)
    assert s["wall_s"] == pytest.approx(np.median(walls))
    assert s["rtf"] == pytest.approx(np.median(walls) / (frames / 25.0))
    assert s["lm_ms_per_step"] == pytest.approx(1000 * np.median(lm) / calls)
    assert s["encode_s"] is None and s["deterministic"]
    runs[3]["tokens"] = {"sha256": "other"}
    assert not bench.summarize(runs)["deterministic"]


def test_worker_protocol_survives_stray_output_and_reports_errors(tmp_path):
    """Library prints (Python and C level) must not reach the reply stream; errors come back as replies."""
    script = tmp_path / "fake_worker.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(TOOLS)!r})
        import bench_worker

        class Side:
            def load(self, req):
                print("python noise on stdout")
                os.write(1, b"C-level noise on fd 1\\n")
                return {{"load_s": 0.5, "info": {{"device": "fake"}}}}
            def run(self, case):
                if case.get("fail"):
                    raise ValueError("bad case " + case["name"])
                return {{"echo": case["name"]}}
            def stats(self):
                return {{"peak_rss_bytes": 1}}

        sys.exit(bench_worker.serve(Side()))
    """))
    # the fake worker goes through the same machinery (Popen, reader threads, JSON lines)
    orig = bench.WORKER
    bench.WORKER = script
    try:
        w = bench.Worker("fake", "ours", sys.executable, bench._env_for("ours", []), {}, timeout=60)
        w.load()
        assert w.info == {"device": "fake"} and w.load_s == 0.5
        name = f"case{np.random.default_rng().integers(1000)}"
        assert w.run({"name": name}, "run") == {"echo": name}
        with pytest.raises(bench.BenchError, match=f"ValueError: bad case {name}"):
            w.run({"name": name, "fail": True}, "run")
        assert w.call({"cmd": "stats"}, "stats")["stats"] == {"peak_rss_bytes": 1}
        w.close()
        assert w.proc.returncode == 0
    finally:
        bench.WORKER = orig


def test_worker_crash_is_a_clear_error(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import sys\nsys.stdin.readline()\nprint('dying now', file=sys.stderr)\nsys.exit(3)\n")
    orig = bench.WORKER
    bench.WORKER = script
    try:
        w = bench.Worker("crashy", "ours", sys.executable, bench._env_for("ours", []), {}, timeout=60)
        with pytest.raises(bench.BenchError, match=r"crashy .* exited with status 3 during load(.|\n)*dying now"):
            w.load()
    finally:
        bench.WORKER = orig


def test_an_installed_copy_runs_without_the_repository(monkeypatch):
    """--installed LABEL=PYTHON: its workers see neither the repository on PYTHONPATH nor the reference's
    folders, nor a source build's OMNIVOICE_GGML_LIB_DIR; the repository's own workers get the repository first."""
    args = bench.parse_args(["--checkpoint", "x", "--installed", "wheel=/venv/bin/python", "--no-reference"])
    assert args.installed_pythons == [("wheel", "/venv/bin/python")]
    with pytest.raises(SystemExit, match="LABEL=PYTHON"):
        bench.parse_args(["--checkpoint", "x", "--installed", "/venv/bin/python"])
    monkeypatch.setenv("PYTHONPATH", f"{bench.REPO}:/elsewhere")
    assert bench._env_for("installed", ["/ref"])["PYTHONPATH"] == "/elsewhere"
    assert bench._env_for("ours", ["/ref"])["PYTHONPATH"] == f"{bench.REPO}:{bench.REPO}:/elsewhere"
    assert bench._env_for("ref", ["/ref"])["PYTHONPATH"] == "/ref:/elsewhere"
    monkeypatch.setenv("OMNIVOICE_GGML_LIB_DIR", "/src/build/lib")
    assert "OMNIVOICE_GGML_LIB_DIR" not in bench._env_for("installed", [])
    assert bench._env_for("ours", [])["OMNIVOICE_GGML_LIB_DIR"] == "/src/build/lib"
