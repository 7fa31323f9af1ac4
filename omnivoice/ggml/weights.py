"""A model's weights: GGUF tensors loaded into one backend buffer, plus derived tensors computed at load time.

The gguf package memory-maps the file, and each tensor is copied straight from the map into the backend
buffer, so the process never holds a second copy in RAM; the map is closed once the upload is done.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from . import types
from ._ffi import ffi, lib
from .backend import Runtime
from .graph import new_context, new_tensor, set_name


def read_metadata(reader) -> dict[str, Any]:
    """GGUF key/value metadata of an opened file as plain Python values."""
    return reader.metadata


def open_gguf(path: str | Path, expect_arch: str | None = None):
    """Open a GGUF file (metadata, tensor infos, memory-mapped data); clear errors for a missing, non-GGUF,
    truncated or wrong-architecture file."""
    from ..gguf_file import read_gguf

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    reader = read_gguf(str(path))
    if expect_arch is not None:
        arch = reader.metadata.get("general.architecture")
        if arch != expect_arch:
            raise ValueError(f"{path}: general.architecture is {arch!r}, expected {expect_arch!r}")
    return reader


class WeightStore:
    """Named weight tensors living in one backend buffer on the runtime's primary device."""

    def __init__(self, runtime: Runtime, entries: list[tuple[str, int, list[int], Any]],
                 metadata: dict[str, Any] | None = None, source: str = "<arrays>") -> None:
        """Upload `entries` (name, ggml type, ne, raw data) into one buffer. Use from_gguf / from_arrays."""
        self.runtime = runtime
        self.metadata = metadata or {}
        self.source = source
        self.buffer = None
        self.ctx = new_context(max(1, len(entries)))
        self._tensors: dict[str, Any] = {}
        for name, ggml_type, ne, _ in entries:
            if not 1 <= len(ne) <= 4:
                raise ValueError(f"{source}: tensor {name!r} has {len(ne)} dimensions; ggml supports 1 to 4")
            fn = (lib.ggml_new_tensor_1d, lib.ggml_new_tensor_2d, lib.ggml_new_tensor_3d,
                  lib.ggml_new_tensor_4d)[len(ne) - 1]
            self._tensors[name] = set_name(fn(self.ctx, ggml_type, *[int(x) for x in ne]), name)

        self.buffer = lib.ggml_backend_alloc_ctx_tensors(self.ctx, runtime.backend)
        if self.buffer == ffi.NULL:
            self.buffer = None
            self.close()
            raise MemoryError(f"could not allocate the weights of {source} on {runtime.device.spec}")
        lib.ggml_backend_buffer_set_usage(self.buffer, lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        for name, _, _, data in entries:
            gt = self._tensors[name]
            data = np.ascontiguousarray(data)
            if lib.ggml_nbytes(gt) != data.nbytes:
                raise ValueError(f"{source}: tensor {name!r} holds {data.nbytes} bytes; its type and shape "
                                 f"need {lib.ggml_nbytes(gt)}")
            lib.ggml_backend_tensor_set(gt, ffi.from_buffer(data), 0, data.nbytes)

    @classmethod
    def from_gguf(cls, runtime: Runtime, path: str | Path, expect_arch: str | None = None,
                  keep: Callable[[str], bool] | None = None,
                  derived: dict[str, Callable[[Callable[[str], np.ndarray]], np.ndarray]] | None = None,
                  ) -> "WeightStore":
        """Load the tensors of a GGUF file (those `keep` accepts) plus `derived` ones.

        `derived` maps a new tensor name to a function that receives a getter (name -> float32 numpy array of a
        GGUF tensor) and returns the float32 array to upload, e.g. Snake's 1 / (alpha + 1e-9).
        """
        path = Path(path)
        reader = open_gguf(path, expect_arch)
        by_name = {t.name: t for t in reader.tensors}

        def source(name: str) -> np.ndarray:
            try:
                t = by_name[name]
            except KeyError:
                raise KeyError(f"{path}: tensor {name!r} is missing") from None
            if int(t.tensor_type) not in (types.F32, types.F16):
                raise TypeError(f"{path}: tensor {name!r} must be F32 or F16 to derive from")
            dtype = np.float32 if int(t.tensor_type) == types.F32 else np.float16
            return t.data.view(dtype).reshape(tuple(reversed(t.shape))).astype(np.float32)

        entries = [(t.name, t.tensor_type, [int(x) for x in t.shape], t.data)
                   for t in reader.tensors if keep is None or keep(t.name)]
        for name, fn in (derived or {}).items():
            arr = np.ascontiguousarray(fn(source), dtype=np.float32)
            entries.append((name, types.F32, list(reversed(arr.shape)), arr))
        store = cls(runtime, entries, read_metadata(reader), str(path))
        del reader, entries  # close the memory map
        return store

    @classmethod
    def from_arrays(cls, runtime: Runtime, arrays: dict[str, np.ndarray | tuple[str, np.ndarray]]
                    ) -> "WeightStore":
        """Upload numpy arrays; a value `(type_name, array)` stores a float array as f16, bf16 or q8_0."""
        import gguf

        entries = []
        for name, value in arrays.items():
            type_name, arr = value if isinstance(value, tuple) else (None, value)
            arr = np.asarray(arr)
            if type_name is None:
                ggml_type = types.from_numpy(arr.dtype)
                data = arr
            else:
                ggml_type = types.by_name(type_name)
                data = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32),
                                            gguf.GGMLQuantizationType(ggml_type))
            entries.append((name, ggml_type, list(reversed(arr.shape)), data))
        return cls(runtime, entries)

    def __getitem__(self, name: str):
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"{self.source}: no tensor named {name!r}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def names(self) -> Iterable[str]:
        return self._tensors.keys()

    def get(self, name: str, default=None):
        return self._tensors.get(name, default)

    @property
    def nbytes(self) -> int:
        return lib.ggml_backend_buffer_get_size(self.buffer) if self.buffer is not None else 0

    def close(self) -> None:
        if getattr(self, "buffer", None) is not None:
            lib.ggml_backend_buffer_free(self.buffer)
            self.buffer = None
        if getattr(self, "ctx", None) is not None:
            lib.ggml_free(self.ctx)
            self.ctx = None

    def __enter__(self) -> "WeightStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
