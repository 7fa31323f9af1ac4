"""The default CPU thread count follows the cores that are free: affinity, cgroup quota, the CPUs other work
keeps busy (sampled now, else the load average)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from omnivoice.ggml import threads


@pytest.fixture
def host(monkeypatch):
    """A fake host: set .cores (affinity), .cpus (all CPUs), .load (CPUs busy now), .quota (cores or None);
    .sampled False: no CPU time counters to sample, .load is then the 1-minute load average."""

    class Host:
        cores, cpus, load, quota, sampled = 2, 2, 0.0, None, True

    h = Host()
    monkeypatch.delenv("OMNIVOICE_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(h.cores)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: h.cpus)
    monkeypatch.setattr(threads, "busy_cpus_now", lambda seconds=0.1: h.load if h.sampled else None)
    monkeypatch.setattr(os, "getloadavg", lambda: (h.load, h.load, h.load) if not h.sampled else (9.0, 9.0, 9.0))
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: h.quota)
    return h


def test_an_idle_host_uses_every_core(host):
    host.cores = host.cpus = 8
    assert threads.default_threads() == 8


def test_a_busy_core_is_left_alone(host):
    # the case: 2 cores, one kept busy by another process; 2 threads ran 2.5x slower than 1
    host.load = 1.0
    assert threads.default_threads() == 1
    host.load = 7.0  # more work than cores: still one thread
    assert threads.default_threads() == 1


def test_load_is_scaled_to_the_cores_this_process_may_use(host):
    host.cores, host.cpus, host.load = 4, 16, 8.0  # half the host busy: about half of our 4 cores
    assert threads.default_threads() == 2


def test_a_cgroup_quota_caps_the_cores(host):
    host.cores = host.cpus = 16
    host.quota = 2.5
    assert threads.usable_cores() == 3
    assert threads.default_threads() == 3


def test_the_environment_overrides_and_is_checked(host, monkeypatch):
    host.load = 5.0
    monkeypatch.setenv("OMNIVOICE_THREADS", "3")
    assert threads.default_threads() == 3
    monkeypatch.setenv("OMNIVOICE_THREADS", "-1")
    with pytest.raises(ValueError, match="OMNIVOICE_THREADS"):
        threads.default_threads()


def test_runtime_uses_the_default(host):
    from omnivoice.ggml import Runtime

    host.load = 1.0
    with Runtime("cpu") as rt:
        assert rt.n_threads == 1


def test_without_counters_the_load_average_counts(host):
    host.sampled, host.load = False, 1.0
    assert threads.default_threads() == 1
    host.load = 0.2
    assert threads.default_threads() == 2


def test_a_process_spinning_now_is_seen_and_this_ones_own_work_is_not():
    """The real counters (Linux): another process kept busy counts as about one CPU; this process's own work,
    which the load average counts (and a run just ended leaves there for a minute), does not."""
    if threads.busy_cpus_now(0.05) is None:
        pytest.skip("no /proc CPU time counters on this system")
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 3\nwhile time.time() < t: pass"])
    try:
        time.sleep(0.3)
        assert threads.busy_cpus_now(0.3) >= 0.5
    finally:
        child.kill()
        child.wait()
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        own = threads.busy_cpus_now(0.3)
    finally:
        stop.set()
        spinner.join()
    assert own < 0.5
