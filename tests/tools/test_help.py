"""Every Python tool under tools/ has a module docstring and runs `--help` (a smoke test: the tool's imports and
argument parser work from a checkout, without its models, GPUs or the reference's environment)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tools").rglob("*.py"))


def test_the_tools_are_found():
    assert "tools/bench.py" in TOOLS and "tools/reference/run_reference.py" in TOOLS


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_has_a_docstring_and_runs_help(tool):
    doc = ast.get_docstring(ast.parse((REPO / tool).read_text(encoding="utf-8")))
    assert doc and len(doc) > 40, f"{tool}: no module docstring saying what it is for"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, tool, "--help"], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"{tool} --help: exit {r.returncode}\n{r.stderr[-2000:]}"
    first = doc.splitlines()[0]
    assert "usage:" in r.stdout or first in r.stdout, f"{tool} --help printed neither a usage nor its docstring"


DEVICE_SCRIPTS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "tools" / "device").glob("*.sh"))


@pytest.mark.parametrize("script", DEVICE_SCRIPTS)
def test_device_script_parses_and_prints_its_header_on_help(script, tmp_path):
    """bash -n, then --help: the header comment (what it runs, what to carry), and nothing run."""
    assert subprocess.run(["bash", "-n", script], cwd=REPO).returncode == 0, f"{script}: bash -n failed"
    r = subprocess.run(["bash", script, "--help"], cwd=REPO, capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, OUT=str(tmp_path), BENCH_WORK=str(tmp_path)))
    assert r.returncode == 0, f"{script} --help: exit {r.returncode}\n{r.stderr[-2000:]}"
    header = (REPO / script).read_text().splitlines()[1]
    assert header.startswith("# ") and header[2:] in r.stdout and not r.stdout.startswith("#")
    assert not any(tmp_path.iterdir()), f"{script} --help ran something"


def test_h200_checks_refuses_an_unknown_part(tmp_path):
    r = subprocess.run(["bash", "tools/device/h200_checks.sh"], cwd=REPO, capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PARTS="bench,vulkan_f23", OUT=str(tmp_path), BENCH_WORK=str(tmp_path)))
    assert r.returncode == 2 and "unknown part 'vulkan_f23'" in r.stdout + r.stderr
