"""Residual vector quantiser of the Higgs Audio v2 codec: codes <-> the 1024-wide latent, as ggml graphs.

Per codebook k (GGUF names `quantizer.quantizers.{k}.*`, ggml shapes):
    codebook.embed      [D, N]      N = 1024 entries of dimension D (64; 8 on the tiny preset)
    project_in          [H, D] + b  latent H (1024) -> D, encode only
    project_out         [D, H] + b  D -> latent H
and two tensors derived at load time (see `derived_tensors`):
    codebook.embed_sqnorm  [N]      |e_n|^2, which the reference recomputes every call
    codebook.rank          [N]      N - n, used to break argmax ties towards the lowest index

Decode: latent = sum_k project_out_k(embed_k[codes_k]), summed in codebook order like the reference.
Encode: residual = latent; per k: code_k = nearest entry to project_in_k(residual); residual -= its decode.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import nn
from ..ggml import lib


def prefix(k: int) -> str:
    return f"quantizer.quantizers.{k}."


def count_quantizers(names) -> int:
    """How many codebooks a tensor-name list holds (they must be numbered 0..n-1)."""
    n = 0
    names = set(names)
    while prefix(n) + "codebook.embed" in names:
        n += 1
    return n


def _sqnorm(embed: np.ndarray) -> np.ndarray:
    """Row squared norms of embed (N, D), accumulated over D one column at a time in float32: the reference
    reduces `embed.t().pow(2).sum(0)` along a strided axis, which torch does sequentially."""
    acc = np.zeros(embed.shape[0], np.float32)
    for d in range(embed.shape[1]):
        acc += np.square(embed[:, d])
    return acc


def derived_tensors(n_q: int) -> dict[str, Callable]:
    """Load-time tensors: each codebook's squared norms (float32, as the reference sums them) and tie ranks."""
    out: dict[str, Callable] = {}
    for k in range(n_q):
        embed = prefix(k) + "codebook.embed"
        out[prefix(k) + "codebook.embed_sqnorm"] = lambda get, e=embed: _sqnorm(get(e))
        out[prefix(k) + "codebook.rank"] = (
            lambda get, e=embed: np.arange(get(e).shape[0], 0, -1, dtype=np.float32))
    return out


def decode(ctx, w, codes, n_q: int):
    """codes int32 [T, n_q] (numpy [n_q, T]) -> latent [H, T]."""
    T = codes.ne[0]
    out = None
    for k in range(n_q):
        p = prefix(k)
        ids = lib.ggml_view_1d(ctx, codes, T, k * codes.nb[1])                      # [T] i32
        e = nn.embedding(ctx, w[p + "codebook.embed"], ids)                         # [D, T]
        q = nn.linear(ctx, e, w[p + "project_out.weight"], w[p + "project_out.bias"])  # [H, T]
        out = q if out is None else lib.ggml_add(ctx, out, q)
    return out


def nearest(ctx, x, embed, sqnorm, rank):
    """Index of the nearest codebook entry for each column of x [D, T] -> int32 [T], as the reference picks it.

    The reference scores dist = -(|x|^2 - 2 x.e + |e|^2) and takes the first maximum. The same expression is
    evaluated here in the same order (negations and the factor 2 are exact, so the rounding steps match), and
    the tie rule is made explicit: ggml's argmax returns the last maximum on the CPU and any of them on CUDA,
    so the maxima are marked and weighted by rank N - n, whose argmax is unique and the lowest index.
    """
    xe2 = lib.ggml_scale(ctx, lib.ggml_mul_mat(ctx, embed, x), 2.0)                 # [N, T]  2 x.e
    x2 = lib.ggml_sum_rows(ctx, lib.ggml_sqr(ctx, x))                               # [1, T]  |x|^2
    # -(|x|^2 - 2x.e + |e|^2) == (2x.e - |x|^2) - |e|^2 exactly: fl(a - b) = -fl(b - a).
    dist = lib.ggml_sub(ctx, lib.ggml_sub(ctx, xe2, x2), sqnorm)                     # [N, T]
    # dist - max is exactly 0 at the maxima and negative elsewhere (distinct floats never subtract to 0).
    gap = lib.ggml_sub(ctx, dist, nn.row_max(ctx, dist))                              # [N, T] <= 0
    is_max = lib.ggml_scale_bias(ctx, lib.ggml_step(ctx, lib.ggml_neg(ctx, gap)), -1.0, 1.0)  # 1 at maxima
    return lib.ggml_argmax(ctx, lib.ggml_mul(ctx, is_max, rank))                     # [T] i32


def encode(ctx, w, latent, n_q: int) -> list:
    """latent [H, T] -> one int32 [T] code tensor per codebook."""
    residual = latent
    codes = []
    for k in range(n_q):
        p = prefix(k)
        e = nn.linear(ctx, residual, w[p + "project_in.weight"], w[p + "project_in.bias"])   # [D, T]
        code = nearest(ctx, e, w[p + "codebook.embed"], w[p + "codebook.embed_sqnorm"], w[p + "codebook.rank"])
        codes.append(code)
        if k + 1 < n_q:
            q = nn.embedding(ctx, w[p + "codebook.embed"], code)                                # [D, T]
            q = nn.linear(ctx, q, w[p + "project_out.weight"], w[p + "project_out.bias"])       # [H, T]
            residual = lib.ggml_sub(ctx, residual, q)
    return codes
