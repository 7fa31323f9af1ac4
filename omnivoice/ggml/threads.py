"""How many CPU threads a model runs on when none is named.

ggml's CPU backend splits every operation over its threads and joins them at a barrier after it, so a thread
that shares its core with another busy process holds all the others back: on a 2-core host with one core busy,
the old default of one thread per core ran 2.5x slower than one thread (issue 13). The default is therefore
the cores this process may use (its CPU affinity, and a cgroup CPU quota where one is set) less the ones other
work keeps busy (the 1-minute load average, scaled to those cores), and at least one. OMNIVOICE_THREADS or an
explicit thread count overrides it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional


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


def busy_cores(cores: int) -> int:
    """How many of `cores` other work keeps busy: the 1-minute load average, scaled from all the host's CPUs to
    these `cores`, rounded to the nearest whole core."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average on this system
        return 0
    host = os.cpu_count() or cores
    return int(load * cores / max(host, cores) + 0.5)


def default_threads() -> int:
    """CPU threads: OMNIVOICE_THREADS if set, else the usable cores less the busy ones, at least 1."""
    env = os.environ.get("OMNIVOICE_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"OMNIVOICE_THREADS must be a whole number >= 1, got {env!r}")
        return int(env)
    cores = usable_cores()
    return max(1, cores - busy_cores(cores))
