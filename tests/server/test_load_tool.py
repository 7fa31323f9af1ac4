"""tools/server_load.py against the session's server, at the smallest scale: it measures what it says."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import API_KEY, ROOT


def test_load_tool_reports_first_audio_and_concurrency(server, tmp_path):
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "server_load.py"), "--url", server.url,
                        "--api-key", API_KEY, "--clients", "1,2", "--requests", "1", "--ttfb-repeats", "1",
                        "--num-step", "1", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    runs = result["first_audio"]["runs"]
    assert 0 < runs[0]["first_audio_s"] <= runs[0]["total_s"] and runs[0]["audio_s"] > 0
    assert [row["clients"] for row in result["concurrency"]] == [1, 2]
    assert [row["requests"] for row in result["concurrency"]] == [1, 2]
    assert all(row["audio_s_per_s"] > 0 and row["p50_s"] <= row["p95_s"] for row in result["concurrency"])
    assert "| 2 | 2 |" in r.stdout and "Time to first audio byte" in r.stdout
