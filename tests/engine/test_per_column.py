"""Why a packed batch gives each request its solo logits on the CPU: ggml's products are per column.

Each output column of W x X is accumulated in the same order whatever the width of X (llamafile's sgemm
tiles by shape, but every output element is one dot product over k in fixed vector steps), so packing more
columns beside a request's changes none of its values. The one exception is a single column: ggml hands a
product with one column to its vec_dot path, which sums in another order. The LM never meets it differently
alone and packed: its packed sequence has at least two columns, and the audio heads run per request.
(On Arm, ggml's two-row i8mm kernels for quantized weights depend on the parity of the width too; the
project's exactness claim is F32 on the CPU.)
"""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice import nn


@pytest.mark.parametrize("wtype", [None, "f16", "bf16", "q8_0"])
def test_columns_do_not_depend_on_the_width(runtime, rng, wtype):
    from omnivoice.ggml import Graph, WeightStore

    if runtime.is_gpu:  # the claim is the CPU's: cuBLAS and ggml-cuda pick kernels and tiles by width
        pytest.skip(f"per-column products are a property of ggml's CPU kernels, not of {runtime.device.spec}'s")
    w = rng.standard_normal((96, 256)).astype(np.float32)
    x = rng.standard_normal((300, 256)).astype(np.float32)                     # ggml [256, 300]
    store = WeightStore.from_arrays(runtime, {"w": w if wtype is None else (wtype, w)})

    def product(cols):
        with Graph(runtime) as g:
            g.output("y", nn.linear(g.ctx, g.input("x", np.float32, cols.shape), store["w"]))
            return g.compute(x=cols)["y"].reshape(-1, 96)

    wide = product(x)
    for n in (2, 3, 7, 64, 255):
        np.testing.assert_array_equal(product(x[:n]), wide[:n], err_msg=f"{n} columns")
        np.testing.assert_array_equal(product(x[-n:]), wide[-n:], err_msg=f"last {n} columns")
    if wtype != "q8_0":  # integer dot products are exact in any order
        assert not np.array_equal(product(x[:1]), wide[:1]), "one column no longer takes another path?"
    store.close()
