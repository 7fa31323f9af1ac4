"""Multi-head attention with an additive mask, and NEOX rotary embedding."""

from __future__ import annotations

from ..ggml import consts, ffi, lib, types


def rope_neox(ctx, x, pos, theta: float):
    """Rotary embedding, NEOX layout (first and second half of each head pair up): x [D, H, T], pos int32 [T]."""
    n_dims = x.ne[0]
    return lib.ggml_rope_ext(ctx, x, pos, ffi.NULL, n_dims, consts["GGML_ROPE_TYPE_NEOX"], 0, theta, 1.0, 0.0, 1.0, 0.0, 0.0)


def attention(ctx, q, k, v, mask, scale: float, flash: bool, kv_type: int | None = None,
              contiguous_qk: bool = False):
    """softmax(scale * q k^T + mask) v for every head; q [D, Hq, T], k and v [D, Hkv, S] -> [D * Hq, T].

    `mask` is [S, T] and additive (0 to attend, -inf to block), or None; F16 for the flash path, F32 or F16
    otherwise. Grouped-query attention: query head h reads key/value head h // (Hq / Hkv), as ggml broadcasts.
    The flash path stores K and V as `kv_type` (default F16, what GPU kernels take); the CPU kernel also takes
    F32 and then accumulates in F32 (with F16 it accumulates V in F16: 1e-3 error).

    `contiguous_qk` copies the permuted Q and K of the plain path into contiguous tensors before their product:
    ggml-vulkan converts a matrix-product operand that is not contiguous in its first two dimensions to F16
    before multiplying (ggml_vk_mul_mat_q_f16, even with its float32 shaders), 3e-4 relative error on the
    scores; Runtime.products_need_contiguous says where to ask for it.
    """
    D, Hq, T = q.ne[0], q.ne[1], q.ne[2]
    mask = ffi.NULL if mask is None else mask
    if flash:
        kv_type = types.F16 if kv_type is None else kv_type
        if k.type != kv_type:
            # Cast before the permute: a contiguous cast is one vectorised pass, a strided one a scalar copy.
            k = lib.ggml_cast(ctx, k, kv_type)
            v = lib.ggml_cast(ctx, v, kv_type)
        q, k, v = (lib.ggml_permute(ctx, t, 0, 2, 1, 3) for t in (q, k, v))  # [D, T, Hq], [D, S, Hkv] x2
        out = lib.ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0, 0.0)  # [D, Hq, T]
        lib.ggml_prec_set_acc(out, lib.GGML_PREC_F32)
        return lib.ggml_reshape_2d(ctx, out, D * Hq, T)
    q = lib.ggml_permute(ctx, q, 0, 2, 1, 3)  # [D, T, Hq]
    k = lib.ggml_permute(ctx, k, 0, 2, 1, 3)  # [D, S, Hkv]
    if contiguous_qk:
        q, k = lib.ggml_cont(ctx, q), lib.ggml_cont(ctx, k)
    kq = lib.ggml_mul_mat(ctx, k, q)  # [S, T, Hq]
    lib.ggml_prec_set_acc(kq, lib.GGML_PREC_F32)
    kq = lib.ggml_soft_max_ext(ctx, kq, mask, scale, 0.0)
    vt = lib.ggml_cont(ctx, lib.ggml_permute(ctx, v, 1, 2, 0, 3))  # [S, D, Hkv]
    out = lib.ggml_mul_mat(ctx, vt, kq)  # [D, T, Hq]
    out = lib.ggml_cont(ctx, lib.ggml_permute(ctx, out, 0, 2, 1, 3))  # [D, Hq, T]
    return lib.ggml_reshape_2d(ctx, out, D * Hq, T)
