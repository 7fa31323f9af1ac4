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
def ref_clip():
    """(samples, rate) of the reference clip the clone goldens use, and its transcript."""
    d = np.load(GOLDEN / "ref_clone.npz")
    return (d["ref_wav_input"].astype(np.float32), 24000), "Hello world, this is me"
