"""Linear layers, norms, activations, embedding lookup, row reductions."""

from __future__ import annotations

import math

from ..ggml import ffi, lib, ops, types


def add_bias(ctx, x, b, axis: int = 0):
    """x + b, with the 1-D bias broadcast along the other axis: axis 0 for [C, T], axis 1 for [T, C]."""
    if b is None:
        return x
    if axis == 1:
        b = lib.ggml_reshape_2d(ctx, b, 1, b.ne[0])  # [1, C]
    return lib.ggml_add(ctx, x, b)


def linear(ctx, x, w, b=None):
    """y = W x + b over ne0: x [IN, ...], w [IN, OUT] (torch (OUT, IN)) -> [OUT, ...]."""
    return add_bias(ctx, lib.ggml_mul_mat(ctx, w, x), b)


def rms_norm(ctx, x, w, eps: float, cpu: bool = False):
    """RMSNorm over ne0, scaled by w [C]. `cpu` (the graph runs on the CPU backend): one custom node of the
    package's C kernel (csrc/ops.c omnivoice_rms_norm_rows: ggml's RMS_NORM and MUL steps, its sum of squares
    vectorised) where the build has it and x and w are F32."""
    if cpu and ops is not None and x.type == types.F32 and w.type == types.F32 and x.nb[0] == 4 \
            and lib.ggml_nelements(w) == x.ne[0]:
        return lib.ggml_map_custom2(ctx, x, w, ops.omnivoice_rms_norm_rows, -1, kept("float[1]", eps))
    return lib.ggml_mul(ctx, lib.ggml_rms_norm(ctx, x, eps), w)


_KEPT: dict = {}


def kept(ctype: str, *values):
    """A cdata of `ctype` holding `values`, the userdata a custom node reads: one per (ctype, values), kept for
    the process (a graph holds the pointer for as long as it is replayed; a model has a handful)."""
    key = (ctype, values)
    if key not in _KEPT:
        _KEPT[key] = ffi.new(ctype, list(values))
    return _KEPT[key]


MAX_SRC = 9  # ggml_custom_4d takes fewer than GGML_MAX_SRC (10) sources


def custom_node(ctx, fn, ne0: int, ne1: int, srcs: list, userdata=ffi.NULL, type_: int = types.F32):
    """A [ne0, ne1] node that the package's C kernel `fn` (csrc) computes from `srcs` (at most MAX_SRC) on all
    of ggml's CPU threads: ggml_custom_4d."""
    args = ffi.new("struct ggml_tensor *[]", srcs)
    return lib.ggml_custom_4d(ctx, type_, ne0, ne1, 1, 1, args, len(srcs), fn, -1, userdata)


def concat(ctx, parts: list, dim: int):
    """The parts joined along `dim` by ggml's CONCAT, pairwise in a balanced tree (each value is copied log2(len)
    times)."""
    while len(parts) > 1:
        parts = [lib.ggml_concat(ctx, parts[i], parts[i + 1], dim) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def concat_columns(ctx, parts: list):
    """[E, n_i] side by side -> [E, sum n_i], on the CPU backend: for contiguous 2-D F32 parts nodes of the
    package's C kernel (csrc/ops.c omnivoice_concat_cols, memcpy on every thread; ggml's CPU CONCAT copies value
    by value, along dim 1 on one thread), up to MAX_SRC parts a node. Otherwise (or without the package's
    kernels) ggml's CONCATs."""
    if ops is None or not all(p.type == types.F32 and p.ne[2] == 1 and p.ne[3] == 1 and lib.ggml_is_contiguous(p)
                              for p in parts):
        return concat(ctx, parts, 1)
    while len(parts) > 1:
        groups = [parts[i:i + MAX_SRC] for i in range(0, len(parts), MAX_SRC)]
        parts = [g[0] if len(g) == 1 else
                 custom_node(ctx, ops.omnivoice_concat_cols, g[0].ne[0], sum(p.ne[1] for p in g), g) for g in groups]
    return parts[0]


def layer_norm(ctx, x, w, b, eps: float):
    """LayerNorm over ne0 with affine w, b [C]."""
    return add_bias(ctx, lib.ggml_mul(ctx, lib.ggml_norm(ctx, x, eps), w), b)


def group_norm(ctx, x, n_groups: int, w, b, eps: float):
    """GroupNorm of a conv activation x [T, C] over (time, channels of a group), affine per channel."""
    T, C = x.ne[0], x.ne[1]
    if C % n_groups:
        raise ValueError(f"group_norm: {C} channels do not split into {n_groups} groups")
    # ggml normalises over ne0 * ne1 * (ne2 / n_groups): put channels on ne2.
    cur = lib.ggml_group_norm(ctx, lib.ggml_reshape_3d(ctx, lib.ggml_cont(ctx, x), T, 1, C), n_groups, eps)
    cur = lib.ggml_reshape_2d(ctx, cur, T, C)
    cur = lib.ggml_mul(ctx, cur, lib.ggml_reshape_2d(ctx, w, 1, C))
    return add_bias(ctx, cur, b, axis=1)


def transpose(ctx, x):
    """x [A, B] -> [B, A], contiguous (a conv activation [T, C] <-> a transformer one [C, T])."""
    return lib.ggml_cont(ctx, lib.ggml_transpose(ctx, x))


def gelu(ctx, x, exact: bool = True, cpu: bool = False):
    """GELU: the erf form (PyTorch's default) unless `exact` is False (tanh approximation). `cpu` (the graph runs on
    the CPU backend): the erf form of a contiguous 2-D F32 x as one custom node of the package's C kernel (csrc/ops.c
    omnivoice_gelu_erf: ggml's operations with a vector erff) where the build has it."""
    kernel = getattr(ops, "omnivoice_gelu_erf", None)  # None without the package's kernels, or an older build
    if exact and cpu and kernel is not None and x.type == types.F32 and x.ne[2] == x.ne[3] == 1 \
            and lib.ggml_is_contiguous(x):
        return custom_node(ctx, kernel, x.ne[0], x.ne[1], [x])
    return lib.ggml_gelu_erf(ctx, x) if exact else lib.ggml_gelu(ctx, x)


def swiglu(ctx, x, w_gate, w_up, w_down, product=lib.ggml_mul_mat):
    """SwiGLU feed-forward: down(silu(gate x) * up x); `product(ctx, w, x)` is the matrix product."""
    return product(ctx, w_down, lib.ggml_swiglu_split(ctx, product(ctx, w_gate, x), product(ctx, w_up, x)))


def embedding(ctx, table, ids):
    """Rows of `table` [C, N] picked by int32 `ids` [T] -> [C, T]."""
    return lib.ggml_get_rows(ctx, table, ids)


def _pool_max(ctx, x, k: int):
    """Max over consecutive groups of k along ne0 of x [V, N] -> [V / k, N]."""
    return lib.ggml_pool_2d(ctx, x, lib.GGML_OP_POOL_MAX, k, 1, k, 1, 0, 0)


def row_max(ctx, x, cpu: bool = False):
    """Max over ne0 of x [V, N] -> [1, N], exact (ggml has no max reduction; every backend has POOL_2D).

    Done in two max pools over a factorisation V = a * b where V has one: GPU pool kernels run a thread per
    output, so one pool spanning the row loops V times in each of only N threads (a quarter of an LM step at
    V = 1025 on a GPU); two pools of 25 and 41 keep every thread short. `cpu` (the graph runs on the CPU
    backend, x F32 with contiguous rows): one node of the package's C kernel (csrc/ops.c omnivoice_row_max) on
    every thread, where ggml's CPU POOL_2D runs on one; the same maxima (a row with a NaN gives NaN).
    """
    V, N = x.ne[0], x.ne[1]
    if cpu and ops is not None and x.type == types.F32 and x.nb[0] == 4 and x.ne[2] == 1 and x.ne[3] == 1:
        return custom_node(ctx, ops.omnivoice_row_max, 1, N, [x])
    a = max((d for d in range(2, math.isqrt(V) + 1) if V % d == 0), default=None)
    cur = _pool_max(ctx, _pool_max(ctx, x, a), V // a) if a else _pool_max(ctx, x, V)
    return lib.ggml_reshape_2d(ctx, cur, 1, N)
