"""Helpers for tests/audio: the reference goldens written by tools/reference/goldens.py audio.

(A module with a unique name rather than conftest.py, so test files can import it by name.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
REGENERATE = ".venv-ref/bin/python tools/reference/goldens.py audio"


class GoldenFile:
    """One golden .npz: ``meta`` (a list of case dicts) and the case arrays ``c{N}_{name}``."""

    def __init__(self, name: str) -> None:
        path = GOLDEN_DIR / name
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing; regenerate it with `{REGENERATE}`")
        with np.load(path, allow_pickle=False) as data:
            self.arrays = {k: data[k] for k in data.files if k != "meta"}
            self.meta = json.loads(str(data["meta"]))

    def cases(self, fn: str | None = None) -> list[tuple[int, dict]]:
        return [(i, m) for i, m in enumerate(self.meta) if fn is None or m.get("fn") == fn]

    def array(self, case: int, name: str) -> np.ndarray:
        return self.arrays[f"c{case}_{name}"]


_cache: dict[str, GoldenFile] = {}


def golden(name: str) -> GoldenFile:
    """Load (once) the golden file ``tests/golden/<name>``."""
    if name not in _cache:
        _cache[name] = GoldenFile(name)
    return _cache[name]


def case_ids(name: str, fn: str | None = None) -> list[int]:
    """Case numbers of a golden file, for ``pytest.mark.parametrize`` (collected at import)."""
    try:
        return [i for i, _ in golden(name).cases(fn)]
    except FileNotFoundError:
        return [-1]  # the test then fails on the missing file instead of silently collecting nothing


def digest(a: np.ndarray) -> dict:
    """Same as the golden tool's digest: sha256 of int16 or float32 little-endian bytes, and length."""
    a = np.ascontiguousarray(a)
    kind = "<i2" if a.dtype == np.int16 else "<f4"
    return {"sha256": hashlib.sha256(a.astype(kind).tobytes()).hexdigest(), "n": int(a.shape[-1])}


def pcm_float(pcm: np.ndarray) -> np.ndarray:
    """int16 -> float32, exact (the goldens store int16-exact audio as int16)."""
    return pcm.astype(np.float32) / 32768.0
