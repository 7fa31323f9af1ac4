"""Damage one thing in a copy of a GGUF file: a metadata value, a tensor's type, shape or name, or one of its
values.

For tests that show a bad model file gets a clear error. Walks the header itself, from the format spec
(independent of omnivoice.gguf's reader), and rewrites the field in place, so everything else (offsets, data,
the other keys) stays byte for byte as it was.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


@dataclass
class _Tensor:
    name_at: int   # where the name's bytes start
    n_dims: int
    ne_at: int     # where ne0 starts (u64 each)
    type_at: int   # the u32 type id


class _Header:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 8  # magic, version
        n_tensors, n_kv = self._take("<Q"), self._take("<Q")
        self.kv: dict[str, tuple[int, int]] = {}  # key -> (value type, value offset)
        for _ in range(n_kv):
            key = self._string()
            vtype = self._take("<I")
            self.kv[key] = (vtype, self.pos)
            self._skip(vtype)
        self.tensors: dict[str, _Tensor] = {}
        for _ in range(n_tensors):
            name_at = self.pos + 8
            name = self._string()
            n_dims = self._take("<I")
            ne_at = self.pos
            self.pos += 8 * n_dims
            self.tensors[name] = _Tensor(name_at, n_dims, ne_at, self.pos)
            self.pos += 4 + 8  # type, offset
        align_at = self.kv.get("general.alignment")
        align = struct.unpack_from("<I", self.data, align_at[1])[0] if align_at else 32
        self.data_start = (self.pos + align - 1) // align * align  # the tensor data begins here

    def _take(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _string(self) -> str:
        n = self._take("<Q")
        self.pos += n
        return self.data[self.pos - n:self.pos].decode()

    def _skip(self, vtype: int) -> None:
        if vtype in _SCALAR:
            self.pos += struct.calcsize(_SCALAR[vtype])
        elif vtype == _STRING:
            self._string()
        elif vtype == _ARRAY:
            sub, n = self._take("<I"), self._take("<Q")
            for _ in range(n):
                self._skip(sub)
        else:
            raise ValueError(f"unknown GGUF value type {vtype}")


def _edit(src: Path, dst: Path):
    shutil.copyfile(src, dst)
    data = bytearray(Path(dst).read_bytes())
    return data, _Header(bytes(data))


def set_key(src: str | Path, dst: str | Path, key: str, value) -> Path:
    """Copy `src` to `dst` with the scalar metadata `key` set to `value` (stored in the key's own type)."""
    data, h = _edit(src, dst)
    vtype, at = h.kv[key]
    if vtype not in _SCALAR:
        raise ValueError(f"{key} is not a scalar")
    struct.pack_into(_SCALAR[vtype], data, at, value)
    Path(dst).write_bytes(data)
    return Path(dst)


def set_array_item(src: str | Path, dst: str | Path, key: str, index: int, value) -> Path:
    """Copy `src` to `dst` with item `index` of the numeric array `key` set to `value`."""
    data, h = _edit(src, dst)
    vtype, at = h.kv[key]
    sub, n = struct.unpack_from("<IQ", data, at)
    if vtype != _ARRAY or sub not in _SCALAR or not 0 <= index < n:
        raise ValueError(f"{key} is not a numeric array with an item {index}")
    struct.pack_into(_SCALAR[sub], data, at + 12 + index * struct.calcsize(_SCALAR[sub]), value)
    Path(dst).write_bytes(data)
    return Path(dst)


def set_tensor(src: str | Path, dst: str | Path, name: str, *, ggml_type: int | None = None,
               ne: tuple[int, ...] | None = None, rename: str | None = None, move_by: int = 0) -> Path:
    """Copy `src` to `dst` with tensor `name` retyped (a ggml type id), reshaped (same rank), renamed (a name
    of the same byte length) or with its data offset moved by `move_by` bytes; its data stays where it was."""
    data, h = _edit(src, dst)
    t = h.tensors[name]
    if ggml_type is not None:
        struct.pack_into("<I", data, t.type_at, ggml_type)
    if move_by:
        (offset,) = struct.unpack_from("<Q", data, t.type_at + 4)
        struct.pack_into("<Q", data, t.type_at + 4, offset + move_by)
    if ne is not None:
        if len(ne) != t.n_dims:
            raise ValueError(f"{name} has {t.n_dims} dimensions, not {len(ne)}")
        struct.pack_into(f"<{t.n_dims}Q", data, t.ne_at, *ne)
    if rename is not None:
        raw = rename.encode()
        if len(raw) != len(name.encode()):
            raise ValueError("a new name must have the old one's byte length")
        data[t.name_at:t.name_at + len(raw)] = raw
    Path(dst).write_bytes(data)
    return Path(dst)


def set_tensor_value(src: str | Path, dst: str | Path, name: str, index: int, value: float) -> Path:
    """Copy `src` to `dst` with value `index` of the F32 tensor `name` set to `value`."""
    data, h = _edit(src, dst)
    t = h.tensors[name]
    (ggml_type, offset) = struct.unpack_from("<IQ", data, t.type_at)
    if ggml_type != 0:
        raise ValueError(f"{name} is not an F32 tensor")
    struct.pack_into("<f", data, h.data_start + offset + 4 * index, value)
    Path(dst).write_bytes(data)
    return Path(dst)
