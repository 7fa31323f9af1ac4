"""SIGTERM ends a CLI as cleanly as SIGINT: exit 143, no partial output, no temporary file left; a second Ctrl-C
while it unwinds prints no traceback. The signals go to real subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_for(proc: subprocess.Popen, words: str, timeout: float = 300) -> list[str]:
    """Read stderr lines until one holds `words`."""
    seen, t0 = [], time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if words in line:
            return seen
    proc.kill()
    pytest.fail(f"never saw {words!r}: {''.join(seen)}")


def test_sigterm_during_conversion_leaves_no_temporary_file(tiny_checkpoint, tmp_path):
    out = tmp_path / "models"
    proc = start("omnivoice.convert", str(tiny_checkpoint), "-o", str(out), "--quant", "f32")
    wait_for(proc, "lm [   3/")  # the LM GGUF is being written to its temporary name
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "terminated" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == []


@pytest.fixture(scope="module")
def model(tiny_gguf):
    return ["--model", str(tiny_gguf["f32"]), "--codec", str(tiny_gguf["codec"]), "--backend", "cpu"]


LONG = ["A long text to keep the model busy for a while. " * 6, "--steps", "2000", "--seed", "0"]


@pytest.mark.parametrize("signals, status, words", [
    ((signal.SIGTERM,), 143, "terminated"),
    ((signal.SIGINT, signal.SIGINT), 130, "interrupted"),
])
def test_signal_during_synthesis(model, tmp_path, signals, status, words):
    out = tmp_path / "out.wav"
    proc = start("omnivoice.tts", *LONG, *model, "-o", str(out))
    wait_for(proc, "loaded in")
    time.sleep(1.0)
    for s in signals:
        proc.send_signal(s)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    assert words in err and "Traceback" not in err
    assert os.listdir(tmp_path) == []  # no output, no temporary file
