"""The default CPU thread count follows the cores that are free: affinity, cgroup quota, load average."""

from __future__ import annotations

import os

import pytest

from omnivoice.ggml import threads


@pytest.fixture
def host(monkeypatch):
    """A fake host: set .cores (affinity), .cpus (all CPUs), .load (1-minute load), .quota (cores or None)."""

    class Host:
        cores, cpus, load, quota = 2, 2, 0.0, None

    h = Host()
    monkeypatch.delenv("OMNIVOICE_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(h.cores)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: h.cpus)
    monkeypatch.setattr(os, "getloadavg", lambda: (h.load, h.load, h.load))
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
