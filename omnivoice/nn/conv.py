"""Convolutions over time and the Snake activation; activations are [T, C] (time contiguous)."""

from __future__ import annotations

from ..ggml import lib, types
from .basic import add_bias


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


def snake(ctx, x, alpha, inv_beta):
    """Snake x + sin(alpha x)^2 / (alpha + 1e-9) as the five-node chain that GPU backends fuse.

    x [T, C] contiguous; alpha and inv_beta F32 [1, C] (inv_beta precomputed at load time).
    """
    cur = lib.ggml_mul(ctx, x, alpha)
    cur = lib.ggml_sin(ctx, cur)
    cur = lib.ggml_sqr(ctx, cur)
    cur = lib.ggml_mul(ctx, cur, inv_beta)
    return lib.ggml_add(ctx, cur, x)
