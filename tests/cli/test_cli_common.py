"""What all CLIs share (omnivoice.cli): one exit-status table, and the progress line on and off a terminal."""

from __future__ import annotations

import io

import pytest

from omnivoice import cli
from omnivoice.api import OptionError
from omnivoice.resolve import DownloadError, ModelNotAvailable


@pytest.mark.parametrize("exc, status, words", [
    (ValueError("bad value"), 2, "error: bad value"),
    (OptionError("num_step", "must be an integer >= 1", 0), 2, "num_step must be"),
    (FileNotFoundError("x.wav: no such file"), 2, "x.wav"),
    (FileNotFoundError(2, "No such file or directory", "m.jsonl"), 2, "error: m.jsonl: no such file or directory\n"),
    (PermissionError(13, "Permission denied", "a", None, "b"), 2, "error: a -> b: permission denied\n"),
    (ModelNotAvailable("model not found: m"), 2, "model not found"),
    (DownloadError("could not download r"), 1, "error: could not download"),
    (OSError(28, "No space left on device"), 1, "No space left"),
    (MemoryError("graph needs 40 GiB"), 3, "out of memory"),
    (RuntimeError("boom"), 1, "internal failure: RuntimeError: boom"),
    (KeyboardInterrupt(), 130, "interrupted"),
    (cli.Terminated(), 143, "terminated"),
])
def test_one_exit_status_table(capsys, exc, status, words):
    def body():
        raise exc

    assert cli.run(body) == status
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_off_a_terminal_a_line_every_few_seconds():
    out, clock = io.StringIO(), Clock()
    p = cli.Progress(stream=out, interval=5.0, clock=clock)
    for step in range(1, 33):
        clock.t = step * 1.0  # one step a second
        p(step, 32)
    lines = out.getvalue().splitlines()
    assert lines == ["5/32 steps, 5.0s", "10/32 steps, 10.0s", "15/32 steps, 15.0s", "20/32 steps, 20.0s",
                     "25/32 steps, 25.0s", "30/32 steps, 30.0s", "32/32 steps, 32.0s"]


def test_on_a_terminal_one_bar_and_one_final_line():
    out, clock = Terminal(), Clock()
    p = cli.Progress(stream=out, clock=clock)
    for step in (1, 2, 3, 4, 4):  # the pipeline may report the last step twice
        p(step, 4)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("4/4 steps   0.0s\n") and text.count("\r") == 4


def test_quiet_prints_nothing():
    out = Terminal()
    p = cli.Progress(enabled=False, stream=out)
    p(1, 1)
    assert out.getvalue() == ""


def test_a_signal_during_a_deferred_block_is_raised_when_it_ends():
    import os
    import signal

    steps = []

    def body():
        with cli.signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("written whole")  # the signal did not cut the block short
        steps.append("after")  # never reached: the held signal unwinds here
        return 0

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert cli.run(body) == 143
    finally:  # cli.run leaves both ignored after a signal (the process is exiting); pytest is not
        for s, h in saved.items():
            signal.signal(s, h)
    assert steps == ["written whole"]


def test_a_signal_that_lands_in_a_finalizer_still_stops_the_command():
    """Python drops an exception raised in a __del__ (it prints "Exception ignored in"): a Ctrl-C landing there
    once let a batch run finish every item and exit 0. The signal is sent again and the command stops with 130."""
    import os
    import signal
    import time

    steps = []

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, inside the finalizer
            steps.append("finalized")

    def body():
        Finalized()  # dropped at once: its __del__ runs
        for _ in range(200):  # the command goes on; the signal sent again stops it
            time.sleep(0.01)
        steps.append("ran to its end")
        return 0

    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert cli.run(body) == 130
    finally:
        for s, h in saved.items():
            signal.signal(s, h)
    assert steps == ["finalized"]


def test_a_malformed_variable_is_bad_input_not_a_traceback(tiny_gguf, tmp_path):
    """A malformed OMNIVOICE_* variable stops no command's import (--help answers) and is a worded error, exit
    status 2, when the command runs: the server's before it takes its port. A fresh process each: the variable
    that ggml's binding reads is read when it is first imported."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "OMNIVOICE_THREADS": "two"}
    root = Path(__file__).resolve().parents[2]

    def command(*args):
        return subprocess.run([sys.executable, "-m", *map(str, args)], env=env, cwd=root, capture_output=True,
                              text=True, timeout=120)

    for name in ("omnivoice.tts", "omnivoice.server", "omnivoice.batch"):
        r = command(name, "--help")
        assert r.returncode == 0 and "Traceback" not in r.stderr, (name, r.stderr)
    model = ["--model", tiny_gguf["f32"], "--codec", tiny_gguf["codec"]]
    for r in (command("omnivoice.tts", "Hi.", *model, "--backend", "cpu", "-o", tmp_path / "x.wav"),
              command("omnivoice.server", *model, "--backend", "cpu", "--port", "1")):
        assert r.returncode == 2, r.stderr
        assert "error: OMNIVOICE_THREADS must be a whole number >= 1, got 'two'" in r.stderr
        assert "Traceback" not in r.stderr and "listening" not in r.stderr
    assert not (tmp_path / "x.wav").exists()
