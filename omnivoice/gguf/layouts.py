"""How a GGUF file lays out weights whose stored form differs from the checkpoint's, in numpy only: the
converter writes these layouts and the graphs read them (neither needs the other, nor ggml, to agree on them).
"""

from __future__ import annotations

import numpy as np

# omnivoice.conv_transpose_layout: ConvTranspose1d weights stored as ggml [IC, K * OC], k fastest
CONV_TRANSPOSE_LAYOUT = "oc_k_ic"


def conv_transpose_weight(w: np.ndarray) -> np.ndarray:
    """The stored layout of a ConvTranspose1d weight: torch (IC, OC, K) -> (OC*K, IC), i.e. ggml [IC, K*OC].

    k varies fastest inside the K*OC axis, as ggml_col2im_1d reads its columns (omnivoice.nn.conv_transpose1d
    multiplies by this matrix, then overlap-adds the columns).
    """
    ic, oc, k = w.shape
    return np.ascontiguousarray(w.transpose(1, 2, 0).reshape(oc * k, ic))
