"""How many CPU threads a model runs on when none is named.

ggml's CPU backend splits every operation over its threads and joins them at a barrier after it, so a thread
that shares its core with another busy process holds all the others back: on a 2-core host with one core busy,
the old default of one thread per core ran 2.5x slower than one thread (issue 13). The default is therefore
the cores this process may use (its CPU affinity, and a cgroup CPU quota where one is set) less the ones other
work keeps busy now (a short sample of the host's CPU time, less this process's own, scaled to those cores),
and at least one. The sample is the median of a few short windows, so that only work which keeps a core busy
counts: a burst of another process in one window (a readiness probe polling a starting server, a shell command)
would otherwise count as a busy core for the whole life of a long-running process. OMNIVOICE_THREADS or an
explicit thread count overrides it, up to MAX_THREADS_PER_CORE threads for each usable core (max_threads):
100 000 threads crashed ggml's thread launch with SIGSEGV, and a few thousand under a memory limit ended in
libgomp's "Thread creation failed" with no error line.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path
from typing import Optional

from ..config import current


def usable_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup v2 or v1 CPU quota."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    return max(1, min(cores, math.ceil(quota)) if quota else cores)


def _cgroup_quota() -> Optional[float]:
    """The CPU quota in cores, or None when there is none."""
    try:
        text = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if text and text[0] != "max":
            return int(text[0]) / int(text[1])
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


SAMPLE_S = 0.15  # how long busy_cores watches the host's CPU time ...
SAMPLE_WINDOWS = 5  # ... in this many windows, of which the median counts


def busy_cores(cores: int) -> int:
    """How many of `cores` other work keeps busy: the CPUs busy with other processes over a sample of SAMPLE_S
    seconds (/proc/stat, less this process's own time; the median of SAMPLE_WINDOWS windows), else the 1-minute
    load average, scaled from all the host's CPUs to these `cores` and rounded to the nearest whole core.

    The load average lags by a minute: right after one run ended it still counted that run's cores busy, so on
    a 2-core host a run started then took one thread, at half the speed (a shell loop of `python -m omnivoice.tts`
    calls would have run each at one thread)."""
    busy = busy_cpus_now()
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average on this system
            return 0
    host = os.cpu_count() or cores
    return int(busy * cores / max(host, cores) + 0.5)


def busy_cpus_now(seconds: float = SAMPLE_S, windows: int = SAMPLE_WINDOWS) -> Optional[float]:
    """CPUs kept busy by other processes over the next `seconds`, from the kernel's CPU time counters
    (/proc/stat's busy time less this process's, /proc/self/stat), or None where they cannot be read.

    The median over `windows` equal windows: work that keeps a CPU busy shows in every window, a burst shorter
    than a window in one or two. A mean over the whole sample counted a load tester's /health polls towards a
    busy CPU, and with a light job beside them a server started on a 2-core host took one thread for its whole
    life (BENCHMARKS.md, the CPU server's figures)."""
    try:
        hz = os.sysconf("SC_CLK_TCK")
        marks = [(_host_busy_ticks(), _own_ticks())]
        for _ in range(windows):
            time.sleep(seconds / windows)
            marks.append((_host_busy_ticks(), _own_ticks()))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return statistics.median(max(0.0, ((h1 - h0) - (o1 - o0)) / hz / (seconds / windows))
                             for (h0, o0), (h1, o1) in zip(marks, marks[1:]))


def _host_busy_ticks() -> int:
    """All CPUs' time in user, nice, system, irq and softirq (not idle, iowait or steal), in clock ticks."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    if fields[0] != "cpu":
        raise ValueError("/proc/stat does not start with the cpu line")
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[1:8])
    return user + nice + system + irq + softirq


def _own_ticks() -> int:
    """This process's user and system time (all its threads), in clock ticks."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime: the stat fields 14 and 15


# More threads than cores only add barrier waits (see above); a few per core still leaves room to oversubscribe
# on purpose, far from the thousands that exhaust the process's memory or thread limit.
MAX_THREADS_PER_CORE = 4


def max_threads() -> int:
    """The most CPU threads a model may run on: MAX_THREADS_PER_CORE for each core this process may use."""
    return MAX_THREADS_PER_CORE * usable_cores()


def check_threads(n: object, what: str = "threads") -> int:
    """`n` as a thread count: a whole number from 1 to max_threads(), else a ValueError naming `what`."""
    text = str(n).strip()
    if isinstance(n, bool) or not text.isdigit() or int(text) < 1:
        raise ValueError(f"{what} must be a whole number >= 1, got {n!r}".strip())
    limit = max_threads()
    if int(text) > limit:
        raise ValueError(f"{what} {int(text)}: more than the {limit} threads this process may start "
                         f"({MAX_THREADS_PER_CORE} for each of the {usable_cores()} cores it may use)".strip())
    return int(text)


def resolve_threads(n: Optional[int] = None) -> int:
    """The thread count a runtime uses: `n` if given, else default_threads(); checked by check_threads."""
    return default_threads() if n is None else check_threads(n, "the thread count")


def default_threads() -> int:
    """CPU threads: OMNIVOICE_THREADS if set (checked by check_threads), else the usable cores less the busy
    ones, at least 1."""
    threads = current().threads
    if threads is not None:
        return check_threads(threads, "OMNIVOICE_THREADS")
    cores = usable_cores()
    return max(1, cores - busy_cores(cores))
