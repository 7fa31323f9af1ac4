"""The LM on a runtime: weights loaded once, one graph per chunk shape, replayed across the MaskGIT steps.

A chunk is one or more prompts decoded together. Each prompt contributes its conditional row (the full prompt)
and its unconditional row (only the target's mask tokens, positions from 0), packed side by side into one
sequence, attention running within each row's segment: the same function as the reference's padded batch
without the padded work. Between steps only the target tokens change; the graph, its allocation and every other
input stay. The guidance combination, log-softmax, argmax and max run in the graph, so a greedy step reads back
8 bytes per target token instead of the logits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ggml import Graph, Runtime, WeightStore, lib, types
from ..gguf import keys as K
from ..gguf import open_model
from ..loaders import lm as loader
from ..models import lm as lm_graph


@dataclass(frozen=True)
class LMInput:
    """What the LM sees of one prompt: conditional input ids int32 [C, L], its audio mask bool [L], and the
    target length T (the last T positions). text.prompt.Prompt builds these ids from text and a voice."""

    input_ids: np.ndarray
    audio_mask: np.ndarray
    n_target: int

    def __post_init__(self):
        ids, mask = np.asarray(self.input_ids), np.asarray(self.audio_mask)
        if ids.ndim != 2 or mask.shape != (ids.shape[1],):
            raise ValueError(f"prompt ids {ids.shape} and audio mask {mask.shape} do not match ([C, L] and [L])")
        if not 0 < self.n_target <= ids.shape[1]:
            raise ValueError(f"target length {self.n_target} must lie in 1..{ids.shape[1]}")
        if not mask[-self.n_target:].all():
            raise ValueError("the target positions (the last n_target) must be audio positions")


class LanguageModel:
    """OmniVoice's LM loaded from an `omnivoice-lm` GGUF onto a runtime."""

    def __init__(self, runtime: Runtime, path, flash_attn: bool | None = None, clamp_fp16: bool = False,
                 stack_projections: bool | None = None, variant: lm_graph.Variant = lm_graph.DEFAULT) -> None:
        """`stack_projections` (default: on GPUs) loads q/k/v and gate/up as one matrix each; the CPU
        otherwise computes on the file's memory map in place, which stacking would have to copy.
        `variant`: another composition of the graph (models.lm.Variant; qk_rope stacks the projections)."""
        self.runtime = runtime
        f = open_model(path, loader.ARCH)
        self.cfg = loader.read_config(f)
        if stack_projections is None:
            stack_projections = runtime.is_gpu or variant.qk_rope
        if variant.qk_rope and not stack_projections:
            raise ValueError("the qk_rope graph variant needs stacked projections")
        self.variant = variant
        self.weights, self.store = loader.load_weights(runtime, f, self.cfg, stack=stack_projections,
                                                       joint_qk_norm=variant.qk_rope)
        # Flash attention keeps K/V in F16 on GPUs (their kernels take that and accumulate in F32); the CPU
        # kernel takes F32 K/V and then accumulates in F32 too (with F16 K/V it accumulates V in F16, 1e-2 off
        # in the logits), 2.6x faster than the plain path at 346 positions and float32-exact. A runtime asked
        # for exact float32 keeps F32 K/V everywhere (Vulkan has an F32 kernel; CUDA then takes the plain path).
        self.flash_kv = types.F16 if runtime.is_gpu and not runtime.exact_f32 else types.F32
        if flash_attn is None or flash_attn:
            supported = runtime.supports_flash_attn(self.cfg.head_dim, self.flash_kv)
            if flash_attn and not supported:
                raise ValueError(f"{runtime.device.spec} has no flash attention for head size {self.cfg.head_dim}")
            flash_attn = supported
        self.flash_attn = flash_attn
        self.clamp_fp16 = clamp_fp16

    @property
    def metadata(self) -> dict:
        return self.store.metadata

    @property
    def context_length(self) -> int | None:
        """Positions one prompt may span (the checkpoint's max_position_embeddings; None if the file omits it)."""
        n = self.metadata.get(K.LM_CONTEXT_LENGTH)
        return int(n) if n else None

    def session(self, prompts: list[LMInput], guidance_scale: float, greedy: bool,
                with_logits: bool = False) -> "ChunkSession":
        """A graph for these prompts' shapes, ready to be stepped."""
        return ChunkSession(self, prompts, guidance_scale, greedy, with_logits)

    def close(self) -> None:
        self.store.close()


def variant_constants(variant: lm_graph.Variant, L: int, spans: list[tuple[int, int]]) -> dict[str, np.ndarray]:
    """The per-chunk constants a graph variant reads: row ids for kv_rows, the block-diagonal F16 mask
    [L queries, L keys] of one_attention (0 within a packed prompt's segment, -inf across)."""
    out = {}
    if variant.kv_rows:
        out["kv_rows"] = np.arange(L, dtype=np.int64)
    if variant.one_attention:
        mask = np.full((L, L), -np.inf, np.float16)
        for s, n in spans:
            mask[s:s + n, s:s + n] = 0
        out["attn_mask"] = mask
    return out


class ChunkSession:
    """One chunk's graph: `step(tokens)` runs the LM on the prompts with their current target tokens."""

    def __init__(self, model: LanguageModel, prompts: list[LMInput], guidance_scale: float, greedy: bool,
                 with_logits: bool) -> None:
        cfg = model.cfg
        self.model, self.cfg, self.prompts = model, cfg, list(prompts)
        self.greedy, self.with_logits, self.guidance_scale = greedy, with_logits, guidance_scale
        C = cfg.n_codebook
        for p in self.prompts:
            if p.input_ids.shape[0] != C:
                raise ValueError(f"prompt has {p.input_ids.shape[0]} codebook rows, the model {C}")

        # Packed layout: [cond_0 | uncond_0 | cond_1 | uncond_1 | ...]
        segments, starts = [], []
        for p in self.prompts:
            Lc, T = p.input_ids.shape[1], p.n_target
            starts.append((sum(segments), sum(segments) + Lc))
            segments += [Lc, T]
        L = sum(segments)
        self.L, self.starts = L, starts

        text_ids = np.zeros(L, np.int32)
        audio_mask = np.zeros(L, np.float32)
        pos = np.zeros(L, np.int32)
        self._ids = np.zeros((C, L), np.int64)  # unshifted ids of every position
        for (c0, u0), p in zip(starts, self.prompts):
            Lc, T = p.input_ids.shape[1], p.n_target
            ids = np.asarray(p.input_ids, np.int64)
            self._ids[:, c0:c0 + Lc] = ids
            self._ids[:, u0:u0 + T] = ids[:, Lc - T:]
            audio_mask[c0:c0 + Lc] = np.asarray(p.audio_mask, np.float32)
            audio_mask[u0:u0 + T] = 1.0
            pos[c0:c0 + Lc] = np.arange(Lc)
            pos[u0:u0 + T] = np.arange(T)
        text_ids[:] = self._ids[0]
        self._offsets = (np.arange(C, dtype=np.int64) * cfg.audio_vocab)[:, None]
        self._audio_mask = audio_mask

        flash_kv = model.flash_kv if model.flash_attn else None
        self.graph = g = Graph(model.runtime, what=f"the LM graph for {L} positions")
        w = model.weights
        # What stays fixed for the whole chunk lives on the device from the start, like a weight: a graph
        # input would be copied from the host again at every step.
        spans = list(zip(np.cumsum([0] + segments[:-1]).tolist(), segments))
        self.constants = WeightStore.from_arrays(model.runtime, {
            "text_ids": text_ids, "audio_mask": audio_mask, "text_mask": 1.0 - audio_mask, "pos": pos,
            **variant_constants(model.variant, L, spans)})
        c = self.constants
        inputs = lm_graph.VariantInputs(**{n: c[n] for n in ("kv_rows", "attn_mask") if n in c})
        # Both masks are constants: a [1, L] tensor computed in the graph would, for an odd L, shift every
        # activation after it off the 64-byte lines that AVX-512 loads want (Graph.input pads inputs for the
        # same reason; the F32 step at L = 337 took 1989 ms instead of 1231).
        t_audio = g.input("audio_ids", np.int32, (C * L,))
        h = lm_graph.hidden_states(g.ctx, w, cfg, c["text_ids"], t_audio, c["audio_mask"], c["text_mask"],
                                   c["pos"], spans, flash_kv, model.clamp_fp16, model.variant,
                                   inputs)                                                        # [n_embd, L]

        for i, ((c0, u0), p) in enumerate(zip(starts, self.prompts)):
            Lc, T = p.input_ids.shape[1], p.n_target
            cond = lm_graph.audio_logits(g.ctx, w, cfg, lm_graph.columns(g.ctx, h, c0 + Lc - T, T),
                                         model.variant)                                            # [V, C, T]
            uncond = lm_graph.audio_logits(g.ctx, w, cfg, lm_graph.columns(g.ctx, h, u0, T), model.variant)
            if with_logits:
                g.output(f"cond_logits_{i}", cond)
                g.output(f"uncond_logits_{i}", uncond)
            cond2 = lib.ggml_reshape_2d(g.ctx, cond, cfg.audio_vocab, C * T)                       # [V, C*T]
            uncond2 = lib.ggml_reshape_2d(g.ctx, uncond, cfg.audio_vocab, C * T)
            lp = lm_graph.guided_log_probs(g.ctx, cond2, uncond2, guidance_scale)                   # [V, C*T]
            if greedy:
                pred, score = lm_graph.greedy_pick(g.ctx, lp, w.class_bias)
                g.output(f"pred_{i}", pred)
                g.output(f"score_{i}", score)
            else:
                g.output(f"log_probs_{i}", lp)
        try:
            g.allocate()
        except BaseException:  # e.g. MemoryError for a graph too large: free the constants uploaded above
            self.close()
            raise

    def _audio_ids(self, tokens: list[np.ndarray]) -> np.ndarray:
        ids = self._ids.copy()
        for (c0, u0), p, tok in zip(self.starts, self.prompts, tokens):
            Lc, T = p.input_ids.shape[1], p.n_target
            tok = np.asarray(tok)
            if tok.shape != (self.cfg.n_codebook, T):
                raise ValueError(f"tokens of shape {tok.shape}, expected {(self.cfg.n_codebook, T)}")
            ids[:, c0 + Lc - T:c0 + Lc] = tok
            ids[:, u0:u0 + T] = tok
        # The reference embeds ids * audio_mask + offset: non-audio positions read each codebook's row 0.
        shifted = ids * (self._audio_mask > 0) + self._offsets
        return shifted.astype(np.int32).reshape(-1)

    def step(self, tokens: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
        """Run the LM with each prompt's current target tokens int32 [C, T]; per prompt, a dict of:

        greedy: `pred` int32 [C, T] (argmax of the guided log-probs, mask id excluded) and `score` float32
        [C, T] (their max); otherwise `log_probs` float32 [C, T, V] (guided, mask column not yet excluded);
        with_logits: also `cond_logits` and `uncond_logits` float32 [C, T, V] (raw).
        """
        return self._results(self.graph.compute(audio_ids=self._audio_ids(tokens)))

    def _results(self, out: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        C = self.cfg.n_codebook
        results = []
        for i, p in enumerate(self.prompts):
            T = p.n_target
            r = {}
            if self.greedy:
                r["pred"] = out[f"pred_{i}"].reshape(T, C).T.copy()
                r["score"] = out[f"score_{i}"].reshape(T, C).T.copy()
            else:
                r["log_probs"] = out[f"log_probs_{i}"].reshape(T, C, -1).transpose(1, 0, 2).copy()
            if self.with_logits:
                for name in ("cond_logits", "uncond_logits"):
                    r[name] = out[f"{name}_{i}"].reshape(T, C, -1).transpose(1, 0, 2).copy()
            results.append(r)
        return results

    def close(self) -> None:
        self.graph.close()
        self.constants.close()

    def __enter__(self) -> "ChunkSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
