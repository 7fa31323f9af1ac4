"""The default CPU thread count follows the cores that are free: affinity, cgroup quota, the CPUs other work
keeps busy (sampled now, else the load average)."""

from __future__ import annotations

import os
import subprocess
import sys
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


def test_other_processes_time_counts_and_this_ones_does_not(monkeypatch):
    """The arithmetic on injected counters: the host's busy ticks less this process's, per second sampled. A run of
    this process's own (which the load average counts, and leaves there for a minute) must not count."""
    hz = os.sysconf("SC_CLK_TCK")
    host_ticks = iter([1000, 1000 + 3 * hz])  # 3 CPU-seconds of busy time over the sample ...
    own_ticks = iter([50, 50 + 2 * hz])  # ... 2 of them this process's
    monkeypatch.setattr(threads, "_host_busy_ticks", lambda: next(host_ticks))
    monkeypatch.setattr(threads, "_own_ticks", lambda: next(own_ticks))
    slept = []
    monkeypatch.setattr(threads.time, "sleep", slept.append)
    assert threads.busy_cpus_now(0.5, windows=1) == pytest.approx(2.0)  # 1 CPU-second of others' work in 0.5 s
    assert slept == [0.5]


def _windows(monkeypatch, others_per_window: list[float]) -> float:
    """busy_cpus_now over injected counters whose windows hold these CPUs of others' work each (this process
    busy on one CPU throughout, which must not count)."""
    hz, n = os.sysconf("SC_CLK_TCK"), len(others_per_window)
    per = 0.1  # seconds a window: whole clock ticks
    host, own = [1000], [50]
    for others in others_per_window:
        host.append(host[-1] + round((others + 1) * per * hz))
        own.append(own[-1] + round(per * hz))
    monkeypatch.setattr(threads, "_host_busy_ticks", iter(host).__next__)
    monkeypatch.setattr(threads, "_own_ticks", iter(own).__next__)
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)
    return threads.busy_cpus_now(per * n, windows=n)


def test_a_burst_in_one_window_is_not_a_busy_core(monkeypatch):
    """The median of the windows: another process's burst (a readiness probe polling a starting server) fills
    one window and counted as a third of a CPU in the whole sample's mean; work that keeps a CPU busy fills
    every window and counts whole."""
    assert _windows(monkeypatch, [0, 0, 1.5, 0, 0]) == pytest.approx(0.0)
    assert _windows(monkeypatch, [0, 2, 2, 0, 0]) == pytest.approx(0.0)
    assert _windows(monkeypatch, [1, 1, 1, 1, 1]) == pytest.approx(1.0)
    assert _windows(monkeypatch, [1, 1, 0, 1, 2]) == pytest.approx(1.0)
    assert _windows(monkeypatch, [0, 1, 1, 0]) == pytest.approx(0.5)  # an even count: the middle two's mean


def test_own_ticks_are_this_process_cpu_time():
    """The real counters (Linux): /proc/self/stat's utime + stime advance as this process's CPU time does, and the
    host's busy time by at least as much (it includes ours). Both hold however busy the host is."""
    if threads.busy_cpus_now(0.01) is None:
        pytest.skip("no /proc CPU time counters on this system")
    hz = os.sysconf("SC_CLK_TCK")
    host0, own0, cpu0 = threads._host_busy_ticks(), threads._own_ticks(), time.process_time()
    while time.process_time() - cpu0 < 0.3:  # spin: 0.3 s of this process's CPU time
        pass
    own1, cpu1, host1 = threads._own_ticks(), time.process_time(), threads._host_busy_ticks()
    assert abs((own1 - own0) / hz - (cpu1 - cpu0)) <= 3 / hz + 0.02
    assert host1 - host0 >= own1 - own0 - 2


def test_a_process_spinning_now_is_seen():
    """The real counters (Linux): another process kept busy makes at least half a CPU busy (more, on a busy host)."""
    if threads.busy_cpus_now(0.05) is None:
        pytest.skip("no /proc CPU time counters on this system")
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 3\nwhile time.time() < t: pass"])
    try:
        time.sleep(0.3)
        assert threads.busy_cpus_now(0.3) >= 0.5
    finally:
        child.kill()
        child.wait()


def test_thread_counts_are_bounded_by_the_usable_cores(host, monkeypatch):
    """100 000 threads crashed ggml's launch (SIGSEGV): a count past MAX_THREADS_PER_CORE a core is refused,
    from an explicit count and from OMNIVOICE_THREADS alike."""
    host.cores = host.cpus = 2
    assert threads.max_threads() == 2 * threads.MAX_THREADS_PER_CORE
    assert threads.resolve_threads(threads.max_threads()) == threads.max_threads()
    with pytest.raises(ValueError, match=r"the thread count 100000: more than the 8 threads"):
        threads.resolve_threads(100000)
    monkeypatch.setenv("OMNIVOICE_THREADS", "9")
    with pytest.raises(ValueError, match=r"OMNIVOICE_THREADS 9: more than the 8 threads .* 2 cores"):
        threads.resolve_threads(None)
    host.quota = 1.0  # a cgroup quota of one core bounds it too
    monkeypatch.setenv("OMNIVOICE_THREADS", "5")
    with pytest.raises(ValueError, match="more than the 4 threads"):
        threads.default_threads()
    for bad in (0, -1, True, "x"):
        with pytest.raises(ValueError, match="must be a whole number >= 1"):
            threads.check_threads(bad)
