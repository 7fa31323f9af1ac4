"""A minimal GGUF v3 parser for the tests, written from the format spec (independent of gguf-py's reader).

Returns metadata with its type spelled as omnivoice.gguf.keys does ("u32", "f32", "bool", "str", "[i32]", ...)
and each tensor's ggml dims (ne), type id and raw bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_SCALARS = {0: ("u8", "<B"), 1: ("i8", "<b"), 2: ("u16", "<H"), 3: ("i16", "<h"), 4: ("u32", "<I"),
            5: ("i32", "<i"), 6: ("f32", "<f"), 7: ("bool", "<?"), 10: ("u64", "<Q"), 11: ("i64", "<q"),
            12: ("f64", "<d")}
STRING, ARRAY = 8, 9
# ggml type id -> (name, block size, bytes per block)
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 8: ("Q8_0", 32, 34), 30: ("BF16", 1, 2)}


@dataclass
class TensorInfo:
    """One tensor's directory entry."""

    name: str
    ne: tuple[int, ...]
    type_name: str
    offset: int   # absolute file offset
    nbytes: int


class GGUFFile:
    """Parsed header, metadata and tensor directory of one file."""

    def __init__(self, path: str | Path):
        self.data = Path(path).read_bytes()
        self.pos = 0
        magic = self.data[:4]
        assert magic == b"GGUF", f"bad magic {magic!r}"
        self.pos = 4
        self.version = self._unpack("<I")
        n_tensors, n_kv = self._unpack("<Q"), self._unpack("<Q")
        self.kv: dict[str, tuple[str, object]] = {}
        for _ in range(n_kv):
            key = self._string()
            self.kv[key] = self._value(self._unpack("<I"))
        raw = []
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._unpack("<I")
            ne = tuple(self._unpack("<Q") for _ in range(n_dims))
            raw.append((name, ne, self._unpack("<I"), self._unpack("<Q")))
        align = int(self.kv.get("general.alignment", ("u32", 32))[1])
        start = (self.pos + align - 1) // align * align
        self.tensors: dict[str, TensorInfo] = {}
        for name, ne, t, off in raw:
            tname, block, size = GGML_TYPES[t]
            n = int(np.prod(ne))
            self.tensors[name] = TensorInfo(name, ne, tname, start + off, n // block * size)
        self.order = [r[0] for r in raw]

    def _unpack(self, fmt: str):
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def _string(self) -> str:
        n = self._unpack("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def _value(self, vtype: int) -> tuple[str, object]:
        if vtype in _SCALARS:
            name, fmt = _SCALARS[vtype]
            return name, self._unpack(fmt)
        if vtype == STRING:
            return "str", self._string()
        if vtype == ARRAY:
            sub, n = self._unpack("<I"), self._unpack("<Q")
            items = [self._value(sub)[1] for _ in range(n)]
            sub_name = "str" if sub == STRING else _SCALARS[sub][0]
            return f"[{sub_name}]", items
        raise ValueError(f"unknown GGUF value type {vtype}")

    def value(self, key: str):
        """The metadata value of ``key``."""
        return self.kv[key][1]

    def raw(self, name: str) -> bytes:
        """The stored bytes of tensor ``name``."""
        t = self.tensors[name]
        return self.data[t.offset:t.offset + t.nbytes]

    def array(self, name: str) -> np.ndarray:
        """The tensor as numpy, in torch order (reversed ne); F16/F32 as such, BF16 as uint16 bits,
        Q8_0 as uint8 blocks [rows, 34 * blocks]."""
        t = self.tensors[name]
        shape = tuple(reversed(t.ne))
        buf = self.raw(name)
        if t.type_name == "F32":
            return np.frombuffer(buf, "<f4").reshape(shape)
        if t.type_name == "F16":
            return np.frombuffer(buf, "<f2").reshape(shape)
        if t.type_name == "BF16":
            return np.frombuffer(buf, "<u2").reshape(shape)
        return np.frombuffer(buf, np.uint8).reshape(*shape[:-1], shape[-1] // 32 * 34)
