"""Streaming GGUF output: typed metadata, tensor encodings (F32/F16/BF16/Q8_0, or bytes encoded by the caller
for any other ggml type, e.g. ggml's own K-quants), atomic file replacement.

Tensors are produced one at a time by callables, so memory stays at the largest tensor even for the
full-size model. The file goes through omnivoice.files.atomic_write (a temporary file created exclusively in
the output directory, renamed at the end, removed on any error), so a half-written GGUF is never left behind.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gguf
import numpy as np
from gguf.gguf_writer import WriterState

from ..files import atomic_write


class GGUFWriteError(ValueError):
    """What was asked cannot be written as GGUF (a name too long, a tensor twice, an unknown type, ...)."""


MAX_NAME_BYTES = 127  # GGML_MAX_NAME (128) minus the terminating NUL, as built for this project
# Tensor data offsets are multiples of this. The CPU backend computes on the memory-mapped file in place, and
# GGUF's default of 32 leaves half the tensors off the 64-byte lines that AVX-512 loads want (an F32 LM step
# about 9 % slower from a 32-aligned file).
ALIGNMENT = 64

# the types encode() produces from float32 values; any other ggml type is written from the caller's bytes
ENCODED = ("F32", "F16", "BF16", "Q8_0")

_VTYPES = {
    "u8": gguf.GGUFValueType.UINT8, "i8": gguf.GGUFValueType.INT8, "u16": gguf.GGUFValueType.UINT16,
    "i16": gguf.GGUFValueType.INT16, "u32": gguf.GGUFValueType.UINT32, "i32": gguf.GGUFValueType.INT32,
    "u64": gguf.GGUFValueType.UINT64, "i64": gguf.GGUFValueType.INT64, "f32": gguf.GGUFValueType.FLOAT32,
    "f64": gguf.GGUFValueType.FLOAT64, "bool": gguf.GGUFValueType.BOOL, "str": gguf.GGUFValueType.STRING,
}


class _FileWriter(gguf.GGUFWriter):
    """gguf-py's writer onto a file we opened: it would open a path itself, following a symbolic link planted
    at the name (omnivoice.files.atomic_write creates the file exclusively instead)."""

    def __init__(self, fout, arch: str) -> None:
        super().__init__(None, arch)
        self._target = fout

    def open_output_file(self, path=None) -> None:
        if self.fout is None:
            self.fout = [self._target]
            self.state = WriterState.EMPTY


def ggml_type(name: str) -> gguf.GGMLQuantizationType:
    """The ggml type called `name` ("F32", "Q4_K", ...)."""
    try:
        return gguf.GGMLQuantizationType[name]
    except KeyError:
        raise GGUFWriteError(f"unknown ggml tensor type {name!r}") from None


@dataclass
class OutTensor:
    """One tensor to write: GGUF name, torch-order shape, output type name and a producer of float32 values
    (with `raw`, of the type's encoded bytes as a uint8 array: how the types encode() lacks are written)."""

    name: str
    shape: tuple[int, ...]
    qtype: str
    produce: Callable[[], np.ndarray]
    source: str = ""  # for progress lines
    raw: bool = False


def nbytes(shape: tuple[int, ...], qtype: str) -> int:
    """Bytes the tensor takes in the file (before alignment padding)."""
    block, size = gguf.GGML_QUANT_SIZES[ggml_type(qtype)]
    n = math.prod(shape)
    if shape[-1] % block:
        raise GGUFWriteError(f"row length {shape[-1]} is not a multiple of the {qtype} block size {block}")
    return n // block * size


def encode(values: np.ndarray, qtype: str) -> np.ndarray:
    """Values as the bytes GGUF stores for ``qtype`` (F16 round-to-nearest-even, BF16/Q8_0 as ggml does)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if qtype == "F32":
        return values
    if qtype == "F16":
        return values.astype(np.float16)
    if qtype not in ENCODED:
        raise GGUFWriteError(f"{qtype} is written from bytes the caller encodes (OutTensor.raw)")
    return gguf.quants.quantize(values, gguf.GGMLQuantizationType[qtype])


def check_name(name: str) -> None:
    """Refuse names ggml cannot hold."""
    if len(name.encode()) > MAX_NAME_BYTES:
        raise GGUFWriteError(f"tensor name {name!r} is {len(name.encode())} bytes, over the {MAX_NAME_BYTES} limit")


def write_gguf(path: Path, arch: str, kv: list[tuple[str, Any, str]], tensors: list[OutTensor],
               progress: bool = True, label: str = "", alignment: int | None = ALIGNMENT) -> Path:
    """Write a GGUF file at ``path`` atomically. ``kv`` holds (key, value, type) with type as in omnivoice.gguf.keys.

    `alignment` None writes no general.alignment key: GGUF's default of 32 bytes (how omnivoice.cpp's files are).
    """
    seen = set()
    for t in tensors:
        check_name(t.name)
        if t.name in seen:
            raise GGUFWriteError(f"tensor {t.name!r} would be written twice")
        seen.add(t.name)
        if t.qtype not in gguf.GGMLQuantizationType.__members__:
            raise GGUFWriteError(f"tensor {t.name!r}: unknown output type {t.qtype!r}")
        if not t.raw and t.qtype not in ENCODED:
            raise GGUFWriteError(f"tensor {t.name!r}: {t.qtype} must be given as encoded bytes (raw)")
    path = Path(path)
    with atomic_write(path, "the GGUF output") as f:
        writer = _FileWriter(f, arch)
        if alignment is not None:
            writer.add_custom_alignment(alignment)
        for key, value, vtype in kv:
            if vtype not in _VTYPES and vtype[1:-1] not in _VTYPES:
                raise GGUFWriteError(f"metadata key {key!r}: cannot write values of type {vtype!r}")
            if vtype.startswith("["):
                sub = _VTYPES[vtype[1:-1]]
                writer.add_key_value(key, list(value), gguf.GGUFValueType.ARRAY, sub_type=sub)
            else:
                writer.add_key_value(key, value, _VTYPES[vtype])
        for t in tensors:
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), nbytes(t.shape, t.qtype),
                                   raw_dtype=ggml_type(t.qtype))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for i, t in enumerate(tensors):
            values = t.produce()
            want = nbytes(t.shape, t.qtype)
            if t.raw and (values.dtype != np.uint8 or values.nbytes != want):
                raise GGUFWriteError(f"tensor {t.name!r}: {values.nbytes} bytes of {values.dtype} given, "
                                     f"{t.qtype} {list(t.shape)} takes {want}")
            if not t.raw and tuple(values.shape) != tuple(t.shape):
                raise GGUFWriteError(f"tensor {t.name!r}: produced shape {values.shape}, planned {t.shape}")
            if progress:
                src = f" <- {t.source}" if t.source and t.source != t.name else ""
                print(f"{label}[{i + 1:4d}/{len(tensors)}] {t.name} {list(t.shape)} {t.qtype}{src}",
                      file=sys.stderr, flush=True)
            writer.write_tensor_data(values if t.raw else encode(values, t.qtype))
    return path
