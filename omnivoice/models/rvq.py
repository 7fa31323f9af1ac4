"""Residual vector quantiser of the Higgs Audio v2 codec: codes <-> the 1024-wide latent, as ggml graphs.

Per codebook k (a `Codebook` record; GGUF names `quantizer.quantizers.{k}.*`, ggml shapes):
    embed           [D, N]      N = 1024 entries of dimension D (64; 8 on the tiny preset)
    project_in      [H, D] + b  latent H (1024) -> D, encode only
    project_out     [D, H] + b  D -> latent H
and two tensors the loader makes for encoding (`embed_sqnorm`, `rank`):
    embed_sqnorm    [N]         |e_n|^2, which the reference recomputes every call
    rank            [N]         N - n, used to break argmax ties towards the lowest index

Decode: latent = sum_k project_out_k(embed_k[codes_k]), summed in codebook order like the reference.
Encode: residual = latent; per k: code_k = nearest entry to project_in_k(residual); residual -= its decode.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import nn
from ..ggml import Tensor, lib, named
from .common import Linear


@dataclass(frozen=True)
class Codebook:
    embed: Tensor                       # [D, N]
    project_out: Linear                 # [D, H] + [H]
    project_in: Linear | None = None    # [H, D] + [D]; the encode-only parts are None when loaded to decode
    embed_sqnorm: Tensor | None = None  # [N]
    rank: Tensor | None = None          # [N]


def embed_sqnorm(embed: np.ndarray) -> np.ndarray:
    """Row squared norms of embed (N, D), accumulated over D one column at a time in float32: the reference
    reduces `embed.t().pow(2).sum(0)` along a strided axis, which torch does sequentially."""
    acc = np.zeros(embed.shape[0], np.float32)
    for d in range(embed.shape[1]):
        acc += np.square(embed[:, d])
    return acc


def tie_rank(n: int) -> np.ndarray:
    """N - n for each entry n, float32: its argmax among equal maxima is the lowest index."""
    return np.arange(n, 0, -1, dtype=np.float32)


def decode(ctx, codebooks: tuple[Codebook, ...], codes):
    """codes int32 [T, n_q] (numpy [n_q, T]) -> latent [H, T]."""
    T = codes.ne[0]
    out = None
    for k, cb in enumerate(codebooks):
        ids = lib.ggml_view_1d(ctx, codes, T, k * codes.nb[1])                      # [T] i32
        e = nn.embedding(ctx, cb.embed, ids)                                        # [D, T]
        q = nn.linear(ctx, e, cb.project_out.weight, cb.project_out.bias)           # [H, T]
        out = q if out is None else lib.ggml_add(ctx, out, q)
    return named(out, "rvq_latent")


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


def encode(ctx, codebooks: tuple[Codebook, ...], latent) -> list:
    """latent [H, T] -> one int32 [T] code tensor per codebook."""
    residual = latent
    codes = []
    for k, cb in enumerate(codebooks):
        e = named(nn.linear(ctx, residual, cb.project_in.weight, cb.project_in.bias), "rvq_proj_in", k)  # [D, T]
        code = named(nearest(ctx, e, cb.embed, cb.embed_sqnorm, cb.rank), "rvq_code", k)
        codes.append(code)
        if k + 1 < len(codebooks):
            q = nn.embedding(ctx, cb.embed, code)                                               # [D, T]
            q = nn.linear(ctx, q, cb.project_out.weight, cb.project_out.bias)                   # [H, T]
            residual = lib.ggml_sub(ctx, residual, q)
    return codes
