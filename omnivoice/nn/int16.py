"""Matrix products in 16-bit integers on x86 CPUs with AVX2: the package's kernel (omnivoice/csrc/products.c).

A matrix is packed once at load (13-bit values with a float scale per row and block of 128 along K); a product
is then one custom CPU node that quantizes its input to 13 bits per column and block and multiplies with
VPMADDWD (16 multiply-adds an instruction against an FMA's 8). On AVX2 CPUs without AVX-512 the LM's products
run ahead of ggml's F16 and F32 GEMMs, with the rounding error of F16 operands (BENCHMARKS.md). CPUs with
AVX-512 have wider FMAs, BF16 dot products or AMX (nn.amx).
"""

from __future__ import annotations

import numpy as np

from .packed import Kernel, PackedMatrix

# products.c's KB, QW and QX: K a block (K must be a multiple), and the largest |q| of W's and of x's values
BLOCK = 128
W_LEVELS = 4095
X_LEVELS = 4095

KERNEL = Kernel("i16", "omnivoice_i16_", BLOCK)


def available() -> bool:
    """Whether the build has the kernel (libomnivoice-ops with products.c) and this CPU runs it (AVX2, FMA)."""
    return KERNEL.available()


def pack(values: np.ndarray) -> PackedMatrix:
    """A float matrix [M, K] (ggml's [K, M]) packed for the int16 kernel."""
    return PackedMatrix(KERNEL, values)
