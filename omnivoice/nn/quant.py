"""Nearest-codebook search for residual vector quantisation."""

from __future__ import annotations

from ..ggml import lib


def nearest_code(ctx, x, codebook, codebook_sqnorm):
    """Index of the nearest codebook row for each column: x [D, T], codebook [D, N], sqnorm [N] -> int32 [T].

    argmin |x - e|^2 = argmax (2 x.e - |e|^2): |x|^2 is the same for every candidate, so it is dropped.
    """
    scores = lib.ggml_mul_mat(ctx, codebook, x)                       # [N, T]
    scores = lib.ggml_sub(ctx, lib.ggml_scale(ctx, scores, 2.0), codebook_sqnorm)
    return lib.ggml_argmax(ctx, scores)                               # [T]
