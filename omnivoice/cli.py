"""What every command line of the package shares: the exit statuses, how an error becomes one, a clean exit on
SIGINT and SIGTERM, and the progress line. It imports nothing of the package; the flags the commands share are
omnivoice.arguments' (model loading) and omnivoice.options' (synthesis).

Exit status, the same in every CLI (tts, codec, convert, cache, ...):

    0    success
    1    a failure that is not the input's fault: an internal error, the network, the disk
    2    bad input: arguments, option values, files (the message names the problem)
    3    out of memory
    130  interrupted (SIGINT, Ctrl-C)
    143  terminated (SIGTERM)

On SIGINT or SIGTERM the running command unwinds as from an exception, so every `finally` runs and every atomic
writer removes its temporary file: no partial output, no `.tmp` left behind. Further signals are ignored while
it unwinds (a second Ctrl-C, or SIGTERM and SIGINT just after it, prints no traceback); the unwinding only closes
files and frees memory. A signal's handler runs only once the main thread is back in Python, and one native
step can take minutes (an LM step over a long chunk is a single ggml call): when the handler has not run
within TERMINATION_GRACE_S, a watchdog thread, which sees the signal at once, removes the outputs under way
(files.remove_partial_outputs) and ends the process with the same status and message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Callable, Iterator, Optional, TextIO

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_OOM, EXIT_SIGINT, EXIT_SIGTERM = 0, 1, 2, 3, 130, 143

EXIT_STATUS_HELP = ("exit status: 0 success, 2 bad input (arguments, option values, files), 1 other failure, "
                    "3 out of memory, 130 interrupted (SIGINT), 143 terminated (SIGTERM)")

# Errors that mean "the input is wrong": each message names the file, field or option.
BAD_INPUT = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError,
             TypeError)

log = logging.getLogger("omnivoice")


class Terminated(BaseException):
    """SIGTERM arrived. A BaseException, as KeyboardInterrupt is, so that no `except Exception` swallows it."""


# How long a signal may wait for the main thread to handle it before the watchdog ends the process.
TERMINATION_GRACE_S = 2.0

_handled = threading.Event()  # the main thread has run _on_signal


# How long a signal that landed in a finalizer waits before it is sent again (see _on_signal).
FINALIZER_RETRY_S = 0.01


def _in_finalizer(frame) -> bool:
    """Whether the handler runs inside a `__del__` (of this frame or one it was called from)."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def _on_signal(signum: int, frame) -> None:
    if _in_finalizer(frame):
        # An exception raised in a finalizer is printed ("Exception ignored in ...") and dropped: the command
        # would go on as if no signal had come (a batch run whose Ctrl-C landed in Graph.__del__ finished all its
        # items and exited 0). The signal is sent again once the finalizer is likely done.
        threading.Timer(FINALIZER_RETRY_S, os.kill, (os.getpid(), signum)).start()
        return
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _ignore)
    _handled.set()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated


def _ignore(signum: int, frame) -> None:
    """A signal after the first, while the command unwinds. A Python handler rather than SIG_IGN: a signal that
    arrived before SIG_IGN was set but is handled after finds no handler, and Python prints "OSError: Signal 15
    ignored due to race condition" (SIGINT, then SIGTERM and SIGINT 50 ms apart, printed it every time)."""


class _Watchdog:
    """Ends the process when SIGINT or SIGTERM is not handled within TERMINATION_GRACE_S: the main thread is
    stuck in a native call. It hears the signal through Python's wakeup fd, which the C-level handler writes at
    once; where something else holds the wakeup fd (an event loop) it does not start."""

    def __init__(self) -> None:
        self.thread: Optional[threading.Thread] = None
        self._heard = False
        _handled.clear()
        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        taken = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        if taken != -1:  # give it back
            signal.set_wakeup_fd(taken)
            os.close(self._read)
            os.close(self._write)
            return
        self.thread = threading.Thread(target=self._watch, name="omnivoice-signal-watchdog", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while True:
            data = os.read(self._read, 1)
            if not data:  # stop(): the command ended
                os.close(self._read)
                return
            # only a signal this module handles: another handler (a server's graceful shutdown) takes its own time
            if data[0] in (signal.SIGINT, signal.SIGTERM) and (
                    _handled.is_set() or signal.getsignal(data[0]) is _on_signal):
                break
        # the read end stays open: later signals are still written to the wakeup fd (a closed pipe would have
        # Python report each write's BrokenPipeError); stop() closes it
        self._heard = True
        if _handled.wait(TERMINATION_GRACE_S) or self.thread is None:
            return
        from .files import remove_partial_outputs

        remove_partial_outputs()
        interrupted = data[0] == signal.SIGINT
        with contextlib.suppress(Exception):
            print("interrupted" if interrupted else "terminated", file=sys.stderr, flush=True)
        os._exit(EXIT_SIGINT if interrupted else EXIT_SIGTERM)

    def stop(self) -> None:
        if self.thread is None:
            return
        self.thread = None
        signal.set_wakeup_fd(-1)
        os.close(self._write)  # a watching thread reads the end of the pipe and closes its end
        if self._heard:
            os.close(self._read)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back while the block runs; one that arrives meanwhile is raised again when it
    ends, through the handler that was set. For a few milliseconds of writing an output whole: unwinding
    from a signal landing between a temporary file's creation and the `try` that removes it would leave the
    file behind (a batch test caught one). Outside the main thread the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if held:
            signal.raise_signal(held[0])


def run(body: Callable[[], int], listing: bool = False) -> int:
    """Run a command's body: signals unwind it cleanly, errors become one `error: ...` line and an exit status.

    The traceback of an internal failure is logged at debug level (shown with --verbose). A `listing` prints on
    stdout for a reader that may want only its start (`| head`): a closed pipe ends it quietly with status 0.
    """
    handlers, watchdog = None, None
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        watchdog = _Watchdog()
    signalled = False
    try:
        status = body()
        if listing:
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
        return status
    except KeyboardInterrupt:
        signalled = True
        print("interrupted", file=sys.stderr)
        return EXIT_SIGINT
    except Terminated:
        signalled = True
        print("terminated", file=sys.stderr)
        return EXIT_SIGTERM
    except MemoryError as e:
        print(f"error: out of memory: {e}", file=sys.stderr)
        return EXIT_OOM
    except BrokenPipeError:
        # the reader of stdout went away (`| head`, a closed player): nothing more can be written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if listing:  # it read what it wanted
            return EXIT_OK
        print("error: the output pipe was closed", file=sys.stderr)
        return EXIT_FAILURE
    except BAD_INPUT as e:
        print(f"error: {message(e)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as e:
        # the network or the disk, not the program: an OSError, or an error that says so (resolve.DownloadError)
        if isinstance(e, OSError) or getattr(e, "exit_status", None) == EXIT_FAILURE:
            print(f"error: {message(e)}", file=sys.stderr)
            return EXIT_FAILURE
        log.debug("internal failure", exc_info=True)
        print(f"error: internal failure: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    finally:
        if watchdog is not None:
            watchdog.stop()
        if handlers:
            for s, h in handlers.items():
                # After a signal the process is exiting. SIG_IGN, not `_ignore`, from here: the interpreter's
                # finalization puts every Python handler back to SIG_DFL, so a second SIGINT 50 ms after the first
                # killed the process (status -2 instead of 130). signal.signal first runs the handlers of signals
                # already pending, so none is left to meet SIG_IGN later (Python's "ignored due to race condition").
                signal.signal(s, signal.SIG_IGN if signalled else h)


def message(e: BaseException) -> str:
    """An error's words for the `error:` line. An OSError as the system raised it ("[Errno 2] No such file or
    directory: 'x.jsonl'") is worded as the package words its own: "x.jsonl: no such file or directory"."""
    text = str(e)
    if isinstance(e, OSError) and e.strerror and e.filename is not None and text.startswith("[Errno"):
        names = f"{e.filename} -> {e.filename2}" if e.filename2 is not None else f"{e.filename}"
        return f"{names}: {e.strerror[:1].lower()}{e.strerror[1:]}"
    return text


def setup_logging(level: int, fmt: str) -> None:
    """The root logger of a command line: its level and format. huggingface_hub prints its warnings through a
    handler of its own, so its records do not also go to ours (each hub warning was printed twice)."""
    logging.basicConfig(level=level, format=fmt)
    logging.getLogger("huggingface_hub").propagate = False


class Progress:
    """A `progress(done, total)` callback that reports on stderr.

    On a terminal: one bar redrawn in place, ended by a newline once. Elsewhere (a log file, a pipe): a plain
    line every `interval` seconds and a last one when done, so a long run redirected to a file shows it is
    alive. Repeated calls with the same numbers print nothing.
    """

    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None, interval: float = 5.0,
                 unit: str = "steps", clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval, self.unit, self.clock = interval, unit, clock
        self.t0 = self.last_line = clock()
        self.last: Optional[tuple[int, int]] = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or (done, total) == self.last:
            return
        self.last = (done, total)
        now = self.clock()
        finished = done >= total
        if self.tty:
            width = 30
            fill = int(width * done / max(total, 1))
            self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {self.unit} "
                              f"{now - self.t0:5.1f}s" + ("\n" if finished else ""))
        elif finished or now - self.last_line >= self.interval:
            self.stream.write(f"{done}/{total} {self.unit}, {now - self.t0:.1f}s\n")
            self.last_line = now
        else:
            return
        self.stream.flush()
