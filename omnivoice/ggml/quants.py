"""ggml's own quantization and dequantization, row by row, from numpy.

`quantize` runs ggml_quantize_chunk (the function llama-quantize and omnivoice.cpp's tools/quantize.cpp call),
so a K-quant written here has the bytes those tools write; `dequantize` runs the type's to_float.
"""

from __future__ import annotations

import numpy as np

from ._ffi import ffi, lib


def block_size(ggml_type: int) -> int:
    """Values per block along a row (1 for F32/F16/BF16, 32 for Q8_0, 256 for the K-quants)."""
    return int(lib.ggml_blck_size(ggml_type))


def row_bytes(ggml_type: int, n_per_row: int) -> int:
    """Bytes of one row of `n_per_row` values (a multiple of the block size)."""
    return int(lib.ggml_row_size(ggml_type, n_per_row))


def fits(ggml_type: int, n_per_row: int) -> bool:
    """Whether rows of this length split into whole blocks of the type."""
    return n_per_row % block_size(ggml_type) == 0


def quantize(values: np.ndarray, ggml_type: int) -> np.ndarray:
    """float values [..., n_per_row] -> the type's bytes (uint8, rows one after another), no importance matrix.

    Types that need an importance matrix (the IQ family) are refused: nothing here computes one.
    """
    values = np.ascontiguousarray(values, dtype=np.float32)
    if values.ndim == 0 or values.size == 0:
        raise ValueError("quantize: need at least one row of values")
    n_per_row = int(values.shape[-1])
    name = ffi.string(lib.ggml_type_name(ggml_type)).decode()
    if lib.ggml_quantize_requires_imatrix(ggml_type):
        raise ValueError(f"quantize: {name} needs an importance matrix, which this tool does not compute")
    if not fits(ggml_type, n_per_row):
        raise ValueError(f"quantize: rows of {n_per_row} values do not split into {name} blocks of "
                         f"{block_size(ggml_type)}")
    n_rows = values.size // n_per_row
    out = np.empty(row_bytes(ggml_type, n_per_row) * n_rows, np.uint8)
    lib.ggml_quantize_init(ggml_type)
    written = lib.ggml_quantize_chunk(ggml_type, ffi.cast("const float *", ffi.from_buffer(values)),
                                      ffi.from_buffer(out), 0, n_rows, n_per_row, ffi.NULL)
    if written != out.nbytes:
        raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes of {name}, expected {out.nbytes}")
    return out


def dequantize(data: np.ndarray, ggml_type: int, n_values: int) -> np.ndarray:
    """The type's bytes -> float32 [n_values], by ggml's own to_float (any type ggml can read; F32 is a view)."""
    raw = np.ascontiguousarray(np.asarray(data).view(np.uint8).reshape(-1))
    if ggml_type == lib.GGML_TYPE_F32:  # ggml has no to_float for its own float
        if raw.nbytes != 4 * n_values:
            raise ValueError(f"dequantize: {raw.nbytes} bytes of f32 do not hold {n_values} values")
        return raw.view(np.float32)
    traits = lib.ggml_get_type_traits(ggml_type)
    if traits.to_float == ffi.NULL:
        raise TypeError(f"ggml type {ffi.string(traits.type_name).decode()} has no conversion to float")
    blocks = -(-n_values // int(traits.blck_size))
    if n_values % int(traits.blck_size) or raw.nbytes != blocks * int(traits.type_size):
        raise ValueError(f"dequantize: {raw.nbytes} bytes of {ffi.string(traits.type_name).decode()} do not hold "
                         f"{n_values} values")
    out = np.empty(n_values, np.float32)
    traits.to_float(ffi.from_buffer(raw), ffi.cast("float *", ffi.from_buffer(out)), n_values)
    return out
