"""Seeds and mutators of the fuzzer (tools/fuzz.py), one per file format.

Each format has a small walker written here from the format's specification, independent of the package's own
readers, that finds the header and integer fields of a file; mutators then rewrite such a field with an
"interesting" value (0, 1, the type's maximum, NaN, a value off by one...), or apply a generic byte mutation
(bit flips, byte rewrites, truncation, extension, a deleted or repeated slice). A mutator returns the new bytes
and a short description of what it did, so every case in a report can be understood and replayed.
"""

from __future__ import annotations

import json
import math
import random
import struct
from dataclasses import dataclass
from typing import Callable

Mutation = tuple[bytes, str]

U16 = [0, 1, 2, 3, 7, 8, 255, 0x7FFF, 0x8000, 0xFFFF]
U32 = [0, 1, 2, 3, 7, 8, 255, 1000, 65535, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
U64 = [0, 1, 3, 2**31, 2**32, 2**32 + 1, 2**40, 2**62, 2**63, 2**64 - 1]
F32 = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0, 1e-30, 1e30, 3.4e38]


# ------------------------------------------------------------------------------------------------ generic

def bit_flips(rng: random.Random, data: bytes, start: int = 0) -> Mutation:
    """Flip 1 to 8 random bits (at or after `start`)."""
    b = bytearray(data)
    n = rng.randint(1, 8)
    spots = [rng.randrange(start, len(b)) for _ in range(n)] if len(b) > start else []
    for i in spots:
        b[i] ^= 1 << rng.randrange(8)
    return bytes(b), f"flip {n} bit(s) at {sorted(spots)[:8]}"


def byte_rewrites(rng: random.Random, data: bytes, start: int = 0) -> Mutation:
    """Set 1 to 4 random bytes to 0x00, 0xFF, 0x7F, 0x80 or a random value."""
    b = bytearray(data)
    done = []
    for _ in range(rng.randint(1, 4)):
        if len(b) <= start:
            break
        i = rng.randrange(start, len(b))
        b[i] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        done.append((i, b[i]))
    return bytes(b), f"set bytes {done}"


def truncate(rng: random.Random, data: bytes) -> Mutation:
    """Cut the file: anywhere, or within its first 64 bytes."""
    n = rng.randrange(0, min(len(data), 64)) if rng.random() < 0.3 else rng.randrange(0, max(1, len(data)))
    return data[:n], f"truncate to {n} of {len(data)} bytes"


def extend(rng: random.Random, data: bytes) -> Mutation:
    """Append zeros, random bytes or a copy of the file's start."""
    n = rng.choice([1, 3, 64, 4096, 1 << 20])
    kind = rng.choice(["zeros", "random", "copy"])
    if kind == "zeros":
        tail = bytes(n)
    else:
        tail = rng.randbytes(n) if kind == "random" else (data * (n // max(1, len(data)) + 1))[:n]
    return data + tail, f"append {n} {kind} bytes"


def splice(rng: random.Random, data: bytes) -> Mutation:
    """Delete or repeat a slice."""
    if len(data) < 2:
        return data + data, "double"
    i = rng.randrange(len(data))
    n = rng.randint(1, min(4096, len(data) - i))
    if rng.random() < 0.5:
        return data[:i] + data[i + n:], f"delete bytes [{i}, {i + n})"
    return data[:i + n] + data[i:i + n] + data[i + n:], f"repeat bytes [{i}, {i + n})"


def generic(rng: random.Random, data: bytes, start: int = 0) -> Mutation:
    kind = rng.choice(["flip", "flip", "rewrite", "truncate", "extend", "splice"])
    if kind == "flip":
        return bit_flips(rng, data, start)
    if kind == "rewrite":
        return byte_rewrites(rng, data, start)
    return {"truncate": truncate, "extend": extend, "splice": splice}[kind](rng, data)


@dataclass
class Field:
    """One integer or float field of a file: where it is, its struct format and a name for reports."""

    name: str
    offset: int
    fmt: str  # struct format, little-endian ("<I", "<Q", "<f", ...)
    kind: str = ""  # what sort of field (the GGUF walker's: header, length, kv type, kv value, tensor ...)


def rewrite_field(rng: random.Random, data: bytes, f: Field) -> Mutation:
    """Set a field to an interesting value of its type (or to its value +-1, x2, /2)."""
    size = struct.calcsize(f.fmt)
    if f.offset + size > len(data):
        return generic(rng, data)
    (old,) = struct.unpack_from(f.fmt, data, f.offset)
    code = f.fmt[-1]
    if code in "fd":
        value = rng.choice(F32 + [old * 2, old / 2, -old])
    else:
        bits = size * 8
        pool = {2: U16, 4: U32, 8: U64, 1: [0, 1, 2, 127, 128, 255]}[size]
        value = rng.choice(pool + [old + 1, old - 1, old * 2, old // 2])
        if code.islower():  # signed
            value = ((value + 2 ** (bits - 1)) % 2**bits) - 2 ** (bits - 1)
        else:
            value %= 2**bits
    b = bytearray(data)
    struct.pack_into(f.fmt, b, f.offset, value)
    return bytes(b), f"{f.name} {old!r} -> {value!r}"


# ------------------------------------------------------------------------------------------------ WAV

def wav_fields(data: bytes) -> list[Field]:
    """RIFF/WAVE header fields: sizes, every chunk's size, and the fmt chunk's members."""
    fields = [Field("RIFF size", 4, "<I")]
    pos = 12
    while pos + 8 <= len(data):
        cid = data[pos:pos + 4].decode("latin-1")
        (size,) = struct.unpack_from("<I", data, pos + 4)
        fields.append(Field(f"{cid!r} chunk size", pos + 4, "<I"))
        body = pos + 8
        if cid == "fmt ":
            for name, off, fmt in (("format tag", 0, "<H"), ("channels", 2, "<H"), ("sample rate", 4, "<I"),
                                   ("byte rate", 8, "<I"), ("block align", 12, "<H"), ("bits per sample", 14, "<H"),
                                   ("cbSize", 16, "<H"), ("valid bits", 18, "<H"), ("channel mask", 20, "<I"),
                                   ("subformat tag", 24, "<H")):
                if off + struct.calcsize(fmt) <= size:
                    fields.append(Field(f"fmt {name}", body + off, fmt))
        elif cid == "fact" and size >= 4:
            fields.append(Field("fact sample count", body, "<I"))
        pos = body + size + (size & 1)
    return fields


def mutate_wav(rng: random.Random, data: bytes) -> Mutation:
    r = rng.random()
    fields = wav_fields(data)
    if r < 0.45 and fields:
        f = rng.choice(fields)
        if f.name == "fmt sample rate" and rng.random() < 0.5:
            b = bytearray(data)
            value = rng.choice([1, 8, 100, 7919, 11025, 96000, 192000, 1_000_000, 2**31 - 1, 2**32 - 1])
            struct.pack_into("<I", b, f.offset, value)
            return bytes(b), f"fmt sample rate -> {value}"
        return rewrite_field(rng, data, f)
    if r < 0.52:
        return long_wav(rng, data)
    if r < 0.58:
        # a chunk claiming more than the file holds, or an odd-sized junk chunk before the data
        junk = b"LIST" + struct.pack("<I", rng.choice([1, 3, 0x7FFFFFFF, 0xFFFFFFFF])) + rng.randbytes(8)
        return data[:36] + junk + data[36:], "insert a junk chunk after fmt"
    return generic(rng, data, start=0 if rng.random() < 0.3 else 12)


def long_wav(rng: random.Random, data: bytes) -> Mutation:
    """The clip repeated into a long reference (minutes), with consistent sizes."""
    pos, data_off, data_size = 12, None, None
    while pos + 8 <= len(data):
        (size,) = struct.unpack_from("<I", data, pos + 4)
        if data[pos:pos + 4] == b"data":
            data_off, data_size = pos + 8, size
            break
        pos += 8 + size + (size & 1)
    if data_off is None:
        return generic(rng, data)
    minutes = rng.choice([1, 3, 10])
    rate_fmt = wav_fields(data)
    rate = next((struct.unpack_from(f.fmt, data, f.offset)[0] for f in rate_fmt if f.name == "fmt byte rate"), 48000)
    body = data[data_off:data_off + data_size]
    n = max(1, int(minutes * 60 * rate) // max(1, len(body)))
    body = body * n
    header = bytearray(data[:data_off])
    struct.pack_into("<I", header, 4, len(header) - 8 + len(body))
    struct.pack_into("<I", header, data_off - 4, len(body))
    return bytes(header) + body, f"clip repeated to {minutes} min ({len(body)} data bytes)"


# ------------------------------------------------------------------------------------------------ SRT

SRT_SEED = """1
00:00:00,200 --> 00:00:01,600
Hello there.

2
00:00:01,800 --> 00:00:03,000
How are you
today?

3
00:00:03,100 --> 00:00:04,000
Fine, thanks.
"""

_TIME_RE = None


def mutate_srt(rng: random.Random, data: bytes) -> Mutation:
    import re

    global _TIME_RE
    _TIME_RE = _TIME_RE or re.compile(rb"(\d+):(\d+):(\d+)[,.](\d+)")
    r = rng.random()
    if r < 0.3:
        stamps = list(_TIME_RE.finditer(data))
        if stamps:
            m = rng.choice(stamps)
            group = rng.randint(1, 4)
            value = rng.choice([b"0", b"00", b"59", b"60", b"99", b"100", b"9999", b"99999999", b"1" * 40,
                                b"-1", b"", b"10"])
            out = data[:m.start(group)] + value + data[m.end(group):]
            return out, f"time field {group} of {m.group(0).decode()} -> {value.decode()!r}"
    lines = data.split(b"\n")
    if r < 0.45:
        i = rng.randrange(len(lines))
        action = rng.choice(["empty text", "drop", "duplicate", "swap times", "index"])
        if action == "empty text" and b"-->" in lines[i]:
            j = i + 1
            while j < len(lines) and lines[j].strip():
                j += 1
            return b"\n".join(lines[:i + 1] + lines[j:]), f"cue at line {i + 1}: text removed"
        if action == "swap times" and b"-->" in lines[i]:
            a, _, b = lines[i].partition(b"-->")
            lines[i] = b.strip() + b" --> " + a.strip()
            return b"\n".join(lines), f"line {i + 1}: start and end swapped"
        if action == "index":
            lines[i] = rng.choice([b"0", b"-1", b"9" * 30, b"1 2", b"\xff"])
            return b"\n".join(lines), f"line {i + 1} -> {lines[i]!r}"
        if action == "duplicate":
            return b"\n".join(lines[:i + 1] + lines[i:]), f"line {i + 1} duplicated"
        return b"\n".join(lines[:i] + lines[i + 1:]), f"line {i + 1} dropped"
    if r < 0.6:
        i = rng.randrange(len(lines))
        junk = rng.choice([b"\x00", b"\r", b"\xef\xbb\xbf", b"\xff\xfe", b"\xc3", b"-->", b"<b>" * 50,
                           b"word " * rng.choice([100, 2000]), b"\xe4\xbd\xa0" * 300, b"\t" * 10])
        lines.insert(i, (lines[i] if i < len(lines) else b"") + junk)
        return b"\n".join(lines), f"junk {junk[:12]!r}... ({len(junk)} bytes) at line {i + 1}"
    if r < 0.66:
        return data.replace(b"\n", rng.choice([b"\r\n", b"\r", b"\n\n", b" \n"])), "line ends changed"
    return generic(rng, data)


# ------------------------------------------------------------------------------------------------ .rvq

RVQ_FIELDS = [Field("magic", 0, "<I"), Field("version", 4, "<I"), Field("header size", 8, "<I"),
              Field("n_codebooks", 12, "<I"), Field("n_frames", 16, "<I"), Field("sample_rate", 20, "<I"),
              Field("frame_rate", 24, "<f"), Field("codebook_size", 28, "<I"), Field("ref_rms", 32, "<f"),
              Field("reserved", 36, "<I")]


def mutate_rvq(rng: random.Random, data: bytes) -> Mutation:
    r = rng.random()
    if r < 0.45:
        return rewrite_field(rng, data, rng.choice(RVQ_FIELDS))
    if r < 0.55 and len(data) > 44:
        b = bytearray(data)
        i = 40 + 4 * rng.randrange((len(data) - 40) // 4)
        value = rng.choice([-1, 1024, 1025, 2**31 - 1, -(2**31), 65535])
        struct.pack_into("<i", b, i, value)
        return bytes(b), f"code at byte {i} -> {value}"
    if r < 0.65 and len(data) >= 40:
        # a consistent header and size for a long or reshaped code array
        n_cb, n_frames = struct.unpack_from("<II", data, 12)
        n_cb2, n_frames2 = rng.choice([(n_cb, 100_000), (n_cb, 1_000_000), (1, n_cb * n_frames),
                                       (n_cb * n_frames, 1), (4, 2 * n_frames), (9, n_frames)])
        b = bytearray(data[:40])
        struct.pack_into("<II", b, 12, n_cb2, n_frames2)
        codes = (data[40:] * (n_cb2 * n_frames2 * 4 // max(1, len(data) - 40) + 1))[:n_cb2 * n_frames2 * 4]
        return bytes(b) + codes, f"shape [{n_cb}, {n_frames}] -> [{n_cb2}, {n_frames2}] with matching size"
    return generic(rng, data)


# ------------------------------------------------------------------------------------------------ safetensors

def _st_split(data: bytes):
    (n,) = struct.unpack_from("<Q", data, 0)
    return json.loads(data[8:8 + n]), data[8 + n:]


def _st_join(header, body: bytes, raw: bytes | None = None) -> bytes:
    h = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


def mutate_safetensors(rng: random.Random, data: bytes) -> Mutation:
    r = rng.random()
    if r < 0.25:
        return generic(rng, data, start=0 if rng.random() < 0.3 else 8)
    if r < 0.32:
        return rewrite_field(rng, data, Field("header length", 0, "<Q"))
    try:
        header, body = _st_split(data)
    except Exception:
        return generic(rng, data)
    if r < 0.38:
        raw = rng.choice([b"[]", b'"x"', b"null", b"{" * 2, b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe{}",
                          b'{"a": 1}', b'{"__metadata__": [1, 2]}'])
        return _st_join(None, body, raw), f"header JSON -> {raw[:20]!r}..."
    names = [k for k in header if k != "__metadata__"]
    name = rng.choice(names)
    entry = dict(header[name])
    key = rng.choice(["dtype", "shape", "data_offsets", "drop", "rename"])
    if key == "dtype":
        value = rng.choice([["F32"], 5, None, "F33", "f32", "I64", "F16", "BF16", "U8", "BOOL", {"a": 1}, ""])
        entry["dtype"] = value
    elif key == "shape":
        shape = list(entry["shape"])
        value = rng.choice([[str(d) for d in shape], [d + 0.5 for d in shape], [-d for d in shape], [2**40, 2**40],
                            [], [[d] for d in shape], "abc", shape[::-1], shape + [1], [0] + shape[1:],
                            [True] * len(shape), [2**63] + shape[1:], None])
        entry["shape"] = value
    elif key == "data_offsets":
        b0, e0 = entry["data_offsets"]
        value = rng.choice([[str(b0), str(e0)], [b0 + 0.5, e0 + 0.5], [e0, b0], [0, 2**62], [b0], 5, None,
                            [b0, e0, 0], [-8, e0 - 8], [b0 + 1, e0 + 1], [float(b0), float(e0)], [2**64, 2**64 + 4]])
        entry["data_offsets"] = value
    elif key == "drop":
        del header[name]
        return _st_join(header, body), f"tensor {name!r} removed from the header"
    else:
        header[name + ".x"] = header.pop(name)
        return _st_join(header, body), f"tensor {name!r} renamed"
    header[name] = entry
    return _st_join(header, body), f"tensor {name!r} {key} -> {json.dumps(value)[:60]}"


# ------------------------------------------------------------------------------------------------ GGUF

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q",
                 12: "<d"}


def gguf_fields(data: bytes, max_items: int = 4) -> list[Field]:
    """Header counts, each key/value's type, scalar value, string and array lengths (the first few items of an
    array only), each tensor's dimension count, dimensions, type and offset."""
    fields = [Field("version", 4, "<I", "header"), Field("n_tensors", 8, "<Q", "header"),
              Field("n_kv", 16, "<Q", "header")]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24

    def string(name: str, record: bool = True) -> None:
        nonlocal pos
        (n,) = struct.unpack_from("<Q", data, pos)
        if record:
            fields.append(Field(f"{name} length", pos, "<Q", "length"))
        pos += 8 + n

    def value(vtype: int, name: str, record: bool = True) -> None:
        nonlocal pos
        if vtype in _GGUF_SCALARS:
            if record:
                fields.append(Field(name, pos, _GGUF_SCALARS[vtype], "kv value"))
            pos += struct.calcsize(_GGUF_SCALARS[vtype])
        elif vtype == 8:
            string(name, record)
        elif vtype == 9:
            (sub, n) = struct.unpack_from("<IQ", data, pos)
            if record:
                fields.append(Field(f"{name} item type", pos, "<I", "kv type"))
                fields.append(Field(f"{name} count", pos + 4, "<Q", "length"))
            pos += 12
            for i in range(n):
                value(sub, f"{name}[{i}]", record and i < max_items)
        else:
            raise ValueError(f"unknown GGUF value type {vtype}")

    def name(what: str) -> str:
        (n,) = struct.unpack_from("<Q", data, pos)
        text = data[pos + 8:pos + 8 + n].decode("utf-8", "replace")
        string(f"{what} {text}")
        return text

    def u32(field: str, kind: str) -> int:
        nonlocal pos
        fields.append(Field(field, pos, "<I", kind))
        pos += 4
        return struct.unpack_from("<I", data, pos - 4)[0]

    for _ in range(n_kv):
        key = name("key")
        value(u32(f"{key} type", "kv type"), key)
    for _ in range(n_tensors):
        tensor = name("tensor")
        n_dims = u32(f"{tensor} n_dims", "tensor")
        for d in range(n_dims):
            fields.append(Field(f"{tensor} ne[{d}]", pos, "<Q", "tensor"))
            pos += 8
        u32(f"{tensor} type", "tensor type")
        fields.append(Field(f"{tensor} offset", pos, "<Q", "tensor"))
        pos += 8
    return fields


@dataclass
class GgufTensor:
    """Where a tensor's data lies (from the walker's fields): for the mutations that edit values or offsets."""

    name: str
    n_values: int
    ggml_type: int
    offset: Field  # the offset field; the data starts at data_start + its value


def gguf_tensors(data: bytes, fields: list[Field]) -> tuple[list[GgufTensor], int]:
    """The tensors of a GGUF file and where its data section starts, from gguf_fields' records."""
    def read(f: Field):
        return struct.unpack_from(f.fmt, data, f.offset)[0]

    align = next((read(f) for f in fields if f.name == "general.alignment"), 32)
    tensors, dims = [], []
    for f in fields:
        if f.kind == "tensor" and " ne[" in f.name:
            dims.append(read(f))
        elif f.kind == "tensor type":
            ggml_type = read(f)
        elif f.kind == "tensor" and f.name.endswith(" offset"):
            tensors.append(GgufTensor(f.name[:-len(" offset")], math.prod(dims), ggml_type, f))
            dims = []
    end = max(f.offset + struct.calcsize(f.fmt) for f in fields)
    return tensors, (end + align - 1) // align * align


SMALL_TENSOR = 1 << 20  # the loaders check tensors up to this size for NaN (loaders.tensors.SMALL_TENSOR)


class GgufMutator:
    """Targeted GGUF rewrites: a key's value (hyper-parameters first), a tensor's dims, type or offset, the
    header counts and lengths; plus generic byte mutations of the header region and of the data; and the edits
    that loaded silently wrong before issue 56's checks (`semantic`): a tensor's offset moved back into its
    neighbour, NaN or infinities in a small F32 tensor, an epsilon made tiny or huge, a channel list item
    changed."""

    def __init__(self, data: bytes) -> None:
        fields = gguf_fields(data)
        self.by_kind: dict[str, list[Field]] = {}
        for f in fields:
            self.by_kind.setdefault(f.kind, []).append(f)
        self.header_end = max(f.offset for f in fields) + 8
        self.tensors, self.data_start = gguf_tensors(data, fields)
        self.small = [t for t in self.tensors if t.ggml_type == 0 and 0 < t.n_values <= SMALL_TENSOR]
        values = self.by_kind.get("kv value", [])
        self.epsilons = [f for f in values if "eps" in f.name and f.fmt in ("<f", "<d")]
        self.channels = [f for f in values if "channels[" in f.name]

    def semantic(self, rng: random.Random, data: bytes) -> Mutation:
        b = bytearray(data)
        r = rng.random()
        if r < 0.3 and len(self.tensors) > 1:
            t = rng.choice(self.tensors[1:])
            (old,) = struct.unpack_from("<Q", data, t.offset.offset)
            new = max(0, old - 64 * rng.choice([1, 2, 4]))
            struct.pack_into("<Q", b, t.offset.offset, new)
            return bytes(b), f"{t.name} data offset {old} -> {new} (into its neighbour)"
        if r < 0.6 and self.small:
            t = rng.choice(self.small)
            (offset,) = struct.unpack_from("<Q", data, t.offset.offset)
            i = rng.randrange(t.n_values)
            value = rng.choice([math.nan, math.inf, -math.inf])
            at = self.data_start + offset + 4 * i
            if at + 4 > len(b):
                return generic(rng, data)
            struct.pack_into("<f", b, at, value)
            return bytes(b), f"{t.name}[{i}] -> {value}"
        if r < 0.8 and self.epsilons:
            f = rng.choice(self.epsilons)
            value = rng.choice([1e-45, 1e-38, 1e-20, 0.0, 1.0, 1e3])
            (old,) = struct.unpack_from(f.fmt, data, f.offset)
            struct.pack_into(f.fmt, b, f.offset, value)
            return bytes(b), f"{f.name} {old!r} -> {value!r}"
        if self.channels:
            f = rng.choice(self.channels)
            (old,) = struct.unpack_from(f.fmt, data, f.offset)
            value = rng.choice([0, 1, old + 1, old * 2, old // 2, 2**31 - 1, 2**32 - 1])
            value %= 1 << 8 * struct.calcsize(f.fmt)
            struct.pack_into(f.fmt, b, f.offset, value)
            return bytes(b), f"{f.name} {old} -> {value}"
        return generic(rng, data)

    def __call__(self, rng: random.Random, data: bytes) -> Mutation:
        if rng.random() < 0.2:
            return self.semantic(rng, data)
        r = rng.random()
        if r < 0.35:
            f = rng.choice(self.by_kind["kv value"])
            if f.fmt in ("<f", "<d") or rng.random() < 0.6:
                return rewrite_field(rng, data, f)
            b = bytearray(data)
            value = rng.choice([0, 1, 3, 255, 2**31 - 1]) % (1 << 8 * struct.calcsize(f.fmt) - 1)
            struct.pack_into(f.fmt, b, f.offset, value)
            return bytes(b), f"{f.name} -> {value}"
        if r < 0.5:
            f = rng.choice(self.by_kind["tensor type"])
            b = bytearray(data)
            value = rng.choice([0, 1, 2, 8, 24, 26, 30, 39, 40, 99])
            struct.pack_into("<I", b, f.offset, value)
            return bytes(b), f"{f.name} -> ggml type {value}"
        if r < 0.7:
            return rewrite_field(rng, data, rng.choice(self.by_kind["tensor"]))
        if r < 0.8:
            return rewrite_field(rng, data, rng.choice(self.by_kind["header"] + self.by_kind["kv type"]))
        if r < 0.88:
            return rewrite_field(rng, data, rng.choice(self.by_kind["length"]))
        if r < 0.95:
            mutant, what = bit_flips(rng, data[:self.header_end])
            return mutant + data[self.header_end:], what + " (header region)"
        return generic(rng, data)


FORMATS: dict[str, Callable[[random.Random, bytes], Mutation]] = {
    "wav": mutate_wav, "srt": mutate_srt, "rvq": mutate_rvq, "safetensors": mutate_safetensors,
}


def main(argv: list[str] | None = None) -> int:
    """One mutant of a file, as the fuzzer makes them: to reproduce or hand-check a case of tools/fuzz.py."""
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("format", choices=sorted(FORMATS), help="the file's format (its mutator)")
    ap.add_argument("input", type=Path, help="a valid file of that format")
    ap.add_argument("-o", "--out", type=Path, required=True, help="where the mutant is written")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    mutant, what = FORMATS[args.format](random.Random(args.seed), args.input.read_bytes())
    args.out.write_bytes(mutant)
    print(f"{args.out}: {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
