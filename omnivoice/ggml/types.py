"""ggml tensor types and their numpy counterparts."""

from __future__ import annotations

import numpy as np

from ._ffi import lib

F32 = lib.GGML_TYPE_F32
F16 = lib.GGML_TYPE_F16
BF16 = lib.GGML_TYPE_BF16
Q8_0 = lib.GGML_TYPE_Q8_0
Q4_0 = lib.GGML_TYPE_Q4_0
K_QUANTS = (lib.GGML_TYPE_Q2_K, lib.GGML_TYPE_Q3_K, lib.GGML_TYPE_Q4_K, lib.GGML_TYPE_Q5_K, lib.GGML_TYPE_Q6_K)
I32 = lib.GGML_TYPE_I32
I64 = lib.GGML_TYPE_I64
COUNT = lib.GGML_TYPE_COUNT  # type ids lie in [0, COUNT)

_NUMPY = {F32: np.dtype(np.float32), F16: np.dtype(np.float16), I32: np.dtype(np.int32), I64: np.dtype(np.int64)}
_BY_NAME = {"f32": F32, "f16": F16, "bf16": BF16, "q8_0": Q8_0, "q4_0": Q4_0, "i32": I32, "i64": I64}


def numpy_dtype(ggml_type: int) -> np.dtype:
    """The numpy dtype that holds a tensor of this type element for element (F32, F16, I32 and I64 only)."""
    try:
        return _NUMPY[ggml_type]
    except KeyError:
        raise TypeError(f"no numpy dtype for ggml type {type_name(ggml_type)}") from None


def from_numpy(dtype) -> int:
    """The ggml type of a numpy dtype (float32, float16, int32, int64)."""
    dtype = np.dtype(dtype)
    for t, d in _NUMPY.items():
        if d == dtype:
            return t
    raise TypeError(f"numpy dtype {dtype} has no ggml counterpart (expected float32, float16, int32 or int64)")


def by_name(name: str) -> int:
    """ggml type from a short name: f32, f16, bf16, q8_0, q4_0, i32, i64."""
    try:
        return _BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(f"unknown tensor type {name!r}; expected one of {', '.join(_BY_NAME)}") from None


def type_name(ggml_type: int) -> str:
    """ggml's name of a type (F32, Q8_0, ...); "type N" for an id outside this build's range."""
    from ._ffi import ffi

    if not 0 <= ggml_type < COUNT:
        return f"type {ggml_type}"
    return ffi.string(lib.ggml_type_name(ggml_type)).decode()
