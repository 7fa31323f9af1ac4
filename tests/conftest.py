"""Shared fixtures. OMNIVOICE_TEST_BACKEND picks the ggml backend the graph tests run on (default cpu)."""

from __future__ import annotations

import os

import numpy as np
import pytest


@pytest.fixture(scope="session")
def backend_spec() -> str:
    return os.environ.get("OMNIVOICE_TEST_BACKEND", "cpu")


@pytest.fixture(scope="session")
def runtime(backend_spec):
    from omnivoice.ggml import Runtime

    with Runtime(backend_spec) as rt:
        yield rt


@pytest.fixture
def rng(request) -> np.random.Generator:
    """Fresh random inputs per test, reproducible from the test's name."""
    import zlib

    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
