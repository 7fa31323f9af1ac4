"""A model's weights: GGUF tensors on a backend, plus derived tensors computed at load time.

omnivoice.gguf's reader memory-maps the file. On the CPU the map itself is the weight buffer (the weights are in RAM
once, as file pages); on a GPU each tensor is copied from the map and its pages are released right after, so
the process never holds a second copy in RAM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from ..gguf import open_model
from . import types
from ._ffi import ffi, lib
from .backend import Runtime
from .graph import new_context, set_name


class _Stacked:
    """Raw tensor data of several GGUF matrices, joined (rows of the first, then of the next...) when uploaded."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        self.parts = parts

    def join(self) -> np.ndarray:
        return np.concatenate([np.asarray(p).reshape(-1) for p in self.parts])


class WeightStore:
    """Named weight tensors on the runtime's primary device.

    Tensors are either copied into one backend buffer (GPU backends, numpy arrays), or, on the CPU, used in
    place: the buffer is the GGUF file's memory map itself, so the weights are in RAM once, as file pages.
    """

    def __init__(self, runtime: Runtime, entries: list[tuple[str, int, list[int], Any]],
                 metadata: dict[str, Any] | None = None, source: str = "<arrays>",
                 mapped: list[tuple[str, int, list[int], Any]] | None = None, region: Any = None,
                 release: Callable[[Any], None] | None = None) -> None:
        """Use from_gguf / from_arrays. `entries` (name, ggml type, ne, data) are copied into a device buffer
        (then `release(data)` is called); `mapped` ones are used in place inside the host array `region`."""
        self.runtime = runtime
        self.metadata = metadata or {}
        self.source = source
        self._tensors: dict[str, Any] = {}
        self._ctxs: list = []
        self._buffers: list = []
        self._region = region  # keeps the memory map alive as long as tensors point into it
        try:
            if mapped:
                ctx = self._new_tensors(mapped)
                base = ffi.cast("char *", ffi.from_buffer(region))
                buf = lib.ggml_backend_cpu_buffer_from_ptr(base, region.nbytes)
                if buf == ffi.NULL:
                    raise MemoryError(f"could not map the weights of {source}")
                self._buffers.append(buf)
                for name, _, _, data in mapped:
                    offset = data.__array_interface__["data"][0] - region.__array_interface__["data"][0]
                    if lib.ggml_backend_tensor_alloc(buf, self._tensors[name], base + offset) != 0:
                        raise ValueError(f"{source}: tensor {name!r} is misaligned in the file")
                del ctx
            if entries:
                ctx = self._new_tensors(entries)
                buf = lib.ggml_backend_alloc_ctx_tensors(ctx, runtime.backend)
                if buf == ffi.NULL:
                    raise MemoryError(f"could not allocate the weights of {source} on {runtime.device.spec}")
                self._buffers.append(buf)
                for name, _, _, entry_data in entries:
                    gt = self._tensors[name]
                    stacked = isinstance(entry_data, _Stacked)
                    data = entry_data.join() if stacked else np.ascontiguousarray(entry_data)
                    if lib.ggml_nbytes(gt) != data.nbytes:
                        raise ValueError(f"{source}: tensor {name!r} holds {data.nbytes} bytes; its type and "
                                         f"shape need {lib.ggml_nbytes(gt)}")
                    lib.ggml_backend_tensor_set(gt, ffi.from_buffer(data), 0, data.nbytes)
                    if release is not None:
                        release(entry_data)
            for buf in self._buffers:
                lib.ggml_backend_buffer_set_usage(buf, lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
        except BaseException:
            self.close()
            raise

    def _new_tensors(self, entries):
        ctx = new_context(max(1, len(entries)))
        self._ctxs.append(ctx)
        for name, ggml_type, ne, _ in entries:
            if not 1 <= len(ne) <= 4:
                raise ValueError(f"{self.source}: tensor {name!r} has {len(ne)} dimensions; ggml supports 1 to 4")
            fn = (lib.ggml_new_tensor_1d, lib.ggml_new_tensor_2d, lib.ggml_new_tensor_3d,
                  lib.ggml_new_tensor_4d)[len(ne) - 1]
            self._tensors[name] = set_name(fn(ctx, ggml_type, *[int(x) for x in ne]), name)
        return ctx

    @classmethod
    def from_gguf(cls, runtime: Runtime, path: str | Path, expect_arch: str | None = None,
                  keep: Callable[[str], bool] | None = None,
                  derived: dict[str, Callable[[Callable[[str], np.ndarray]], np.ndarray]] | None = None,
                  mmap: bool | None = None, stack: dict[str, list[str]] | None = None) -> "WeightStore":
        """Load the tensors of a GGUF file (those `keep` accepts) plus `derived` ones.

        `derived` maps a new tensor name to a function that receives a getter (name -> float32 numpy array of a
        GGUF tensor) and returns the float32 array to upload, e.g. Snake's 1 / (alpha + 1e-9).
        `mmap` (default: on for the CPU backend) uses the file's pages in place instead of copying them.
        `stack` maps a new name to GGUF matrices of one type and row length, stacked along ne1 (their rows one
        after another, so one matrix product does the work of several); the parts themselves are not loaded.
        It needs the copying path (`mmap` False).
        """
        path = Path(path)
        reader = open_model(path, expect_arch)
        by_name = {t.name: t for t in reader.tensors}

        def info(name: str):
            try:
                return by_name[name]
            except KeyError:
                raise KeyError(f"{path}: tensor {name!r} is missing") from None

        def source(name: str) -> np.ndarray:
            t = info(name)
            if int(t.tensor_type) not in (types.F32, types.F16):
                raise TypeError(f"{path}: tensor {name!r} must be F32 or F16 to derive from")
            dtype = np.float32 if int(t.tensor_type) == types.F32 else np.float16
            return t.data.view(dtype).reshape(tuple(reversed(t.shape))).astype(np.float32)

        stacked_parts = {part for parts in (stack or {}).values() for part in parts}
        chosen = [(t.name, t.tensor_type, [int(x) for x in t.shape], t.data)
                  for t in reader.tensors if (keep is None or keep(t.name)) and t.name not in stacked_parts]
        for name, parts in (stack or {}).items():
            infos = [info(part) for part in parts]
            if any(len(t.shape) != 2 for t in infos):
                raise ValueError(f"{path}: cannot stack {', '.join(parts)}: only matrices stack")
            if len({(int(t.tensor_type), int(t.shape[0])) for t in infos}) != 1:
                raise ValueError(f"{path}: cannot stack {', '.join(parts)}: their types or row lengths differ")
            ne = [int(infos[0].shape[0]), sum(int(t.shape[1]) for t in infos)]
            chosen.append((name, infos[0].tensor_type, ne, _Stacked([t.data for t in infos])))
        extra = []
        for name, fn in (derived or {}).items():
            arr = np.ascontiguousarray(fn(source), dtype=np.float32)
            extra.append((name, types.F32, list(reversed(arr.shape)), arr))
        if mmap is None:
            mmap = not runtime.is_gpu and not stack
        if mmap:
            if stack:
                raise ValueError("stacked weights need a copy of the file's tensors (mmap=False)")
            return cls(runtime, extra, reader.metadata, str(path), mapped=chosen, region=reader.data)

        def release(data: np.ndarray) -> None:
            for part in data.parts if isinstance(data, _Stacked) else [data]:
                reader.release(part.__array_interface__["data"][0] - reader.data.__array_interface__["data"][0]
                               + (len(reader.mmap) - reader.data.nbytes), part.nbytes)

        return cls(runtime, chosen + extra, reader.metadata, str(path), release=release)

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
        return sum(lib.ggml_backend_buffer_get_size(b) for b in self._buffers)

    def close(self) -> None:
        for buf in getattr(self, "_buffers", []):
            lib.ggml_backend_buffer_free(buf)
        for ctx in getattr(self, "_ctxs", []):
            lib.ggml_free(ctx)
        self._buffers, self._ctxs, self._region = [], [], None

    def __enter__(self) -> "WeightStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
