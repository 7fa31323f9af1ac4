"""Matrix products in 8-bit integers on x86 CPUs with AVX2: the package's kernel (omnivoice/csrc/int8.c).

A matrix is packed once at load (7-bit values with a float scale per row and block of 128 along K); a product is
then one custom CPU node that quantizes its input to 8 bits per column and block and multiplies with VPMADDUBSW
(32 multiply-adds an instruction, widened by a VPMADDWD). An LM step's products run faster than on the int16
kernel (nn.int16), at the precision class of ggml's Q8_0 and K-quant products: the default on AVX2 CPUs without
AMX (BENCHMARKS.md, the Zen 3 and Zen 4 tables).
"""

from __future__ import annotations

import numpy as np

from .packed import Kernel, PackedMatrix

# int8.c's KB, QW, QX and XOFF: K a block (K must be a multiple), the largest |q| of W's and of x's values, and
# the offset that makes x's bytes unsigned
BLOCK = 128
W_LEVELS = 63
X_LEVELS = 127
X_OFFSET = 128

KERNEL = Kernel("i8", "omnivoice_i8_", BLOCK)


def available() -> bool:
    """Whether the build has the kernel (libomnivoice-ops with int8.c) and this CPU runs it (AVX2, FMA)."""
    return KERNEL.available()


def pack(values: np.ndarray) -> PackedMatrix:
    """A float matrix [M, K] (ggml's [K, M]) packed for the int8 kernel."""
    return PackedMatrix(KERNEL, values)
