"""The RVQ graphs against a numpy transcription of transformers' HiggsAudioV2 residual VQ, random weights."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.ggml import Graph, WeightStore
from omnivoice.models import rvq
from omnivoice.models.common import Linear


def prefix(k: int) -> str:
    return f"quantizer.quantizers.{k}."


def numpy_quantize(x: np.ndarray, embed: np.ndarray) -> np.ndarray:
    """HiggsAudioV2TokenizerEuclideanCodebook.quantize: x (T, D), embed (N, D) -> first argmax of -dist."""
    dist = -((x ** 2).sum(1, keepdims=True) - 2 * x @ embed.T + (embed ** 2).sum(1)[None, :])
    return dist.argmax(axis=1)


def numpy_rvq(latent: np.ndarray, w: dict, n_q: int) -> tuple[np.ndarray, np.ndarray]:
    """latent (T, H) -> codes (n_q, T) and the decode of those codes (T, H)."""
    residual, codes, decoded = latent.astype(np.float64), [], np.zeros_like(latent, np.float64)
    for k in range(n_q):
        p = prefix(k)
        e = residual @ w[p + "project_in.weight"].T + w[p + "project_in.bias"]
        idx = numpy_quantize(e, w[p + "codebook.embed"].astype(np.float64))
        q = w[p + "codebook.embed"][idx] @ w[p + "project_out.weight"].T.astype(np.float64) + w[p + "project_out.bias"]
        residual = residual - q
        decoded = decoded + q
        codes.append(idx)
    return np.stack(codes), decoded


def random_rvq(rng, n_q=3, H=24, D=6, N=40) -> dict:
    w = {}
    for k in range(n_q):
        p = prefix(k)
        w[p + "codebook.embed"] = rng.standard_normal((N, D)).astype(np.float32)
        w[p + "project_in.weight"] = (rng.standard_normal((D, H)) / np.sqrt(H)).astype(np.float32)
        w[p + "project_in.bias"] = (0.1 * rng.standard_normal(D)).astype(np.float32)
        w[p + "project_out.weight"] = (rng.standard_normal((H, D)) / np.sqrt(D)).astype(np.float32)
        w[p + "project_out.bias"] = (0.1 * rng.standard_normal(H)).astype(np.float32)
    return w


def codebooks(runtime, w: dict, n_q: int) -> tuple[WeightStore, tuple]:
    """The weights on the runtime, with the load-time squared norms and tie ranks, as Codebook records."""
    arrays = dict(w)
    for k in range(n_q):
        embed = w[prefix(k) + "codebook.embed"]
        arrays[prefix(k) + "codebook.embed_sqnorm"] = rvq.embed_sqnorm(embed)
        arrays[prefix(k) + "codebook.rank"] = rvq.tie_rank(embed.shape[0])
    s = WeightStore.from_arrays(runtime, arrays)
    return s, tuple(rvq.Codebook(
        embed=s[prefix(k) + "codebook.embed"],
        project_out=Linear(s[prefix(k) + "project_out.weight"], s[prefix(k) + "project_out.bias"]),
        project_in=Linear(s[prefix(k) + "project_in.weight"], s[prefix(k) + "project_in.bias"]),
        embed_sqnorm=s[prefix(k) + "codebook.embed_sqnorm"], rank=s[prefix(k) + "codebook.rank"])
        for k in range(n_q))


@pytest.fixture
def rvq_graph(runtime):
    stores = []

    def run(w: dict, n_q: int, *, latent=None, codes=None):
        store, books = codebooks(runtime, w, n_q)
        stores.append(store)
        with Graph(runtime) as g:
            if latent is not None:
                x = g.input("latent", np.float32, latent.shape)                # numpy (T, H) = ggml [H, T]
                for k, c in enumerate(rvq.encode(g.ctx, books, x)):
                    g.output(f"c{k}", c)
                out = g.compute(latent=latent)
                return np.stack([out[f"c{k}"] for k in range(n_q)])
            c = g.input("codes", np.int32, codes.shape)                        # numpy (n_q, T)
            g.output("y", rvq.decode(g.ctx, books, c))
            return g.compute(codes=codes)["y"]                                 # numpy (T, H)

    run.runtime = runtime
    yield run
    for s in stores:
        s.close()


def test_rvq_encode_matches_numpy(rvq_graph, rng):
    n_q, w = 3, random_rvq(rng)
    latent = rng.standard_normal((50, 24)).astype(np.float32)
    ref_codes, _ = numpy_rvq(latent, w, n_q)
    codes = rvq_graph(w, n_q, latent=latent)
    assert codes.dtype == np.int32
    np.testing.assert_array_equal(codes, ref_codes)


def test_rvq_decode_matches_numpy(rvq_graph, rng):
    n_q, w = 3, random_rvq(rng)
    codes = rng.integers(0, 40, (n_q, 17)).astype(np.int32)
    ref = sum(w[prefix(k) + "codebook.embed"][codes[k]].astype(np.float64) @ w[prefix(k) + "project_out.weight"].T
              + w[prefix(k) + "project_out.bias"] for k in range(n_q))
    # a GPU backend multiplies F32 in TF32 (10-bit mantissa)
    bound = 3e-3 if rvq_graph.runtime.is_gpu else 1e-5
    np.testing.assert_allclose(rvq_graph(w, n_q, codes=codes), ref, rtol=bound, atol=bound)


def test_rvq_ties_go_to_the_lowest_index(rvq_graph, rng):
    """Duplicate codebook rows tie exactly; the reference (torch max) keeps the first, as must we on any backend."""
    w = random_rvq(rng, n_q=1, N=40)
    embed = w[prefix(0) + "codebook.embed"]
    dup = [(3, 17), (5, 39), (0, 22)]
    for a, b in dup:
        embed[b] = embed[a]
    # latents whose projection lands exactly on the duplicated entries
    pin, bin_ = w[prefix(0) + "project_in.weight"], w[prefix(0) + "project_in.bias"]
    targets = np.stack([embed[a] for a, _ in dup] * 4) + 0.01 * rng.standard_normal((12, embed.shape[1]))
    latent = (np.linalg.pinv(pin) @ (targets - bin_).T).T.astype(np.float32)
    codes = rvq_graph(w, 1, latent=latent)[0]
    expect = numpy_quantize(latent.astype(np.float64) @ pin.T.astype(np.float64) + bin_, embed.astype(np.float64))
    assert set(expect.tolist()) <= {a for a, _ in dup}  # the numpy reference picks the first copies
    np.testing.assert_array_equal(codes, expect)
