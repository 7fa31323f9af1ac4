"""Matrix products in BF16 on Intel's AMX tiles: the package's kernel (omnivoice/csrc/amx.c).

A matrix is rounded to BF16 and packed once at load into the B-tile layout of TDPBF16PS; a product is a cast of
the input to BF16 (ggml's node) and one custom CPU node of tile products with F32 sums: the rounding of ggml's
BF16 products. ggml's own AMX kernels take only quantized weights, whose products round the activations to
8 bits (BENCHMARKS.md, the Xeon host).
"""

from __future__ import annotations

import numpy as np

from ..ggml import types
from .packed import Kernel, PackedMatrix

BLOCK = 32  # k a tile row: K must be a multiple

KERNEL = Kernel("amx", "omnivoice_amx_", BLOCK, input_type=types.BF16)


def available() -> bool:
    """Whether the build has the kernel (libomnivoice-ops with amx.c), the CPU has AMX-BF16 and the OS grants
    this process the tiles' state."""
    return KERNEL.available()


def pack(values: np.ndarray) -> PackedMatrix:
    """A float matrix [M, K] (ggml's [K, M]) packed for the AMX kernel."""
    return PackedMatrix(KERNEL, values)
