"""Fixtures of the robustness tests: the tiny model loaded once, and a runner for the CLIs as real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--steps", "2", "--seed", "0", "--quiet", "--backend", "cpu"]


@pytest.fixture(scope="module")
def ov(tiny_gguf, backend_spec):
    import omnivoice

    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend=backend_spec) as ov:
        yield ov


@pytest.fixture(scope="module")
def model(tiny_gguf):
    return ["--model", str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"])]


def cli(module: str, *args, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m omnivoice.<module> ARGS` from the repository root; stdout and stderr as text."""
    return subprocess.run([sys.executable, "-m", f"omnivoice.{module}", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def refused(r: subprocess.CompletedProcess, *words: str) -> str:
    """Assert a clean bad-input exit: status 2, one error naming `words`, no traceback."""
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "error:" in r.stderr, r.stderr
    for w in words:
        assert w.lower() in r.stderr.lower(), r.stderr
    return r.stderr
