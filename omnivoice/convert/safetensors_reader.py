"""A small, strict safetensors reader (no torch): parses the header itself and checks every byte range.

Why not the ``safetensors`` package: its numpy API cannot return BF16, and its errors for damaged files
name neither the tensor nor what is wrong. Here a truncated or corrupt file fails before any tensor is used,
with a ``CheckpointError`` naming the file, the tensor and the expected size.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from .errors import CheckpointError

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsFile:
    """One ``.safetensors`` file: tensor names, shapes, dtypes, and values read on demand."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
        except OSError as e:
            raise CheckpointError(f"{self.path}: cannot read ({e.strerror})") from None
        if size < 8:
            raise CheckpointError(f"{self.path}: truncated safetensors file ({size} bytes, no header length)")
        with open(self.path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n > _MAX_HEADER or 8 + n > size:
                raise CheckpointError(
                    f"{self.path}: corrupt or truncated safetensors file (header length {n} bytes, "
                    f"file is {size} bytes)")
            raw = f.read(n)
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise CheckpointError(f"{self.path}: corrupt safetensors header (not valid JSON: {e})") from None
        if not isinstance(header, dict):
            raise CheckpointError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        metadata = header.pop("__metadata__", None) or {}
        if not isinstance(metadata, dict):
            raise CheckpointError(f"{self.path}: corrupt safetensors header (__metadata__ is not a JSON object)")
        self.metadata = metadata
        self._data_start = 8 + n
        data_size = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, e in header.items():
            dtype, shape, begin, end = self._check_entry(name, e)
            if end > data_size:
                raise CheckpointError(
                    f"{self.path}: truncated safetensors file: tensor {name!r} needs bytes [{begin}, {end}) "
                    f"of the data section, the file holds only {data_size}")
            self._entries[name] = (dtype, shape, begin, end)

    def _check_entry(self, name: str, e) -> tuple[str, tuple[int, ...], int, int]:
        """An entry's dtype, shape and offsets, each of the type the format prescribes (a dtype string, lists of
        non-negative integers: JSON 2.0 or "2" are refused, not rounded or parsed) and consistent in size."""
        def bad(what: str) -> CheckpointError:
            return CheckpointError(f"{self.path}: corrupt safetensors header: tensor {name!r} {what}")

        def count(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0

        if not isinstance(e, dict) or not {"dtype", "shape", "data_offsets"} <= e.keys():
            raise bad("needs an object with dtype, shape and data_offsets")
        dtype, shape, offsets = e["dtype"], e["shape"], e["data_offsets"]
        if not isinstance(dtype, str):
            raise bad(f"has dtype {dtype!r}; expected a string such as \"F32\"")
        if dtype not in _DTYPES:
            raise CheckpointError(f"{self.path}: tensor {name!r} has unsupported dtype {dtype!r}")
        if not isinstance(shape, list) or not all(count(d) for d in shape):
            raise bad(f"has shape {shape!r}; expected a list of non-negative integers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(count(o) for o in offsets):
            raise bad(f"has data_offsets {offsets!r}; expected [begin, end], non-negative integers")
        begin, end = offsets
        want = math.prod(shape) * _DTYPES[dtype].itemsize
        if end - begin != want:
            raise CheckpointError(
                f"{self.path}: corrupt safetensors header: tensor {name!r} {dtype}{list(shape)} needs "
                f"{want} bytes, its offsets [{begin}, {end}) span {end - begin}")
        return dtype, tuple(shape), begin, end

    def names(self) -> list[str]:
        """Tensor names in storage order."""
        return sorted(self._entries, key=lambda k: self._entries[k][2])

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def shape(self, name: str) -> tuple[int, ...]:
        """The tensor's shape in torch order."""
        return self._entry(name)[1]

    def dtype(self, name: str) -> str:
        """The tensor's safetensors dtype string (F32, BF16, I64, ...)."""
        return self._entry(name)[0]

    def _entry(self, name: str) -> tuple[str, tuple[int, ...], int, int]:
        try:
            return self._entries[name]
        except KeyError:
            raise CheckpointError(f"{self.path}: no tensor named {name!r}") from None

    def get(self, name: str) -> np.ndarray:
        """The tensor's values: floating types as float32 (BF16/F16/F64 converted), integers unchanged."""
        dtype, shape, begin, end = self._entry(name)
        with open(self.path, "rb") as f:
            f.seek(self._data_start + begin)
            raw = f.read(end - begin)
        if len(raw) != end - begin:
            raise CheckpointError(f"{self.path}: truncated while reading tensor {name!r}")
        arr = np.frombuffer(raw, dtype=_DTYPES[dtype]).reshape(shape)
        if dtype == "BF16":
            return (arr.astype(np.uint32) << 16).view(np.float32)
        if dtype in ("F16", "F64"):
            return arr.astype(np.float32)
        return arr.copy()
