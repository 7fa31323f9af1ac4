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
                        "--num-step", "1", "--ws-repeats", "1", "--tokens-per-s", "100", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    (ws,) = result["ws_first_audio"]["runs"]
    assert ws["segments"] == 3 and ws["tokens"] == 30 and ws["audio_s"] > 0
    # the first audio comes after the first sentence's end (a sentence is spoken once complete), before done
    assert 0 < ws["first_audio_after_sentence_end_s"] < ws["first_audio_after_first_token_s"] <= ws["total_s"]
    assert "WebSocket, text at 100 tokens/s" in r.stdout
    runs = result["first_audio"]["runs"]
    assert 0 < runs[0]["first_audio_s"] <= runs[0]["total_s"] and runs[0]["audio_s"] > 0
    assert [row["clients"] for row in result["concurrency"]] == [1, 2]
    assert [row["requests"] for row in result["concurrency"]] == [1, 2]
    assert all(row["audio_s_per_s"] > 0 and row["p50_s"] <= row["p95_s"] for row in result["concurrency"])
    assert "| 2 | 2 |" in r.stdout and "Time to first audio byte" in r.stdout
    # the engine's share from /metrics: one step a request (num_step 1), however they were batched
    engines = [row["engine"] for row in result["concurrency"]]
    assert [round(e["steps"] * e["mean_batch"]) for e in engines] == [1, 2]
    assert engines[0]["steps"] == 1 and engines[0]["graphs"] == 1
    assert all(0 < e["busy_share"] <= 1.05 and e["seconds"]["lm_run"] > 0 for e in engines)


def test_load_tool_in_process_drives_the_servers_engine_without_http(tiny_gguf, tmp_path):
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "server_load.py"), "--in-process", "--model",
                        str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--backend", "cpu",
                        "--threads", "1", "--voices", str(tmp_path / "voices"), "--clients", "1,2", "--requests",
                        "1", "--ttfb-repeats", "1", "--num-step", "1", "--vary", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["server"]["device"].endswith("in process") and result["vary"]
    runs = result["first_audio"]["runs"]
    assert 0 < runs[0]["first_audio_s"] <= runs[0]["total_s"] and runs[0]["audio_s"] > 0
    engines = [row["engine"] for row in result["concurrency"]]
    assert [round(e["steps"] * e["mean_batch"]) for e in engines] == [1, 2]
    assert all(row["audio_s"] > 0 for row in result["concurrency"])


def test_sentence_texts_are_varied_one_sentence_texts_of_1_to_25_words():
    sys.path.insert(0, str(ROOT / "tools"))
    import server_load

    texts = server_load.sentence_texts(7, 400)
    assert texts == server_load.sentence_texts(7, 400)  # the same on every run
    assert texts != server_load.sentence_texts(8, 400)
    counts = [len(t.split()) for t in texts]
    assert min(counts) == 1 and max(counts) == 25 and len(set(texts)) == 400
    assert all(t[-1] in ".?!" and t.count(".") + t.count("?") + t.count("!") == 1 for t in texts)


def test_load_tool_refuses_a_bad_word_range():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "server_load.py"), "--url", "http://127.0.0.1:9",
                        "--words", "15:12"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--words: expected 1 <= LO <= HI, got '15:12'" in r.stderr


def test_load_tool_streaming_loads_over_http(server, tmp_path):
    out = tmp_path / "load.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "server_load.py"), "--url", server.url,
                        "--api-key", API_KEY, "--clients", "1,2", "--requests", "2", "--ttfb-repeats", "0",
                        "--ws-repeats", "0", "--num-step", "1", "--loads", "closed,conversational",
                        "--ramp-s", "0.5", "--words", "3:5", "--label", "tree", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["concurrency"] == [] and result["label"] == "tree"
    rows = result["streaming_loads"]
    assert [(x["load"], x["clients"], x["requests"]) for x in rows] == [
        ("closed", 1, 2), ("closed", 2, 4), ("conversational", 1, 2), ("conversational", 2, 4)]
    for x in rows:
        assert x["answered"] == x["requests"] and x["errors"] == 0 and x["rejected_503"] == 0
        assert 0 < x["first_audio_p50_s"] <= x["first_audio_p90_s"] <= x["first_audio_p99_s"] <= x["latency_p50_s"] * 10
        assert x["audio_s"] > 0 and x["audio_s_per_s"] > 0
        assert {row[2] for row in x["samples"]["rows"]} <= {3, 4, 5}  # --words: each text's word count
    # a conversational client lets its audio play before its next request (not after its last): one pause a
    # client here; closed-loop clients never pause
    assert rows[0]["paused_s"] == rows[1]["paused_s"] == 0 and rows[2]["paused_s"] > 0 and rows[3]["paused_s"] > 0
    assert [x["ramp_s"] for x in rows] == [0, 0, 0.5, 0.5]  # conversational clients join over the ramp
    assert "| tree | conversational | 2 | 4 |" in r.stdout
