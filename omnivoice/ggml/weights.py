"""A model's weights on a backend: tensors created one by one (`add`), then allocated and filled at once (`upload`).

Every tensor is checked before ggml sees it (rank, dimensions, a type this ggml build knows, the byte count its
type and shape need), so a damaged file is a Python error, not an abort inside ggml. What a model expects of
each tensor (its shape and type) is the loaders' business (omnivoice.loaders).

On the CPU a tensor whose data is a view of the `region` given to the store (a GGUF file's memory-mapped data
section) is used in place: the weights are in RAM once, as file pages. Other tensors are copied into one backend
buffer per context, and `release` is told about each source array after its copy, so a loader can let the
kernel drop the file pages it no longer needs. Quantized matrices that the CPU multiplies faster from its
repacked layout are copied into its repack buffer instead (`upload(repack=...)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from . import types
from ._ffi import consts, ffi, lib
from .backend import Runtime
from .graph import Tensor, ne_of, new_context, set_name

TENSORS_PER_CONTEXT = 512
CPU_BUFFER_ALIGNMENT = 32  # ggml_backend_cpu_buffer_from_ptr asserts this of the memory it wraps (TENSOR_ALIGNMENT)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def nbytes_of(ggml_type: int, ne: Iterable[int]) -> int:
    """Bytes a tensor of this ggml type and shape (ne0 first) takes; ValueError for a type this ggml build does
    not know or a row length that is not a whole number of the type's blocks (ggml asserts on both)."""
    ne = [int(x) for x in ne]
    if not 0 <= ggml_type < lib.GGML_TYPE_COUNT or lib.ggml_blck_size(ggml_type) == 0:
        raise ValueError(f"ggml type {ggml_type} is not a tensor type this ggml build knows")
    block = lib.ggml_blck_size(ggml_type)
    if ne[0] % block:
        raise ValueError(f"row length {ne[0]} is not a multiple of {types.type_name(ggml_type)}'s block of {block}")
    n = lib.ggml_type_size(ggml_type) * (ne[0] // block)
    for x in ne[1:]:
        n *= x
    return n


@dataclass(frozen=True)
class Zeros:
    """A `from_arrays` value: a tensor of this numpy dtype (or ggml type, for types numpy lacks: BF16) and shape,
    zeroed on the device (no host array, no copy: the padded attention's Q/K/V rows of a packed LM graph are tens
    of MB, and the serving engine builds such a graph whenever its batch changes)."""

    dtype: Any
    shape: tuple[int, ...]


class WeightStore:
    """Named weight tensors on the runtime's primary device."""

    def __init__(self, runtime: Runtime, source: str = "<arrays>", metadata: dict[str, Any] | None = None,
                 region: np.ndarray | None = None) -> None:
        """An empty store; `source` names it in errors, `region` is the host memory tensors may be used in."""
        self.runtime = runtime
        self.source = source
        self.metadata = metadata or {}
        self._region = region  # kept alive as long as tensors point into it
        self._tensors: dict[str, Tensor] = {}
        self._data: dict[str, Any] = {}  # name -> numpy array, or a list of arrays stacked row after row
        self._ctxs: list = []
        self._room = 0
        self._buffers: list = []
        self.closed = False  # close() sets it: the tensors are freed memory from then on
        self._uploaded = False

    # ------------------------------------------------------------------------------------------ building
    def add(self, name: str, ggml_type: int, ne: Iterable[int], data: np.ndarray | list[np.ndarray] | None
            ) -> Tensor:
        """A new tensor `name` of this ggml type and shape (ne0 first) that will hold `data`: an array of its raw
        bytes, a list of arrays whose rows are joined (stacked matrices), or None for zeros (set on the device).
        Allocated by `upload`."""
        if self._uploaded:
            raise RuntimeError(f"{self.source}: tensors cannot be added after upload")
        if name in self._tensors:
            raise ValueError(f"{self.source}: tensor {name!r} added twice")
        ne = [int(x) for x in ne]
        if not 1 <= len(ne) <= consts["GGML_MAX_DIMS"] or min(ne) < 1:
            raise ValueError(f"{self.source}: tensor {name!r} has shape {ne}; ggml takes 1 to 4 dimensions of "
                             "at least 1")
        try:
            want = nbytes_of(ggml_type, ne)
        except ValueError as e:
            raise ValueError(f"{self.source}: tensor {name!r}: {e}") from None
        parts = data if isinstance(data, list) else [] if data is None else [data]
        have = want if data is None else sum(int(np.asarray(p).nbytes) for p in parts)
        if have != want:
            raise ValueError(f"{self.source}: tensor {name!r} holds {have} bytes; its type "
                             f"{types.type_name(ggml_type)} and shape {ne} need {want}")
        if self._room == 0:
            self._ctxs.append(new_context(TENSORS_PER_CONTEXT))
            self._room = TENSORS_PER_CONTEXT
        fn = (lib.ggml_new_tensor_1d, lib.ggml_new_tensor_2d, lib.ggml_new_tensor_3d,
              lib.ggml_new_tensor_4d)[len(ne) - 1]
        t = set_name(fn(self._ctxs[-1], ggml_type, *ne), name)
        self._room -= 1
        self._tensors[name] = t
        self._data[name] = data
        return t

    def add_array(self, name: str, array: np.ndarray) -> Tensor:
        """A tensor holding a numpy array (float32, float16 or int32), e.g. one computed at load time."""
        array = np.ascontiguousarray(array)
        return self.add(name, types.from_numpy(array.dtype), list(reversed(array.shape)) or [1], array)

    def _in_region(self, data) -> bool:
        if self._region is None or not isinstance(data, np.ndarray):
            return False
        start, base = _address(data), _address(self._region)
        return base <= start and start + data.nbytes <= base + self._region.nbytes

    def upload(self, in_place: bool = False, release: Callable[[np.ndarray], None] | None = None,
               repack: Callable[[str], bool] | None = None) -> None:
        """Allocate every tensor and fill it. With `in_place` (CPU runtimes only), tensors whose data lies in the
        store's region use that memory itself; the others are copied, then `release(source)` is called.

        `repack(name)` says which matrices are only ever multiplied (ggml_mul_mat), never read by row
        (ggml_get_rows cannot read the repacked layout, and the CPU runs no other op on it): of those, the ones
        the CPU backend multiplies faster in another layout (Runtime.weight_buffer: CPU_REPACK for Q4_0, Q4_K,
        IQ4_NL on x86; AMX for Q8_0 and Q4_K where the CPU has it) are copied into that buffer type, from the
        region too."""
        if self._uploaded:
            return
        self._uploaded = True
        try:
            targets = {n: self.runtime.weight_buffer(t.type, ne_of(t)) for n, t in self._tensors.items()
                       if repack and repack(n)}
            repacked = [n for n, where in targets.items() if where is not None]
            for where in sorted({targets[n] for n in repacked}):
                self._alloc_repacked(where, [n for n in repacked if targets[n] == where])
            mapped = set()
            if in_place and self._region is not None:
                if self.runtime.is_gpu:
                    raise ValueError("weights can be used in place only by the CPU backend")
                # a region that ggml cannot wrap (a file aligned to less than 32 bytes) is copied instead
                if _address(self._region) % CPU_BUFFER_ALIGNMENT == 0:
                    mapped = {n for n, d in self._data.items() if self._in_region(d) and n not in repacked}
            if mapped:
                base = ffi.cast("char *", ffi.from_buffer(self._region))
                buf = lib.ggml_backend_cpu_buffer_from_ptr(base, self._region.nbytes)
                if buf == ffi.NULL:
                    raise MemoryError(f"could not map the weights of {self.source}")
                self._buffers.append(buf)
                for name in mapped:
                    offset = _address(self._data[name]) - _address(self._region)
                    if lib.ggml_backend_tensor_alloc(buf, self._tensors[name], base + offset) != 0:
                        raise ValueError(f"{self.source}: tensor {name!r} cannot be used in place")
            copied = [n for n in self._tensors if n not in mapped and n not in repacked]
            for ctx in self._ctxs:
                # contexts whose tensors are all mapped have nothing left to allocate (ggml returns NULL then)
                if any(self._tensors[n].data == ffi.NULL for n in copied):
                    buf = lib.ggml_backend_alloc_ctx_tensors(ctx, self.runtime.backend)
                    if buf == ffi.NULL:
                        raise MemoryError(f"could not allocate the weights of {self.source} on "
                                          f"{self.runtime.device.spec}")
                    self._buffers.append(buf)
            for name in copied + repacked:
                data = self._data[name]
                if data is None:
                    self._zero(self._tensors[name])
                    continue
                parts = data if isinstance(data, list) else [data]
                if name in repacked and len(parts) > 1:  # repacking buffers take a tensor in one piece
                    parts = [np.concatenate([np.asarray(p).reshape(-1) for p in parts])]
                offset = 0
                for p in parts:  # stacked parts go in row after row
                    p = np.ascontiguousarray(p)
                    lib.ggml_backend_tensor_set(self._tensors[name], ffi.from_buffer(p), offset, p.nbytes)
                    offset += p.nbytes
                if release is not None:
                    for p in parts:
                        release(p)
            for buf in self._buffers:
                lib.ggml_backend_buffer_set_usage(buf, lib.GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
            if not mapped:
                self._region = None  # every tensor was copied: the file's map need not outlive the load
        except BaseException:
            self.close()
            raise
        finally:
            self._data = {}

    def _alloc_repacked(self, where: str, names: list[str]) -> None:
        """One buffer of the CPU's extra buffer type `where` holding these tensors (its init repacks nothing yet:
        the layout changes when the data is set, whole: AMX takes a tensor in one piece only)."""
        buft = self.runtime.extra_buffer_types[where]
        align = lib.ggml_backend_buft_get_alignment(buft)
        offsets, size = [], 0
        for name in names:
            offsets.append(size)
            size += -(-lib.ggml_backend_buft_get_alloc_size(buft, self._tensors[name]) // align) * align
        buf = lib.ggml_backend_buft_alloc_buffer(buft, size)
        if buf == ffi.NULL:
            raise MemoryError(f"could not allocate the repacked weights of {self.source}")
        self._buffers.append(buf)
        base = ffi.cast("char *", lib.ggml_backend_buffer_get_base(buf))
        for name, offset in zip(names, offsets):
            if lib.ggml_backend_tensor_alloc(buf, self._tensors[name], base + offset) != 0:
                raise ValueError(f"{self.source}: tensor {name!r} cannot be repacked")

    @classmethod
    def from_arrays(cls, runtime: Runtime, arrays: dict[str, np.ndarray | tuple[str, np.ndarray] | Zeros],
                    repack: Callable[[str], bool] | None = None) -> "WeightStore":
        """Upload numpy arrays; a value `(type_name, array)` stores a float array as f16, bf16, q8_0 or q4_0, a
        `Zeros` a zeroed tensor. `repack`: see upload."""
        import gguf

        store = cls(runtime)
        try:
            for name, value in arrays.items():
                if isinstance(value, Zeros):
                    ggml_type = value.dtype if isinstance(value.dtype, int) else types.from_numpy(np.dtype(value.dtype))
                    store.add(name, ggml_type, list(reversed(value.shape)) or [1], None)
                    continue
                type_name, arr = value if isinstance(value, tuple) else (None, value)
                arr = np.asarray(arr)
                if type_name is None:
                    store.add_array(name, arr)
                else:
                    ggml_type = types.by_name(type_name)
                    data = gguf.quants.quantize(np.ascontiguousarray(arr, dtype=np.float32),
                                                gguf.GGMLQuantizationType(ggml_type))
                    store.add(name, ggml_type, list(reversed(arr.shape)), data)
            store.upload(repack=repack)
        except BaseException:
            store.close()
            raise
        return store

    # ------------------------------------------------------------------------------------------ access
    def __getitem__(self, name: str) -> Tensor:
        if self.closed:
            raise RuntimeError(f"{self.source}: the weight store is closed")
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"{self.source}: no tensor named {name!r}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def zero(self, name: str) -> None:
        """Set tensor `name` back to zeros on the device, as a `Zeros` value starts (the caller has no run reading or
        writing it in flight: the device's copy does not wait for one)."""
        self._zero(self[name])

    @staticmethod
    def _zero(t) -> None:
        lib.ggml_backend_tensor_memset(t, 0, 0, lib.ggml_nbytes(t))

    def names(self) -> Iterable[str]:
        return self._tensors.keys()

    @property
    def nbytes(self) -> int:
        return sum(lib.ggml_backend_buffer_get_size(b) for b in self._buffers)

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        # detached before freed, one at a time: a Ctrl-C after any free must not lead to a second (Graph.close)
        buffers, ctxs = getattr(self, "_buffers", []), getattr(self, "_ctxs", [])
        self._buffers, self._ctxs, self._region, self._tensors = [], [], None, {}
        self.closed = True
        while buffers:
            lib.ggml_backend_buffer_free(buffers.pop())
        while ctxs:
            lib.ggml_free(ctxs.pop())

    def __enter__(self) -> "WeightStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
