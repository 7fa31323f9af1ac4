"""Fixtures of tests/generate: the reference's golden files and fresh random seeds."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "golden")
REGENERATE = ".venv-ref/bin/python tools/reference/goldens.py generate"

# fake_lm.py sits beside the tests and is shared with the golden script.
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def _load(name: str) -> dict:
    path = os.path.join(GOLDEN, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"golden file {path} is missing; regenerate it with `{REGENERATE}`")
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="session")
def schedule_golden() -> dict:
    """The reference's time steps and unmask counts (tests/golden/generate_schedule.npz)."""
    return _load("generate_schedule.npz")


@pytest.fixture(scope="session")
def loop_golden() -> dict:
    """The reference loop on the fake LM (tests/golden/generate_loop.npz)."""
    return _load("generate_loop.npz")


@pytest.fixture
def fresh_seed() -> int:
    """A new seed for each test run; tests put it in their failure messages."""
    return int(np.random.SeedSequence().entropy % 2**32)
