"""Read GGUF files in pure Python: metadata, tensor infos, and the tensor data as memory-mapped numpy views.

gguf-py's GGUFReader takes seconds on a 151k-token vocabulary because it builds a numpy view per string; this
reader walks the header with struct, decodes only the keys asked for, and maps the data section once.
Shared by the tokenizer (text/), the model loaders and the weight store (ggml/); it imports none of them.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from .keys import GENERAL_ALIGNMENT, GENERAL_ARCHITECTURE

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32  # of tensor data, when general.alignment is absent
MAX_DIMS = 4

# GGUF value types -> struct format of one scalar.
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING = 8
_ARRAY = 9
# GGUF value types -> the type names omnivoice.gguf.keys and the writer use ("u32", "[i32]", ...)
_TYPE_NAMES = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32", 6: "f32", 7: "bool", 8: "str", 10: "u64",
               11: "i64", 12: "f64"}


class GGUFFormatError(ValueError):
    """The file is not a readable GGUF file (names the file and what is wrong)."""


class _Cursor:
    def __init__(self, buf, path: str) -> None:
        self.buf = buf
        self.off = 0
        self.path = path
        self.size = len(buf)

    def need(self, n: int, what: str) -> None:
        if self.off + n > self.size:
            raise GGUFFormatError(f"{self.path}: truncated GGUF header while reading {what} at byte {self.off}")

    def unpack(self, fmt: str, what: str):
        n = struct.calcsize("<" + fmt)
        self.need(n, what)
        v = struct.unpack_from("<" + fmt, self.buf, self.off)
        self.off += n
        return v[0] if len(v) == 1 else v

    def string(self, what: str) -> str:
        n = self.unpack("Q", what)
        self.need(n, what)
        raw = self.buf[self.off : self.off + n]
        self.off += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFFormatError(f"{self.path}: {what} is not valid UTF-8 ({e})") from None

    def value(self, vtype: int, key: str, keep: bool) -> Any:
        if vtype in _SCALAR:
            return self.unpack(_SCALAR[vtype], key)
        if vtype == _STRING:
            return self.string(key)
        if vtype == _ARRAY:
            etype, count = self.unpack("IQ", key)
            if etype in _SCALAR:
                fmt = _SCALAR[etype]
                n = struct.calcsize("<" + fmt) * count
                self.need(n, key)
                start = self.off
                self.off += n
                if not keep:
                    return None
                return list(struct.unpack_from(f"<{count}{fmt}", self.buf, start))
            if etype == _STRING:
                return self._string_array(count, key, keep)
            if etype == _ARRAY:
                return [self.value(_ARRAY, key, keep) for _ in range(count)]
            raise GGUFFormatError(f"{self.path}: key {key!r} has an array of unknown type {etype}")
        raise GGUFFormatError(f"{self.path}: key {key!r} has unknown value type {vtype}")

    def _string_array(self, count: int, key: str, keep: bool):
        buf, off, size = self.buf, self.off, self.size
        unpack_q = struct.Struct("<Q").unpack_from
        out = [] if keep else None
        for _ in range(count):
            if off + 8 > size:
                self.off = off
                self.need(8, key)
            (n,) = unpack_q(buf, off)
            off += 8
            if off + n > size:
                self.off = off
                self.need(n, key)
            if keep:
                out.append(buf[off : off + n])
            off += n
        self.off = off
        if not keep:
            return None
        try:
            return [b.decode("utf-8") for b in out]
        except UnicodeDecodeError as e:
            raise GGUFFormatError(f"{self.path}: a string of {key!r} is not valid UTF-8 ({e})") from None


def _open_header(path: str):
    with open(path, "rb") as f:
        try:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            raise GGUFFormatError(f"{path}: empty file, expected a GGUF file") from None
    cur = _Cursor(mm, path)
    cur.need(4, "magic")
    if mm[0:4] != GGUF_MAGIC:
        raise GGUFFormatError(f"{path}: not a GGUF file (magic {bytes(mm[0:4])!r}, expected b'GGUF')")
    cur.off = 4
    version = cur.unpack("I", "version")
    if version not in (2, 3):
        raise GGUFFormatError(f"{path}: GGUF version {version} is not supported (expected 2 or 3; "
                              "a huge number means a big-endian file)")
    return mm, cur


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file: ggml shape (ne0 first), ggml type, and its bytes (a read-only view)."""

    name: str
    shape: tuple
    tensor_type: int
    data: Any  # numpy uint8 view into the file's memory map


@dataclass
class GGUFFile:
    """Metadata and tensors of a GGUF file; the tensor data stays memory-mapped until the object is dropped."""

    path: str
    metadata: Dict[str, Any]
    tensors: list
    mmap: Any = None  # the file's read-only memory map (for madvise)
    data: Any = None  # numpy uint8 view of the whole data section
    types: Dict[str, str] = field(default_factory=dict)  # key -> its GGUF value type ("u32", "[i32]", ...)

    def release(self, view) -> None:
        """Let the kernel drop the mapped pages under `view`, a tensor's data (after a copy), so a loader that
        copies every tensor elsewhere never holds the whole file in memory as well. Other arrays are ignored."""
        length = int(view.nbytes)
        if self.mmap is None or length <= 0 or not hasattr(mmap, "MADV_DONTNEED"):
            return
        into = view.__array_interface__["data"][0] - self.data.__array_interface__["data"][0]
        if not 0 <= into <= self.data.nbytes - length:
            return
        start = into + len(self.mmap) - self.data.nbytes  # the data section ends the file
        page = mmap.PAGESIZE
        begin = start // page * page
        end = min(len(self.mmap), -(-(start + length) // page) * page)
        try:
            self.mmap.madvise(mmap.MADV_DONTNEED, begin, end - begin)
        except (OSError, ValueError):
            pass

    def tensor(self, name: str) -> TensorInfo:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"{self.path}: no tensor named {name!r}")


def tensor_nbytes(ggml_type: int, shape: tuple) -> int:
    """Bytes of a tensor of this ggml type and shape (quantized types count whole blocks along ne0)."""
    import gguf

    try:
        block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    except (KeyError, ValueError):
        raise GGUFFormatError(f"unknown ggml tensor type {ggml_type}") from None
    n = 1
    for d in shape:
        n *= int(d)
    if shape and int(shape[0]) % block:
        raise GGUFFormatError(f"row length {shape[0]} is not a multiple of the type's block size {block}")
    return n // block * size


def read_gguf(path: str) -> GGUFFile:
    """Read a whole GGUF file: all metadata, every tensor's info and a memory-mapped view of its data."""
    import numpy as np

    mm, cur = _open_header(path)
    n_tensors, n_kv = cur.unpack("QQ", "header counts")
    meta: Dict[str, Any] = {}
    types: Dict[str, str] = {}
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        vtype = cur.unpack("I", f"the type of {key!r}")
        if key in meta:
            raise GGUFFormatError(f"{path}: metadata key {key!r} appears twice")
        if vtype == _ARRAY:
            cur.need(4, key)
            etype = struct.unpack_from("<I", cur.buf, cur.off)[0]
            types[key] = f"[{_TYPE_NAMES.get(etype, 'array')}]"
        else:
            types[key] = _TYPE_NAMES.get(vtype, "?")
        meta[key] = cur.value(vtype, key, True)
    infos = []
    for i in range(n_tensors):
        name = cur.string(f"the name of tensor {i}")
        n_dims = cur.unpack("I", f"the rank of {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFFormatError(f"{path}: tensor {name!r} has {n_dims} dimensions; GGUF allows 1 to {MAX_DIMS}")
        shape = tuple(cur.unpack("Q", f"the shape of {name!r}") for _ in range(n_dims))
        ttype, offset = cur.unpack("IQ", f"the type and offset of {name!r}")
        infos.append((name, shape, ttype, offset))
    if len({name for name, *_ in infos}) != len(infos):
        seen = [name for name, *_ in infos]
        twice = next(n for n in seen if seen.count(n) > 1)
        raise GGUFFormatError(f"{path}: tensor {twice!r} appears twice")
    align = meta.get(GENERAL_ALIGNMENT, DEFAULT_ALIGNMENT)
    if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align & (align - 1):
        raise GGUFFormatError(f"{path}: {GENERAL_ALIGNMENT} is {align!r}, expected a power of two (bytes)")
    data_start = (cur.off + align - 1) // align * align
    whole = np.frombuffer(mm, dtype=np.uint8)
    tensors = []
    for name, shape, ttype, offset in infos:
        try:
            n = tensor_nbytes(ttype, shape)
        except GGUFFormatError as e:
            raise GGUFFormatError(f"{path}: tensor {name!r}: {e}") from None
        if offset % align:
            raise GGUFFormatError(f"{path}: tensor {name!r} starts at data offset {offset}, not a multiple of "
                                  f"{GENERAL_ALIGNMENT} = {align}")
        start = data_start + offset
        if start + n > len(whole):
            raise GGUFFormatError(f"{path}: tensor {name!r} ends at byte {start + n}, past the end of the file "
                                  f"({len(whole)} bytes): truncated?")
        tensors.append(TensorInfo(name, shape, ttype, whole[start:start + n]))
    # Writers lay the data out in the order of the list, each tensor after the one before: an offset moved into
    # its neighbour (64 bytes back) loaded and read the neighbour's tail as its own, finite and silently wrong.
    end, before = 0, None
    for (name, _, _, offset), t in zip(infos, tensors):
        if offset < end:
            raise GGUFFormatError(f"{path}: tensor {name!r} starts at data offset {offset}, inside the data of "
                                  f"{before!r} before it (which ends at {end}): overlapping or out-of-order tensor "
                                  "data")
        end, before = max(end, offset + t.data.nbytes), name
    return GGUFFile(str(path), meta, tensors, mm, whole[data_start:], types)


def read_gguf_metadata(path: str, keys: Optional[Iterable[str]] = None) -> Dict[str, Any]:
    """Return the metadata of the GGUF file at `path` as {key: value}.

    Arrays come back as lists; strings as str. With `keys`, only those keys are decoded (the others are skipped,
    which is faster for big vocabularies); missing keys are simply absent from the result.
    Raises GGUFFormatError for a file that is not GGUF, uses an unsupported version, or is truncated.
    """
    wanted = None if keys is None else set(keys)
    mm, cur = _open_header(path)
    with mm:
        _n_tensors, n_kv = cur.unpack("QQ", "header counts")
        out: Dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string("a metadata key")
            vtype = cur.unpack("I", f"the type of {key!r}")
            keep = wanted is None or key in wanted
            val = cur.value(vtype, key, keep)
            if keep:
                out[key] = val
        return out


def open_model(path, arch: str | None = None) -> GGUFFile:
    """Read a model's GGUF file; clear errors for a missing, non-GGUF or truncated file, and for one whose
    ``general.architecture`` is not ``arch`` (when given). omnivoice.cpp's files come back as ours
    (omnivoice.gguf.compat.adapt)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    f = read_gguf(str(path))
    if arch is not None:
        found = f.metadata.get(GENERAL_ARCHITECTURE)
        if found != arch:
            raise ValueError(f"{path}: {GENERAL_ARCHITECTURE} is {found!r}, expected {arch!r}")
    from .compat import adapt  # compat reads GGUFFile: imported here, not at the top

    return adapt(f)
