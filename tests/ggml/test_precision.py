"""exact_f32: how a runtime asks Vulkan for its float32 shaders (the Vulkan runs themselves are GPU work,
tools/device/h200_checks.sh PARTS=vulkan); the switches must be set before the process creates its Vulkan device."""

from __future__ import annotations

import logging

import pytest

from omnivoice.ggml import Runtime, backend


@pytest.fixture
def fresh_vulkan(monkeypatch):
    monkeypatch.setattr(backend, "_vulkan_exact", None)
    for name in backend.VULKAN_F32_ENV:
        monkeypatch.delenv(name, raising=False)


def test_exact_sets_the_vulkan_switches_once(fresh_vulkan, monkeypatch, caplog):
    import os

    assert backend._vulkan_mode(True) is True
    assert all(os.environ[name] == "1" for name in backend.VULKAN_F32_ENV)
    with caplog.at_level(logging.WARNING, logger="omnivoice.ggml"):
        assert backend._vulkan_mode(False) is True  # the device keeps the mode it was created in
    assert not caplog.records


def test_fast_mode_leaves_the_switches_alone(fresh_vulkan, caplog):
    import os

    assert backend._vulkan_mode(False) is False
    assert not any(os.environ.get(name) for name in backend.VULKAN_F32_ENV)
    with caplog.at_level(logging.WARNING, logger="omnivoice.ggml"):
        assert backend._vulkan_mode(True) is False
    assert "cannot change" in caplog.text


def test_switches_set_by_the_user_count(fresh_vulkan, monkeypatch):
    for name in backend.VULKAN_F32_ENV:
        monkeypatch.setenv(name, "1")
    assert backend._vulkan_mode(False) is True


def test_runtime_flag(monkeypatch):
    monkeypatch.setenv("OMNIVOICE_EXACT_F32", "0")
    with Runtime("cpu") as rt:
        assert rt.exact_f32 is False
    with Runtime("cpu", exact_f32=True) as rt:
        assert rt.exact_f32 is True and "exact_f32" in repr(rt)
    monkeypatch.setenv("OMNIVOICE_EXACT_F32", "1")
    with Runtime("cpu") as rt:
        assert rt.exact_f32 is True


def test_listings_say_which_arithmetic_vulkan_uses(fresh_vulkan, monkeypatch):
    """--list-devices names the rule before a Vulkan device exists, the mode once one does."""
    monkeypatch.setenv("OMNIVOICE_EXACT_F32", "0")
    assert backend.vulkan_arithmetic() == "F16 (F32 for F32 weights)"
    monkeypatch.setenv("OMNIVOICE_EXACT_F32", "1")
    assert backend.vulkan_arithmetic() == "F32"
    monkeypatch.setenv("OMNIVOICE_EXACT_F32", "0")
    backend._vulkan_mode(False)
    assert backend.vulkan_arithmetic() == "F16"


def test_load_lines_name_vulkan_arithmetic_only():
    """Runtime.label (the CLIs' load lines, the server's /health): the arithmetic on Vulkan, nothing elsewhere."""
    from types import SimpleNamespace

    def fake(name: str, exact: bool):
        return SimpleNamespace(device=SimpleNamespace(backend=name, spec=f"{name.lower()}:0", description="GPU"),
                               exact_f32=exact)

    for exact, word in ((True, "F32"), (False, "F16")):
        rt = fake("Vulkan", exact)
        rt.arithmetic = Runtime.arithmetic.fget(rt)
        assert Runtime.label.fget(rt) == f"vulkan:0 (GPU, {word} arithmetic)"
    rt = fake("CUDA", False)
    rt.arithmetic = Runtime.arithmetic.fget(rt)
    assert rt.arithmetic is None and Runtime.label.fget(rt) == "cuda:0 (GPU)"
    with Runtime("cpu") as cpu:
        assert cpu.arithmetic is None and cpu.label == f"cpu:0 ({cpu.device.description})"
