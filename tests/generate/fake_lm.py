"""A small deterministic stand-in for the OmniVoice LM, shared by our tests and the reference side.

Pure numpy and free of ``omnivoice`` imports: ``tools/reference/goldens.py generate`` loads this
file by path inside the reference's venv, so both sides compute the same logits from the same
weights. The weights come from a counter-based hash (splitmix64 of the element index), not from a
numpy random generator, so they are bit-identical on any numpy version.

The function depends on every token and position (a per-position embedding, a mix over time), so
unmasking one position changes the predictions elsewhere, as in the real model, and positions
never tie.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


def hash_uniform(seed: int, stream: int, shape: tuple[int, ...]) -> np.ndarray:
    """float64 values in [-1, 1) that depend only on (seed, stream, element index)."""
    n = int(np.prod(shape, dtype=np.int64))
    start = ((int(seed) % 2**24) << 40) | ((int(stream) % 2**8) << 32)
    idx = np.arange(n, dtype=_U64) + _U64(start)
    bits = _splitmix64(idx) >> _U64(11)
    return (bits.astype(np.float64) * 2.0**-53 * 2.0 - 1.0).reshape(shape)


def log_softmax_f32(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float32 (the op order of a plain implementation)."""
    x = np.asarray(x, dtype=np.float32)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class FakeGuidedLM:
    """Implements the loop's ``GuidedLM`` protocol with a fixed random function of the tokens.

    ``cond_logits`` / ``uncond_logits`` give float32 [C, T, V]; the guided methods combine them as
    the reference's ``_predict_tokens_with_scoring`` does.
    """

    def __init__(
        self,
        seed: int,
        num_target_tokens: int,
        guidance_scale: float = 2.0,
        num_codebooks: int = 8,
        vocab: int = 1025,
        mask_id: int = 1024,
        dim: int = 16,
    ):
        C, T, V, D = num_codebooks, num_target_tokens, vocab, dim
        self.num_codebooks, self.num_target_tokens, self.vocab, self.mask_id = C, T, V, mask_id
        self.guidance_scale = float(guidance_scale)
        self.embed = hash_uniform(seed, 0, (C, V, D))
        self.pos_cond = hash_uniform(seed, 1, (C, T, D))
        self.pos_uncond = hash_uniform(seed, 2, (C, T, D))
        self.mix = hash_uniform(seed, 3, (T, T)) / np.sqrt(T)
        self.out = hash_uniform(seed, 4, (C, D, V)) * 1.5
        self.bias = hash_uniform(seed, 5, (C, V)) * 0.5
        self.calls = 0

    def _logits(self, tokens: np.ndarray, pos: np.ndarray) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        assert tokens.shape == (self.num_codebooks, self.num_target_tokens), tokens.shape
        assert tokens.min() >= 0 and tokens.max() < self.vocab
        h = np.take_along_axis(self.embed, tokens[:, :, None], axis=1) + pos  # [C, T, D]
        ctx = np.einsum("st,td->sd", self.mix, h.mean(axis=0))  # [T, D]
        h2 = np.tanh(h + ctx[None])
        logits = np.einsum("ctd,cdv->ctv", h2, self.out) + self.bias[:, None, :]
        return logits.astype(np.float32)

    def cond_logits(self, tokens: np.ndarray) -> np.ndarray:
        """Logits of the conditional row's target window, float32 [C, T, V]."""
        return self._logits(tokens, self.pos_cond)

    def uncond_logits(self, tokens: np.ndarray) -> np.ndarray:
        """Logits of the unconditional row's target window, float32 [C, T, V]."""
        return self._logits(tokens, self.pos_uncond)

    def guided_log_probs(self, tokens: np.ndarray) -> np.ndarray:
        self.calls += 1
        c = log_softmax_f32(self.cond_logits(tokens))
        if self.guidance_scale == 0:
            return c
        u = log_softmax_f32(self.uncond_logits(tokens))
        g = np.float32(self.guidance_scale)
        return log_softmax_f32(c + g * (c - u))

    def guided_argmax(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lp = self.guided_log_probs(tokens)
        lp[..., self.mask_id] = -np.inf
        return lp.argmax(axis=-1).astype(np.int32), lp.max(axis=-1)
