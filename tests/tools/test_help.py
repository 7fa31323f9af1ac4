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
