"""Fixtures for tests/audio."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A fresh generator per test, seeded from the test's name so failures reproduce."""
    seed = int.from_bytes(hashlib.sha256(request.node.nodeid.encode()).digest()[:8], "little")
    return np.random.default_rng(seed)
