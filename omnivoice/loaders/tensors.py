"""Checked access to a model file: typed metadata values, and tensors checked against the shape and types the
model expects before they become ggml tensors (llama.cpp's ``create_tensor(tn(...), {n_embd}, ...)``).

Every problem is a ModelFileError naming the file, the key or tensor, what was expected and what was found.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from ..ggml import Tensor, WeightStore, types
from ..gguf import GGUFFile, TensorInfo

# The types each kind of weight may have: what the graphs' ggml ops take there (and the tests cover).
# (the K-quants: python -m omnivoice.quantize's and omnivoice.cpp's files; tests/ggml/test_quants.py runs each)
MATRIX = (types.F32, types.F16, types.BF16, types.Q8_0, *types.K_QUANTS)     # the weight of ggml_mul_mat
EMBEDDING = (types.F32, types.F16, types.BF16, types.Q8_0, *types.K_QUANTS)  # rows gathered by ggml_get_rows
VECTOR = (types.F32,)                                       # norms, biases, scales: elementwise with F32
CONV = (types.F32,)                                         # conv kernels: im2col columns are F32


# The range of a norm's epsilon: the models' are 1e-9 (snake) to 1e-5 (layer and group norms).
MIN_EPS, MAX_EPS = 1e-12, 0.1
# Tensors up to this many values are checked for NaN and infinities at load: norms, biases, scales, codebooks and
# the like, cheap to read whole (the matrices are not).
SMALL_TENSOR = 1 << 20


class ModelFileError(ValueError):
    """A model file is readable GGUF but does not hold what the model needs (names the file and the problem)."""


def check(ok: bool, source: str, what: str) -> None:
    """Raise ModelFileError(f"{source}: {what}") unless `ok`."""
    if not ok:
        raise ModelFileError(f"{source}: {what}")


class Metadata:
    """Typed values of a GGUF file's metadata; a missing key or a value of the wrong kind is a ModelFileError."""

    def __init__(self, metadata: dict, source: str) -> None:
        self.metadata, self.source = metadata, source

    def _get(self, key: str):
        if key not in self.metadata:
            raise ModelFileError(f"{self.source}: metadata key {key!r} is missing (re-convert the checkpoint "
                                 "with python -m omnivoice.convert)")
        return self.metadata[key]

    def _bad(self, key: str, value, expected: str) -> ModelFileError:
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return ModelFileError(f"{self.source}: metadata {key} is {shown}, expected {expected}")

    def int(self, key: str, low: int = 1) -> int:
        """An integer >= `low` (1 by default: a size)."""
        v = self._get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise self._bad(key, v, f"an integer >= {low}")
        return v

    def ints(self, key: str, low: int = 1, n: int | None = None) -> tuple[int, ...]:
        """A list of integers >= `low`, of length `n` when given (else at least one)."""
        v = self._get(key)
        count = f"{n} integers" if n is not None else "a list of integers"
        if (not isinstance(v, list) or (len(v) != n if n is not None else not v)
                or any(isinstance(x, bool) or not isinstance(x, int) or x < low for x in v)):
            raise self._bad(key, v, f"{count} >= {low}")
        return tuple(v)

    def float(self, key: str, positive: bool = True) -> float:
        """A finite number (> 0 when `positive`)."""
        v = self._get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
            raise self._bad(key, v, "a finite number > 0" if positive else "a finite number")
        return float(v)

    def eps(self, key: str) -> float:
        """An epsilon (a norm's or a division's): from MIN_EPS to MAX_EPS. 1e-45 loaded and ran, silently wrong
        (a denormal the sums drown)."""
        v = self.float(key)
        if not MIN_EPS <= v <= MAX_EPS:
            raise self._bad(key, v, f"an epsilon from {MIN_EPS:g} to {MAX_EPS:g}")
        return v

    def floats(self, key: str, n: int | None = None) -> tuple[float, ...]:
        """A list of finite numbers, of length `n` when given."""
        v = self._get(key)
        if (not isinstance(v, list) or (n is not None and len(v) != n)
                or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) for x in v)):
            raise self._bad(key, v, f"{n if n is not None else 'a list of'} finite numbers")
        return tuple(float(x) for x in v)

    def bool(self, key: str, default: bool | None = None) -> bool:
        """A boolean (`default` when given and the key is absent)."""
        if default is not None and key not in self.metadata:
            return default
        v = self._get(key)
        if not isinstance(v, bool):
            raise self._bad(key, v, "true or false")
        return v

    def str(self, key: str, choices: Sequence[str] | None = None) -> str:
        """A string, one of `choices` when given."""
        v = self._get(key)
        if not isinstance(v, str) or (choices is not None and v not in choices):
            raise self._bad(key, v, "one of " + ", ".join(map(repr, choices)) if choices else "a string")
        return v


_FLOATS = {types.F32: np.float32, types.F16: np.float16}


def _type_names(allowed: Iterable[int]) -> str:
    return ", ".join(types.type_name(t) for t in allowed)


class TensorLoader:
    """The tensors of one GGUF file handed out as ggml tensors of `store`, each checked first.

    `get(name, ne, allowed)` is llama.cpp's create_tensor: the tensor must exist, have exactly the ggml shape
    `ne` (ne0 first) the config implies, and one of the `allowed` types; only then does ggml see it.
    """

    def __init__(self, f: GGUFFile, store: WeightStore) -> None:
        self.file, self.store, self.source = f, store, f.path
        self._infos = {t.name: t for t in f.tensors}

    def __contains__(self, name: str) -> bool:
        return name in self._infos

    def info(self, name: str, ne: Sequence[int], allowed: Sequence[int]) -> TensorInfo:
        """The file's entry for `name`, checked against the shape and types the model expects."""
        t = self._infos.get(name)
        want = f"ggml shape {[int(x) for x in ne]}, type {_type_names(allowed)}"
        if t is None:
            raise ModelFileError(f"{self.source}: tensor {name!r} is missing (expected {want})")
        if tuple(int(x) for x in t.shape) != tuple(int(x) for x in ne):
            raise ModelFileError(f"{self.source}: tensor {name!r} has ggml shape {list(t.shape)}, expected "
                                 f"{[int(x) for x in ne]} from the file's hyper-parameters")
        if t.tensor_type not in allowed:
            raise ModelFileError(f"{self.source}: tensor {name!r} has type {types.type_name(t.tensor_type)}, expected "
                                 f"{'one of ' if len(allowed) > 1 else ''}{_type_names(allowed)}")
        if t.tensor_type in _FLOATS and math.prod(t.shape) <= SMALL_TENSOR:
            values = t.data.view(_FLOATS[t.tensor_type])
            bad = int(values.size - np.count_nonzero(np.isfinite(values)))
            if bad:
                raise ModelFileError(f"{self.source}: tensor {name!r} holds {bad} NaN or infinite value"
                                     f"{'s' if bad > 1 else ''} of {values.size}")
        return t

    def get(self, name: str, ne: Sequence[int], allowed: Sequence[int] = VECTOR) -> Tensor:
        """The checked tensor `name` as a ggml tensor of the store."""
        t = self.info(name, ne, allowed)
        return self.store.add(name, t.tensor_type, t.shape, t.data)

    def stacked(self, name: str, parts: Sequence[tuple[str, Sequence[int]]], allowed: Sequence[int]) -> Tensor:
        """One matrix `name` holding the rows of the checked matrices `parts` ((name, ne) each) one after the
        other, so one product does the work of several; the parts must share their type."""
        infos = [self.info(n, ne, allowed) for n, ne in parts]
        if len({t.tensor_type for t in infos}) != 1:
            found = ", ".join(f"{t.name} {types.type_name(t.tensor_type)}" for t in infos)
            raise ModelFileError(f"{self.source}: cannot stack {name}: its parts' types differ ({found})")
        ne = [int(infos[0].shape[0]), sum(int(t.shape[1]) for t in infos)]
        return self.store.add(name, infos[0].tensor_type, ne, [t.data for t in infos])

    def values(self, name: str, ne: Sequence[int]) -> np.ndarray:
        """The float32 values of the checked F32 or F16 tensor `name`, numpy order (reversed ne)."""
        t = self.info(name, ne, (types.F32, types.F16))
        dtype = np.float32 if t.tensor_type == types.F32 else np.float16
        return t.data.view(dtype).reshape(tuple(reversed(t.shape))).astype(np.float32)
