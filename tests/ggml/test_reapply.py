"""vendor/ggml/reapply.py: the patch series re-applied to another ggml tree, each hunk reported (ok, moved,
already there, failed), and the pinned source taking every hunk at its place."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import build_ext  # noqa: E402


def _load_reapply():
    spec = importlib.util.spec_from_file_location("reapply", REPO / "vendor" / "ggml" / "reapply.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


reapply = _load_reapply()
ORIGINAL = [f"line {i}\n" for i in range(1, 41)]


def _diff(name: str, old: list[str], new: list[str], first: int, n: int) -> str:
    """A one-hunk unified diff of lines [first, first + n) of a.c (3 lines of context), from `old` to `new`."""
    lo, hi = max(0, first - 3), min(len(old), first + n + 3)
    body = [" " + line for line in old[lo:first]]
    body += ["-" + line for line in old[first:first + n]] + ["+" + line for line in new[first:first + n]]
    body += [" " + line for line in old[first + n:hi]]
    return (f"--- a/a.c\n+++ b/a.c\n@@ -{lo + 1},{hi - lo} +{lo + 1},{hi - lo} @@\n" + "".join(body))


@pytest.fixture
def series(tmp_path, monkeypatch):
    """Three patches of a.c made against ORIGINAL (lines 5, 20 and 33 changed), in a lock of their own."""
    patches = tmp_path / "patches"
    patches.mkdir()
    entries = []
    for k, line in enumerate((5, 20, 33), 1):
        new = list(ORIGINAL)
        new[line - 1] = f"LINE {line} patched\n"
        text = _diff(f"{k}", ORIGINAL, new, line - 1, 1)
        (patches / f"000{k}.patch").write_text(text)
        entries.append({"file": f"000{k}.patch", "sha256": hashlib.sha256(text.encode()).hexdigest()})
    monkeypatch.setattr(build_ext, "PATCHES", patches)
    monkeypatch.setattr(build_ext, "read_lock", lambda: {"patches": entries})
    return patches


def _tree(tmp_path, lines):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.c").write_text("".join(lines))
    return src


def test_the_source_it_was_made_for_takes_every_hunk_in_place(series, tmp_path):
    out = tmp_path / "out"
    assert reapply.main([str(_tree(tmp_path, ORIGINAL)), "--out", str(out), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["status"] for r in report] == ["ok", "ok", "ok"]
    got = (out / "a.c").read_text().splitlines()
    assert got[4] == "LINE 5 patched" and got[19] == "LINE 20 patched" and got[32] == "LINE 33 patched"


def test_a_changed_source_reports_moved_already_and_failed_hunks(series, tmp_path, capsys):
    newer = ["// new upstream line\n"] * 4 + list(ORIGINAL)  # every hunk 4 lines further down
    newer[4 + 20] = "line 21 changed upstream\n"  # a context line of patch 2's hunk
    newer[4 + 32] = "LINE 33 patched\n"  # patch 3's change made upstream
    out = tmp_path / "out"
    assert reapply.main([str(_tree(tmp_path, newer)), "--out", str(out), "--json", str(tmp_path / "r.json")]) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert [r["status"] for r in report] == ["moved +4", "FAILED", "already"]
    assert report[1]["patch"] == "0002.patch" and "6 of 7 lines match" in report[1]["detail"]
    got = (out / "a.c").read_text().splitlines()
    assert got[4 + 4] == "LINE 5 patched"  # the moved hunk applied where its lines are now
    assert got[4 + 19] == "line 20"  # the failed one left the file alone
    assert "1 failed in 0002.patch" in capsys.readouterr().out


def test_a_patched_file_that_is_missing_fails_its_hunks(series, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert reapply.main([str(empty), "--json", str(tmp_path / "r.json")]) == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert {r["status"] for r in report} == {"FAILED"} and report[0]["detail"] == "no such file"


def test_the_pinned_source_takes_the_whole_series_in_place(tmp_path):
    lock = build_ext.read_lock()
    if not (build_ext.CACHE / lock["filename"]).is_file():
        pytest.skip("the pinned archive is not in vendor/ggml/cache (python build_ext.py fetch downloads it)")
    assert reapply.main(["--pinned", "--out", str(tmp_path / "ggml"), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report) > 100 and {r["status"] for r in report} == {"ok"}
