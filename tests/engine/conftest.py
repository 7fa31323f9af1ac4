"""Fixtures of tests/engine: one loaded tiny model (F32) and a reference clip for cloning."""

from __future__ import annotations

import numpy as np
import pytest

import omnivoice
from tests.golden_paths import GOLDEN


@pytest.fixture(scope="session")
def ov(tiny_gguf, backend_spec):
    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend=backend_spec) as ov:
        yield ov


@pytest.fixture(scope="session")
def cpu_ov(tiny_gguf):
    """The tiny model on the CPU whatever OMNIVOICE_TEST_BACKEND says, for tests whose subject holds on the CPU
    alone: a request's tokens and audio equal bit for bit however it is packed (every op per column there), and a
    fake device step that reads the kernel's buffers through host pointers."""
    with omnivoice.OmniVoice(str(tiny_gguf["f32"]), str(tiny_gguf["codec"]), backend="cpu") as ov:
        yield ov


@pytest.fixture(scope="session")
def ref_clip():
    """(samples, rate) of the reference clip the clone goldens use, and its transcript."""
    d = np.load(GOLDEN / "ref_clone.npz")
    return (d["ref_wav_input"].astype(np.float32), 24000), "Hello world, this is me"
