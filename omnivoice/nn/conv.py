"""Convolutions over time and the Snake activation.

Two activation layouts: [T, C] (time contiguous, ggml ne order; `conv1d`, `conv_transpose1d`: im2col + GEMM,
what HuBERT and the semantic encoder use) and channels-last [C, T] (`conv1d_cl`, `conv_transpose1d_cl`: the DAC
codec). In channels-last a kernel-1 conv is one product on the activation itself, a kernel-K conv one product on
K shifted views of it copied side by side (plain row copies, where im2col gathers scalars across channel rows,
and its threads share cache lines; with one output channel, each tap's product and shifted views of it added),
and a transposed conv one product plus one add of two views; with Snake as one CPU node (`snake(cpu=True)`) the
decoder's graph takes a fraction of the [T, C] layout's time on the CPU (tools/op_profile.py decode). On the CPU
the codec's loader packs the DAC's weights for the FMA
kernel (`fma.PackedConv`): each conv, transposed or not, is then one node that reads x where it lies.
"""

from __future__ import annotations

import logging

import numpy as np

from ..ggml import callback_error, ffi, lib, ops, types
from . import fma
from .basic import add_bias, custom_node, kept


def conv1d(ctx, x, w, b=None, stride: int = 1, padding: int = 0, dilation: int = 1, groups: int = 1):
    """PyTorch Conv1d: x [T, IC], w [K, IC/groups, OC] (torch (OC, IC/groups, K)) -> [T_out, OC].

    im2col runs in F32 (ggml_conv_1d would round the columns to F16, which the codec cannot afford).
    Groups ride on im2col's batch axis: x [T, IC/g, g] against per-group kernels [K * IC/g, OC/g, g].
    """
    T, IC = x.ne[0], x.ne[1]
    K, ICg, OC = w.ne[0], w.ne[1], w.ne[2]
    if ICg * groups != IC or OC % groups:
        raise ValueError(f"conv1d: weight {K}x{ICg}x{OC} does not fit {IC} input channels in {groups} groups")
    xg = lib.ggml_reshape_3d(ctx, lib.ggml_cont(ctx, x), T, ICg, groups)          # [T, IC/g, g]
    cols = lib.ggml_im2col(ctx, w, xg, stride, 0, padding, 0, dilation, 0, False, types.F32)  # [K*IC/g, T_out, g]
    wg = lib.ggml_reshape_3d(ctx, w, K * ICg, OC // groups, groups)               # [K*IC/g, OC/g, g]
    y = lib.ggml_mul_mat(ctx, cols, wg)                                           # [T_out, OC/g, g]
    y = lib.ggml_reshape_2d(ctx, y, y.ne[0], OC)                                  # [T_out, OC]
    return add_bias(ctx, y, b, axis=1)


def conv_transpose1d(ctx, x, w, b, stride: int, padding: int, output_padding: int, out_channels: int):
    """PyTorch ConvTranspose1d as a GEMM and ggml_col2im_1d: x [T, IC] -> [stride*(T-1) - 2p + K + op, OC].

    `w` is the stored weight [IC, K*OC], k fastest (omnivoice.gguf.layouts.conv_transpose_weight). col2im runs uncropped and the output is the
    window [p, p + T_out) of the full signal: for odd strides PyTorch's output_padding samples hold real
    overlap-added values, so cropping inside col2im and padding zeros afterwards would be wrong.
    """
    T, IC = x.ne[0], x.ne[1]
    OC = out_channels
    K = w.ne[1] // OC
    if w.ne[0] != IC or K * OC != w.ne[1]:
        raise ValueError(f"conv_transpose1d: weight {w.ne[0]}x{w.ne[1]} does not fit IC={IC}, OC={OC}")
    if not 0 <= output_padding <= padding:
        raise ValueError(f"conv_transpose1d: output_padding {output_padding} must lie in [0, padding={padding}]")
    xt = lib.ggml_cont(ctx, lib.ggml_transpose(ctx, x))              # [IC, T]
    cols = lib.ggml_mul_mat(ctx, w, xt)                              # [K*OC, T]
    full = lib.ggml_col2im_1d(ctx, cols, stride, OC, 0)              # [(T-1)*s + K, OC]
    t_out = (T - 1) * stride - 2 * padding + K + output_padding
    y = lib.ggml_view_2d(ctx, full, t_out, OC, full.nb[1], padding * full.nb[0])  # [T_out, OC]
    return add_bias(ctx, y, b, axis=1) if b is not None else lib.ggml_cont(ctx, y)


def conv_weight_cl(w: np.ndarray) -> np.ndarray:
    """A Conv1d weight for `conv1d_cl`: torch (OC, IC, K) -> (OC, K, IC), i.e. ggml [IC, K, OC] (tap-major rows)."""
    return np.ascontiguousarray(np.asarray(w).transpose(0, 2, 1))


def conv_transpose_weight_cl(stored: np.ndarray, out_channels: int) -> np.ndarray:
    """A ConvTranspose1d weight for `conv_transpose1d_cl` from the stored layout (omnivoice.gguf.layouts):
    (OC*K, IC) with row oc*K + k -> (K*OC, IC) with row k*OC + oc (ggml [IC, K*OC], oc fastest)."""
    rows, ic = stored.shape
    k = rows // out_channels
    return np.ascontiguousarray(np.asarray(stored).reshape(out_channels, k, ic).transpose(1, 0, 2).reshape(rows, ic))


def conv1d_cl(ctx, x, w, b=None, stride: int = 1, padding: int = 0, dilation: int = 1, cpu: bool = False):
    """PyTorch Conv1d on channels-last activations: x [IC, T], w [IC, K, OC] (`conv_weight_cl`) -> [OC, T_out].

    The columns of output t are the K input columns t*stride + k*dilation - padding (zeros outside x), IC
    contiguous values each, copied side by side into [IC*K, T_out] (kernel 1, stride 1, no padding needs no
    copy at all); then one product does every tap at once. `cpu`: the graph runs on the CPU backend, where one
    custom node of the package's C kernels writes the columns (without them: _tap_columns). Elsewhere one
    IM2COL node writes them (`_im2col_columns`). A weight packed for the FMA kernel (`fma.PackedConv`, the CPU's
    codec) makes the whole conv, bias included, one node that reads its columns from x where they lie.
    """
    IC, T = x.ne[0], x.ne[1]
    K, OC = w.ne[1], w.ne[2]
    if w.ne[0] != IC:
        raise ValueError(f"conv1d_cl: weight {w.ne[0]}x{K}x{OC} does not fit {IC} input channels")
    t_out = (T + 2 * padding - dilation * (K - 1) - 1) // stride + 1
    if t_out < 1:
        raise ValueError(f"conv1d_cl: {T} samples are too few for kernel {K}, dilation {dilation}")
    if isinstance(w, fma.PackedConv):
        return fma.conv(ctx, _rows(ctx, x), w.packed, K, b, stride=stride, padding=padding, dilation=dilation)
    if OC == 1 and K > 1 and stride == 1:
        return add_bias(ctx, _one_output_conv(ctx, x, w, t_out, padding, dilation, cpu), b)  # [1, T_out]
    w2 = lib.ggml_reshape_2d(ctx, w, IC * K, OC)                                     # [IC*K, OC]
    if K == 1 and stride == 1 and padding == 0:
        return add_bias(ctx, lib.ggml_mul_mat(ctx, w2, x), b)                        # [OC, T]
    if cpu and ops is not None and x.type == types.F32 and x.nb[0] == 4:
        # the package's C kernel (csrc/ops.c) writes every column row once, zeros included
        cols = custom_node(ctx, ops.omnivoice_conv_columns, IC * K, t_out, [x],
                           kept("int64_t[4]", K, stride, dilation, padding))                # [IC*K, T_out]
    elif cpu:
        cols = _tap_columns(ctx, x, K, t_out, stride, padding, dilation)                   # [IC*K, T_out]
    else:
        cols = _im2col_columns(ctx, x, w, stride, padding, dilation)                        # [IC*K, T_out]
    return add_bias(ctx, lib.ggml_mul_mat(ctx, w2, cols), b)                         # [OC, T_out]


def _one_output_conv(ctx, x, w, t_out: int, padding: int, dilation: int, cpu: bool):
    """conv1d_cl with one output channel and stride 1, bias aside: each tap's product first, y [K, T] (row k
    = w_k . x_t), then out[t] = sum over k of y[k, t + k*dilation - padding] (zeros outside x): K strided views
    of y padded, added in tap order. The columns [IC*K, T_out] are never written: for the DAC's last conv (32
    channels, 7 taps, 480 000 samples for 20 s) they were 430 MB written by IM2COL and read back by a
    matrix-vector kernel, the slowest kernel of a GPU's decode (tools/request_profile.py, BENCHMARKS.md)."""
    IC, K = x.ne[0], w.ne[1]
    y = lib.ggml_mul_mat(ctx, lib.ggml_reshape_2d(ctx, w, IC, K), x)                 # [K, T]
    if padding:
        y = pad_columns(ctx, y, padding, padding, cpu)                                # [K, T + 2p]
    es = y.nb[0]

    def tap(k):  # y[k, t + k*dilation] of the padded y, t < T_out: [1, T_out]
        return lib.ggml_view_2d(ctx, y, 1, t_out, K * es, (k + k * dilation * K) * es)

    out = tap(0)
    for k in range(1, K):
        out = lib.ggml_add(ctx, out, tap(k))
    return out


def _rows(ctx, x):
    """x with contiguous rows (what the FMA kernel reads)."""
    return x if x.nb[0] == 4 and x.nb[1] == 4 * x.ne[0] else lib.ggml_cont(ctx, x)


def _im2col_columns(ctx, x, w, stride: int, padding: int, dilation: int):
    """conv1d_cl's columns [IC*K, T_out] as one IM2COL node (GPU backends).

    x [IC, T] is read as a one-channel image IC wide and T high, and w [IC, K, OC] gives the kernel's shape
    [IC, K, 1, OC] (ggml reads only its sizes): a kernel as wide as the image has one output column, so each of
    the T_out rows is the K input rows t*stride + k*dilation - padding side by side (zeros outside x), tap
    k's IC values at k*IC: the tap-major rows that w's rows match. On GPUs this replaced, per conv, a REPEAT of
    zeros over the whole buffer and one copy per tap, which had been over a third of a decode's GPU time
    (tools/request_profile.py)."""
    IC, T = x.ne[0], x.ne[1]
    K, OC = w.ne[1], w.ne[2]
    image = lib.ggml_reshape_4d(ctx, lib.ggml_cont(ctx, x) if not lib.ggml_is_contiguous(x) else x, IC, T, 1, 1)
    kernel = lib.ggml_reshape_4d(ctx, w, IC, K, 1, OC)
    cols = lib.ggml_im2col(ctx, kernel, image, 1, stride, 0, padding, 1, dilation, True, types.F32)  # [IC*K, 1, T_out]
    return lib.ggml_reshape_2d(ctx, cols, cols.ne[0], cols.ne[2])


def _tap_columns(ctx, x, K: int, t_out: int, stride: int, padding: int, dilation: int):
    """conv1d_cl's columns [IC*K, T_out] from ggml ops on the CPU backend (builds without the package's
    kernels): one SET per tap into an empty node, the padding's columns zeroed."""
    IC, T = x.ne[0], x.ne[1]
    # ggml sizes a view as if it were contiguous, so the overlapping [IC*K, T_out] view of x cannot be made:
    # each tap's columns are copied into its rows of `cols`, and those in the padding are zeros (no padded copy
    # of x: ggml's CPU pad is a scalar loop). `cols` must be a node, not a leaf:
    # the allocator keeps every leaf for the whole graph (the decode's buffer grew from 132 MiB to 971).
    spans = []
    for k in range(K):
        off = k * dilation - padding                 # input column of tap k for output 0
        t0 = min(t_out, max(0, -(off // stride)))    # outputs [t0, t1) read tap k inside x
        t1 = max(t0, min(t_out, -((off - T) // stride)))
        spans.append((k, off, t0, t1))
    head = max(t0 for _, _, t0, _ in spans)          # the first and last columns hold some tap's zeros
    tail = t_out - min(t1 for _, _, _, t1 in spans)
    cols = lib.ggml_custom_4d(ctx, x.type, IC * K, t_out, 1, 1, ffi.NULL, 0, _nothing, 1, ffi.NULL)
    if head or tail:
        zero = lib.ggml_scale(ctx, lib.ggml_view_2d(ctx, x, IC, 1, x.nb[1], 0), 0.0)   # [IC, 1]
        zero = lib.ggml_repeat(ctx, zero, lib.ggml_new_tensor_2d(ctx, x.type, IC * K, max(head, tail)))
        for z0, n in ((0, head), (t_out - tail, tail)):
            if n:
                cols = lib.ggml_set_2d_inplace(ctx, cols, lib.ggml_view_2d(ctx, zero, IC * K, n, zero.nb[1], 0),
                                               cols.nb[1], z0 * cols.nb[1])
    for k, off, t0, t1 in spans:
        if t1 > t0:
            tap = lib.ggml_view_2d(ctx, x, IC, t1 - t0, stride * x.nb[1], (t0 * stride + off) * x.nb[1])
            cols = lib.ggml_set_2d_inplace(ctx, cols, tap, cols.nb[1], k * IC * x.nb[0] + t0 * cols.nb[1])
    return cols


@ffi.callback("void(struct ggml_tensor *, int, int, void *)", onerror=callback_error)
def _nothing(dst, ith, nth, _user):
    """ggml custom op that leaves its output as allocated (it is overwritten whole by the nodes after it)."""


def pad_columns(ctx, x, left: int, right: int, cpu: bool = False):
    """x [C, T] with `left` and `right` zero columns added: [C, left + T + right].

    On GPUs a contiguous x is padded as one flat row of C*T values (the same bytes): CUDA's PAD kernel puts ne1
    in its grid's y dimension, which holds at most 65535, and the DAC's last transposed conv pads 80 000 columns
    for 20 s of audio ("invalid argument", found on the H200). On the CPU (`cpu`) a contiguous F32 x is padded
    by the package's node (csrc/ops.c omnivoice_pad_cols: memset and memcpy on every thread); ggml's CPU PAD goes
    value by value, and on the flat row on one thread (tools/op_profile.py decode shows the pads)."""
    C, T = x.ne[0], x.ne[1]
    flat = lib.ggml_is_contiguous(x) and lib.ggml_nelements(x) == C * T
    if cpu and flat and ops is not None and x.type == types.F32:
        return custom_node(ctx, ops.omnivoice_pad_cols, C, left + T + right, [x], kept("int64_t[1]", left))
    if not cpu and flat:
        flat = lib.ggml_pad_ext(ctx, lib.ggml_reshape_1d(ctx, x, C * T), left * C, right * C, 0, 0, 0, 0, 0, 0)
        return lib.ggml_reshape_2d(ctx, flat, C, left + T + right)
    return lib.ggml_pad_ext(ctx, x, 0, 0, left, right, 0, 0, 0, 0)


def conv_transpose1d_cl(ctx, x, w, b, stride: int, padding: int, output_padding: int, out_channels: int,
                        cpu: bool = False):
    """PyTorch ConvTranspose1d on channels-last activations: x [IC, T] -> [OC, (T-1)*stride - 2p + K + op].

    `w` is [IC, K*OC] with oc fastest (`conv_transpose_weight_cl`), K a multiple m of the stride. One product
    gives every tap's contribution z [K*OC, T + 2(m-1)] (x padded by m - 1 zero columns each side); output
    sample t*stride + r is the sum over j < m of tap j*stride + r of column t - j, i.e. m strided views of z
    added, which come out already interleaved as [OC, stride, T + m - 1] = [OC, full length]. The result is the
    window [p, p + T_out) of that full signal (PyTorch's output_padding samples hold real overlap-added values).
    `cpu`: the graph runs on the CPU backend (see pad_columns).
    """
    IC, T = x.ne[0], x.ne[1]
    OC = out_channels
    K = w.ne[1] // OC
    if w.ne[0] != IC or K * OC != w.ne[1]:
        raise ValueError(f"conv_transpose1d_cl: weight {w.ne[0]}x{w.ne[1]} does not fit IC={IC}, OC={OC}")
    if K % stride:
        raise ValueError(f"conv_transpose1d_cl: kernel {K} is not a multiple of the stride {stride}")
    if not 0 <= output_padding <= padding:
        raise ValueError(f"conv_transpose1d_cl: output_padding {output_padding} must lie in [0, padding={padding}]")
    m = K // stride
    if isinstance(w, fma.PackedConv):  # the padding's zero columns are the kernel's, not a copy
        z = fma.conv(ctx, _rows(ctx, x), w.packed, 1, padding=m - 1)                 # [K*OC, T + 2(m-1)]
    else:
        if m > 1:
            x = pad_columns(ctx, x, m - 1, m - 1, cpu)                              # [IC, T + 2(m-1)]
        z = lib.ggml_mul_mat(ctx, w, x)                                              # [K*OC, T + 2(m-1)]
    es = z.nb[0]
    n = T + m - 1

    def tap_rows(j):  # z[j*stride*OC + r*OC + oc, t + m - 1 - j] as [OC, stride, n]
        return lib.ggml_view_3d(ctx, z, OC, stride, n, OC * es, z.nb[1], (j * stride * OC + (m - 1 - j) * K * OC) * es)

    full = tap_rows(0)
    for j in range(1, m):
        full = lib.ggml_add(ctx, full, tap_rows(j))                                  # [OC, stride, n]
    if m == 1:
        full = lib.ggml_cont(ctx, full)
    full = lib.ggml_reshape_2d(ctx, full, OC, stride * n)                            # [OC, (T-1)*s + K]
    t_out = (T - 1) * stride - 2 * padding + K + output_padding
    y = lib.ggml_view_2d(ctx, full, OC, t_out, full.nb[1], padding * full.nb[1])     # [OC, T_out]
    return add_bias(ctx, y, b) if b is not None else lib.ggml_cont(ctx, y)


def snake(ctx, x, alpha, inv_beta, cpu: bool = False):
    """Snake x + sin(alpha x)^2 / (alpha + 1e-9).

    x [T, C] with alpha and inv_beta F32 [1, C], or channels-last x [C, T] with them [C] (inv_beta precomputed
    at load time). By default the five-node chain that GPU backends fuse. `cpu` (channels-last only; the graph
    must run on the CPU backend) computes it as one custom node instead: ggml's CPU sin is a scalar sinf loop
    (over a third of a decode). The node runs the package's C kernel (omnivoice/csrc/ops.c: libmvec's vector
    sinf, an order of magnitude faster, no Python on ggml's threads) where the build has it, else the same steps
    in numpy over cache-sized blocks (vectorized too, but the GIL between blocks). Same
    operations in the same order: float32 x*alpha, sin, square, *inv_beta, +x.
    """
    if cpu and alpha.ne[0] == x.ne[0] == lib.ggml_nelements(alpha) == lib.ggml_nelements(inv_beta):
        rows = ops.omnivoice_snake_rows if ops is not None else _snake_rows
        return lib.ggml_map_custom3(ctx, lib.ggml_cont(ctx, x) if not lib.ggml_is_contiguous(x) else x,
                                    alpha, inv_beta, rows, -1, ffi.NULL)
    cur = lib.ggml_mul(ctx, x, alpha)
    cur = lib.ggml_sin(ctx, cur)
    cur = lib.ggml_sqr(ctx, cur)
    cur = lib.ggml_mul(ctx, cur, inv_beta)
    return lib.ggml_add(ctx, cur, x)


_BLOCK = 32768  # values per numpy step (128 KiB: stays in L2 through the five operations; 8192 took 1.6x as long)
log = logging.getLogger(__name__)


def _f32(t, offset: int, count: int) -> np.ndarray:
    """`count` float32 values of a CPU tensor's data from element `offset`, as a writable numpy view."""
    return np.frombuffer(ffi.buffer(ffi.cast("char *", t.data) + 4 * offset, 4 * count), dtype=np.float32)


@ffi.callback("void(struct ggml_tensor *, const struct ggml_tensor *, const struct ggml_tensor *, "
              "const struct ggml_tensor *, int, int, void *)", onerror=callback_error)
def _snake_rows(dst, x, alpha, inv_beta, ith, nth, _user):
    """ggml custom op: thread `ith` of `nth` computes its share of the rows of Snake(x) (x [C, T] contiguous); the
    fallback of omnivoice_snake_rows (ops.c) for builds without the package's kernels."""
    try:
        C = x.ne[0]
        rows = lib.ggml_nelements(x) // C
        r0, r1 = rows * ith // nth, rows * (ith + 1) // nth
        a, ib = _f32(alpha, 0, C), _f32(inv_beta, 0, C)
        step = max(1, _BLOCK // C)
        for r in range(r0, r1, step):
            n = min(step, r1 - r)
            xs, ys = _f32(x, r * C, n * C).reshape(n, C), _f32(dst, r * C, n * C).reshape(n, C)
            np.multiply(xs, a, out=ys)
            np.sin(ys, out=ys)
            np.multiply(ys, ys, out=ys)
            np.multiply(ys, ib, out=ys)
            np.add(ys, xs, out=ys)
    except BaseException as e:  # an exception cannot cross into C: poison this share of the output, say why
        if isinstance(e, Exception):
            log.exception("snake custom op failed")
        try:
            _f32(dst, r0 * C, (r1 - r0) * C)[:] = np.nan
        except Exception:
            pass
        if not isinstance(e, Exception):
            raise  # a signal's: callback_error keeps it for the graph's caller
