"""Damage one thing in a copy of a GGUF file: a metadata value, a tensor's type, shape or name, or one of its
values.

For tests that show a bad model file gets a clear error. Walks the header itself, from the format spec
(independent of omnivoice.gguf's reader), and rewrites the field in place, so everything else (offsets, data,
the other keys) stays byte for byte as it was.
"""

from __future__ import annotations

import functools
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


@functools.lru_cache(maxsize=2)
def _parsed(src: Path, size: int, mtime_ns: int) -> _Header:
    return _Header(src.read_bytes())


class _Copy:
    """`src` copied to `dst` by the kernel, then edited in place: a sweep of edits over one 50 MB model walks its
    header once and writes a few bytes per copy (reading, walking and rewriting it whole took 0.3 s an edit)."""

    def __init__(self, src: str | Path, dst: str | Path) -> None:
        src = Path(src).resolve()
        st = src.stat()
        self.h = _parsed(src, st.st_size, st.st_mtime_ns)
        self.data = self.h.data  # the source's bytes: what reads see
        self.dst = Path(dst)
        shutil.copyfile(src, self.dst)
        self._f = open(self.dst, "r+b")

    def write(self, at: int, raw: bytes) -> None:
        self._f.seek(at)
        self._f.write(raw)

    def pack(self, fmt: str, at: int, *values) -> None:
        self.write(at, struct.pack(fmt, *values))

    def __enter__(self) -> "_Copy":
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def set_key(src: str | Path, dst: str | Path, key: str, value) -> Path:
    """Copy `src` to `dst` with the scalar metadata `key` set to `value` (stored in the key's own type)."""
    with _Copy(src, dst) as c:
        vtype, at = c.h.kv[key]
        if vtype not in _SCALAR:
            raise ValueError(f"{key} is not a scalar")
        c.pack(_SCALAR[vtype], at, value)
    return Path(dst)


def set_array_item(src: str | Path, dst: str | Path, key: str, index: int, value) -> Path:
    """Copy `src` to `dst` with item `index` of the numeric array `key` set to `value`."""
    with _Copy(src, dst) as c:
        vtype, at = c.h.kv[key]
        sub, n = struct.unpack_from("<IQ", c.data, at)
        if vtype != _ARRAY or sub not in _SCALAR or not 0 <= index < n:
            raise ValueError(f"{key} is not a numeric array with an item {index}")
        c.pack(_SCALAR[sub], at + 12 + index * struct.calcsize(_SCALAR[sub]), value)
    return Path(dst)


def set_tensor(src: str | Path, dst: str | Path, name: str, *, ggml_type: int | None = None,
               ne: tuple[int, ...] | None = None, rename: str | None = None, move_by: int = 0) -> Path:
    """Copy `src` to `dst` with tensor `name` retyped (a ggml type id), reshaped (same rank), renamed (a name
    of the same byte length) or with its data offset moved by `move_by` bytes; its data stays where it was."""
    with _Copy(src, dst) as c:
        t = c.h.tensors[name]
        if ggml_type is not None:
            c.pack("<I", t.type_at, ggml_type)
        if move_by:
            (offset,) = struct.unpack_from("<Q", c.data, t.type_at + 4)
            c.pack("<Q", t.type_at + 4, offset + move_by)
        if ne is not None:
            if len(ne) != t.n_dims:
                raise ValueError(f"{name} has {t.n_dims} dimensions, not {len(ne)}")
            c.pack(f"<{t.n_dims}Q", t.ne_at, *ne)
        if rename is not None:
            raw = rename.encode()
            if len(raw) != len(name.encode()):
                raise ValueError("a new name must have the old one's byte length")
            c.write(t.name_at, raw)
    return Path(dst)


def set_tensor_value(src: str | Path, dst: str | Path, name: str, index: int, value: float) -> Path:
    """Copy `src` to `dst` with value `index` of the F32 tensor `name` set to `value`."""
    with _Copy(src, dst) as c:
        t = c.h.tensors[name]
        (ggml_type, offset) = struct.unpack_from("<IQ", c.data, t.type_at)
        if ggml_type != 0:
            raise ValueError(f"{name} is not an F32 tensor")
        c.pack("<f", c.h.data_start + offset + 4 * index, value)
    return Path(dst)
