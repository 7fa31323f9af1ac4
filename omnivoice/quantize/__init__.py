"""Weight types of a model GGUF: the policy the converter and ``python -m omnivoice.quantize`` share.

A scheme (``--quant`` of the converter, ``--type`` of this tool) names the type of the matrices and of the
embeddings. The K-quant schemes follow omnivoice.cpp's tools/quantize.cpp (itself llama-quantize's policy), so
a file made here has the tensor types of theirs:

    scheme   matrices  embeddings  v_proj / down_proj bumped to      file_type
    f32      F32       F32         -                                  0
    f16      F16       F16         -                                  1
    bf16     BF16      BF16        -                                  32
    q8_0     Q8_0      Q8_0        -                                  7
    q2_k     Q2_K      Q6_K        Q4_K in layers 0-3                 10
    q3_k_s   Q3_K      Q6_K        -                                  11
    q3_k_m   Q3_K      Q6_K        Q5_K in "M" layers                 12
    q3_k_l   Q3_K      Q6_K        Q5_K everywhere (o_proj too)       13
    q4_k_s   Q4_K      Q6_K        Q5_K in layers 0-3                 14
    q4_k_m   Q4_K      Q6_K        Q6_K in "M" layers                 15
    q5_k_s   Q5_K      Q6_K        -                                  16
    q5_k_m   Q5_K      Q6_K        Q6_K in "M" layers                 17
    q6_k     Q6_K      Q6_K        -                                  18

"M" layers of n: i < n / 9, i >= n - n / 7, or i % 3 == 0 (integer division; n is ``{arch}.block_count``,
0 when absent, which makes every layer an "M" layer, as in theirs). The embeddings (``embed_tokens``,
``audio_embeddings``) are gathered rows, so their type is the one get_rows reads. What is never quantized:
tensors of fewer than two dimensions (norms, biases), Snake's alphas, the codec's RVQ (``quantizer.quantizers.*``)
and the projections around it (``fc``, ``fc2``), whose nearest-code search a quantized codebook would flip.
A matrix whose rows do not split into the type's blocks (32 values for Q8_0, 256 for the K-quants; the
codec's convolution kernels of 7, 3 or 1 taps) is stored F16. ``general.file_type`` is llama.cpp's number in
our files and the scheme's upper-case name in omnivoice.cpp's, which is how each writes it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import gguf
import numpy as np

from ..gguf import compat
from ..gguf import keys as K
from ..gguf.reader import GGUFFile, TensorInfo, read_gguf
from ..gguf.writer import ALIGNMENT, ENCODED, OutTensor, write_gguf

F32 = "F32"
F16 = "F16"


@dataclass(frozen=True)
class Scheme:
    """One weight scheme: the ggml type names of the matrices, the embeddings and the bumped matrices."""

    name: str                 # upper case, as in file names and their general.file_type: "Q4_K_M"
    file_type: int            # llama.cpp's LlamaFileType
    base: str
    embed: str
    bump: str | None = None   # type of the important matrices in the bumped layers
    bump_layers: str = ""     # "" none, "first4", "m" (see the module doc), "all" (o_proj counts too)


SCHEMES: dict[str, Scheme] = {s.name.lower(): s for s in (
    Scheme("F32", 0, F32, F32),
    Scheme("F16", 1, F16, F16),
    Scheme("BF16", 32, "BF16", "BF16"),
    Scheme("Q8_0", 7, "Q8_0", "Q8_0"),
    Scheme("Q2_K", 10, "Q2_K", "Q6_K", "Q4_K", "first4"),
    Scheme("Q3_K_S", 11, "Q3_K", "Q6_K"),
    Scheme("Q3_K_M", 12, "Q3_K", "Q6_K", "Q5_K", "m"),
    Scheme("Q3_K_L", 13, "Q3_K", "Q6_K", "Q5_K", "all"),
    Scheme("Q4_K_S", 14, "Q4_K", "Q6_K", "Q5_K", "first4"),
    Scheme("Q4_K_M", 15, "Q4_K", "Q6_K", "Q6_K", "m"),
    Scheme("Q5_K_S", 16, "Q5_K", "Q6_K"),
    Scheme("Q5_K_M", 17, "Q5_K", "Q6_K", "Q6_K", "m"),
    Scheme("Q6_K", 18, "Q6_K", "Q6_K"),
)}

_EMBEDDINGS = ("embed_tokens.weight", "audio_embeddings.weight")
_IMPORTANT = ("v_proj.weight", "down_proj.weight")
_IMPORTANT_L = _IMPORTANT + ("o_proj.weight",)
_KEEP = re.compile(r"(\.snake[12]\.alpha|quantizer\.quantizers|^fc2?\.weight$)")
_LAYER = re.compile(r"layers\.(\d+)")


def scheme(name: str) -> Scheme:
    """The scheme called `name` (any case: q4_k_m, Q4_K_M); ValueError naming the choices otherwise."""
    try:
        return SCHEMES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown weight type {name!r}; expected one of {', '.join(SCHEMES)}") from None


def block_size(type_name: str) -> int:
    """Values per block of a ggml type (1 for F32/F16/BF16)."""
    return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]][0]


def n_dims(ne: tuple[int, ...]) -> int:
    """ggml_n_dims: the rank without trailing dimensions of 1 (at least 1)."""
    n = len(ne)
    while n > 1 and int(ne[n - 1]) == 1:
        n -= 1
    return n


def _bumped(name: str, s: Scheme, n_layers: int) -> bool:
    if s.bump is None or not any(p in name for p in (_IMPORTANT_L if s.bump_layers == "all" else _IMPORTANT)):
        return False
    m = _LAYER.search(name)
    layer = int(m.group(1)) if m else -1
    if s.bump_layers == "all":
        return True
    if layer < 0:
        return False
    if s.bump_layers == "first4":
        return layer < 4
    return layer < n_layers // 9 or layer >= n_layers - n_layers // 7 or layer % 3 == 0


def tensor_type(name: str, ne: tuple[int, ...], s: Scheme, n_layers: int = 0) -> str | None:
    """The ggml type name a tensor is stored in under scheme `s`, or None where it keeps its own type.

    `ne` is the ggml shape (ne0 = row length); `n_layers` the file's block count (for the "M" layers).
    """
    target = _wanted(name, ne, s, n_layers)
    if target is None:
        return None
    return target if int(ne[0]) % block_size(target) == 0 else F16


def _wanted(name: str, ne: tuple[int, ...], s: Scheme, n_layers: int) -> str | None:
    """The type scheme `s` names for a tensor, before its rows are checked against the type's blocks."""
    if n_dims(ne) < 2 or _KEEP.search(name):
        return None
    if any(p in name for p in _EMBEDDINGS):
        return s.embed
    if _bumped(name, s, n_layers):
        return s.bump
    return s.base


def fallback_note(tensors: Iterable[tuple[str, tuple[int, ...]]], s: Scheme, n_layers: int = 0) -> str | None:
    """What a file of scheme `s` stores F16 instead of the scheme's block type because its rows do not split
    into the type's blocks (a model whose widths are not multiples of 256, for the K-quants): a sentence naming
    those tensors (`tensors`: name and ggml shape) and why, or None when there are none. Without it a Q4_K_M
    file of such a model is silently larger than its Q8_0 file."""
    groups: dict[tuple[str, int], list[str]] = {}
    for name, ne in tensors:
        want = _wanted(name, ne, s, n_layers)
        if want is not None and int(ne[0]) % block_size(want):
            groups.setdefault((want, int(ne[0])), []).append(name)
    if not groups:
        return None
    parts = []
    for (want, row), names in groups.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        parts.append(f"{len(names)} of {want} (rows of {row} values, {want}'s blocks hold {block_size(want)}): "
                     f"{shown}")
    total = sum(len(names) for names in groups.values())
    return (f"{total} tensor{'s' if total != 1 else ''} stored F16 instead of {s.name}'s types, their rows not "
            f"splitting into the type's blocks: " + "; ".join(parts))


# ------------------------------------------------------------------------------------------------ the tool

QUANTIZATION_VERSION = 2  # general.quantization_version of ggml's current block formats
_FLOATS = ("F32", "F16", "BF16")
_DROPPED_KEYS = {K.GENERAL_ARCHITECTURE, K.GENERAL_ALIGNMENT, K.GENERAL_FILE_TYPE, K.GENERAL_QUANTIZATION_VERSION}


class QuantizeError(ValueError):
    """The input cannot be requantized as asked (names the file, the tensor or the option)."""


def encode_ggml(values: np.ndarray, type_name: str) -> np.ndarray:
    """float32 values [..., row] as ggml's bytes of the type (ggml_quantize_chunk; any block type)."""
    from ..ggml import lib, quants

    return quants.quantize(values, getattr(lib, f"GGML_TYPE_{type_name}"))


def _values(t: TensorInfo, type_name: str, allow_requantize: bool, source: str) -> np.ndarray:
    """A tensor's values as float32, flat."""
    if type_name == "F32":
        return t.data.view(np.float32)
    if type_name == "F16":
        return t.data.view(np.float16).astype(np.float32)
    if type_name == "BF16":
        return (t.data.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    if not allow_requantize:
        raise QuantizeError(f"{source}: tensor {t.name!r} is already {type_name}; quantizing it again loses more "
                            "than quantizing the float original (pass --allow-requantize to do it anyway)")
    from ..ggml import lib, quants

    return quants.dequantize(t.data, getattr(lib, f"GGML_TYPE_{type_name}"), int(np.prod(t.shape)))


def plan(f: GGUFFile, s: Scheme, allow_requantize: bool = False) -> tuple[list[tuple], list[OutTensor]]:
    """The metadata and tensors of `f` requantized to scheme `s`: every key kept (with its own GGUF type) but the
    file type, which is written as the file's layout writes it (our number, omnivoice.cpp's string). A file of
    theirs keeps their layout throughout: their quantizer writes through ggml's gguf, which stores a tensor's
    shape without its trailing dimensions of 1 (ggml_n_dims), so the shapes here are written so too."""
    arch = f.metadata.get(K.GENERAL_ARCHITECTURE)
    if arch not in (K.ARCH_LM, K.ARCH_CODEC):
        raise QuantizeError(f"{f.path}: general.architecture is {arch!r}; expected an OmniVoice model file "
                            f"({K.ARCH_LM} or {K.ARCH_CODEC})")
    n_layers = int(f.metadata.get(f"{arch}.block_count", 0))
    theirs = compat.layout(f.metadata) == compat.LAYOUT_CPP
    kv = [(k, v, f.types[k]) for k, v in f.metadata.items() if k not in _DROPPED_KEYS]
    kv.append((K.GENERAL_QUANTIZATION_VERSION, QUANTIZATION_VERSION, "u32"))  # as llama-quantize and theirs
    kv.append((K.GENERAL_FILE_TYPE, s.name, "str") if theirs else (K.GENERAL_FILE_TYPE, s.file_type, "u32"))
    tensors = []
    for t in f.tensors:
        have = gguf.GGMLQuantizationType(t.tensor_type).name
        want = tensor_type(t.name, t.shape, s, n_layers) or have
        shape = tuple(reversed([int(x) for x in t.shape][:n_dims(t.shape) if theirs else None]))
        if want == have:
            tensors.append(OutTensor(t.name, shape, have, lambda t=t: t.data, t.name, raw=True))
            continue
        values = (lambda t=t, have=have, shape=shape: _values(t, have, allow_requantize, f.path).reshape(shape))
        if have not in _FLOATS and not allow_requantize:
            values()  # raises the error that names the tensor, before anything is written
        if want in ENCODED:
            tensors.append(OutTensor(t.name, shape, want, values, f"{t.name} ({have})"))
        else:
            tensors.append(OutTensor(t.name, shape, want, lambda v=values, w=want: encode_ggml(v(), w),
                                     f"{t.name} ({have})", raw=True))
    note = fallback_note(((t.name, t.shape) for t in f.tensors), s, n_layers)
    if note:
        print(f"warning: {f.path}: {note}", file=sys.stderr)
    return kv, tensors


def quantize_file(src: str | Path, dst: str | Path, type_name: str, allow_requantize: bool = False,
                  progress: bool = True) -> Path:
    """Write `dst`, the model GGUF `src` (ours or omnivoice.cpp's, LM or codec) with its tensors in scheme
    `type_name`; the metadata, tensor names and order stay those of `src`. Atomic: on any error nothing is left."""
    s = scheme(type_name)
    src, dst = Path(src), Path(dst)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such GGUF file")
    if dst.exists() and dst.resolve() == src.resolve():
        raise QuantizeError(f"{dst}: the output would overwrite the input; give another name")
    f = read_gguf(str(src))
    kv, tensors = plan(f, s, allow_requantize)
    alignment = f.metadata.get(K.GENERAL_ALIGNMENT) if compat.layout(f.metadata) == compat.LAYOUT_CPP else ALIGNMENT
    return write_gguf(dst, f.metadata[K.GENERAL_ARCHITECTURE], kv, tensors, progress, f"{s.name} ", alignment)
