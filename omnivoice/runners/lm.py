"""The LM on a runtime: weights loaded once, one graph per chunk shape, replayed across the MaskGIT steps.

A chunk is one or more prompts decoded together. Each prompt contributes its conditional row (the full prompt)
and its unconditional row (only the target's mask tokens, positions from 0), packed side by side into one
sequence, attention running within each row's segment: the same function as the reference's padded batch
without the padded work. Between steps only the target tokens change; the graph, its allocation and every other
input stay. The guidance combination, log-softmax, argmax and max run in the graph, so a greedy step reads back
8 bytes per target token instead of the logits.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..config import current
from ..generate.maskgit import unscored_pick
from ..ggml import Graph, Runtime, WeightStore, ffi, lib, types
from ..ggml.backend import FATTN_MASK_ROW, FATTN_TYPED_OUT, FUSED_CASTS, GUIDED_PICK, MASKGIT_STEP
from ..ggml.graph import DEFAULT_MAX_NODES, read_tensor, write_tensor
from ..ggml.weights import Zeros
from ..gguf import keys as K
from ..gguf import open_model
from ..loaders import lm as loader
from ..models import lm as lm_graph
from ..nn import amx, fma, int8, int16
from ..nn.packed import Kernel


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


# Packed positions one graph may hold on a GPU: ggml's CUDA kernels launch a grid row per position in some ops
# (gridDim.y <= 65535); at L = 66560 the fused RMSNorm + RoPE kernel failed to launch on the H200 and ggml
# aborted the process.
MAX_GPU_POSITIONS = 65535


# the package's product kernels by their cpu_products name
KERNEL_MODULES = {"i16": int16, "i8": int8, "amx": amx, "fma": fma}
CPU_PRODUCTS = ("auto", "ggml", *KERNEL_MODULES)
# threads above which an AVX-512 CPU's F32 LM keeps ggml's products: on a 16-core Xeon the FMA kernel's LM
# products ran slower than ggml's at 8 and 16 threads, and its LM step faster at 2 (tools/matmul_bench.py)
FMA_MAX_AVX512_THREADS = 4


def products_choice(choice: str | None = None) -> str:
    """`cpu_products` as asked (default OMNIVOICE_CPU_PRODUCTS, else "auto"), checked: one of CPU_PRODUCTS."""
    choice = choice or current().cpu_products or "auto"
    if choice not in CPU_PRODUCTS:
        raise ValueError(f"cpu_products must be one of {', '.join(CPU_PRODUCTS)}, got {choice!r}")
    return choice


def products_kernel(runtime: Runtime, weight_type: int | None, choice: str | None = None,
                    stacked: bool = False) -> Kernel | None:
    """The package's kernel that the LM's products run on (nn.int16, nn.int8, nn.amx, nn.fma), or None for ggml's.

    `choice` (default OMNIVOICE_CPU_PRODUCTS, else "auto"): "ggml"; "i16", "i8", "amx" or "fma" (an error where
    the runtime is not the CPU or the CPU cannot run the kernel); or "auto", on a CPU runtime with unstacked
    projections: for F32 weights fma, float32 like ggml's F32 products and faster on AVX2 CPUs (tokens still the
    reference's in the parity tests; ggml's F32 GEMM reads its right operand unblocked),
    except on AVX-512 CPUs with more than FMA_MAX_AVX512_THREADS threads; for every other weight type (unless the
    runtime is exact_f32, which keeps ggml's products there) amx where the CPU has AMX-BF16, else i8 where it has
    AVX2, but for BF16 weights on CPUs with AVX512-BF16 (ggml's BF16 dot products).
    With AMX, the AMX kernel's BF16 products run well ahead of ggml's AMX Q8_0 ones, agreeing with float32 as
    BF16 does (94 % of the teacher-forced choices against Q8_0's 85 %). Without AVX-512 ggml's kernels are bound
    by 8-lane FMAs (or, for Q8_0 and the K-quants, integer dot products no faster); the int16 kernel (F16's
    rounding error) runs the LM step faster than they, and the int8 kernel faster again: 8-bit activations and
    7-bit weights, the precision class of ggml's own Q8_0 and K-quant products (F16 weights: step-0 logits cosine
    0.998 against the float32 reference, 79 % of the teacher-forced choices, where i16 gives 0.99999 and 99 %,
    ggml's Q8_0 0.9996 and 84 %, its Q6_K 0.996 and 71 %). Only i8 took the default F16 file past 2.5x the float32
    reference end to end on a 2-core AVX2 CPU, so it is the default; `cpu_products="i16"` keeps F16's precision
    at the int16 kernel's speed. With AVX-512 but no AMX (a Zen 4) ggml's F16 and Q8_0 products still ran an LM
    step at half i8's speed; its BF16 ones, on AVX512-BF16, close enough to keep BF16's precision (BENCHMARKS.md
    has every figure).
    The packed matrices take 2 bytes a weight (i8: 1; fma: 4, as the F32 file), more than a Q8_0 or K-quant
    file's.
    `stacked` projections (the qk_rope variant) keep ggml's products (a kernel named is then an error)."""
    choice = products_choice(choice)
    if choice == "ggml":
        return None
    if choice != "auto":
        module = KERNEL_MODULES[choice]
        if runtime.is_gpu:
            raise ValueError(f"{choice} products run on the CPU backend, not {runtime.device.spec}")
        if not module.available():
            need = ("an x86 CPU with AMX-BF16 (Intel Xeon since Sapphire Rapids) and an OS that grants its tiles"
                    if choice == "amx" else "an x86 CPU with AVX2 and FMA")
            raise ValueError(f"{choice} products need {need}, and a build with the package's kernels "
                             "(libomnivoice-ops)")
        if stacked:
            raise ValueError(f"{choice} products take unstacked projections (not the qk_rope graph variant)")
        return module.KERNEL
    if runtime.is_gpu or stacked or weight_type is None:
        return None
    from ..ggml.backend import cpu_features

    avx512 = "AVX512" in cpu_features()
    if weight_type == types.F32:
        # AVX-512 with many threads: ggml's F32 GEMM scaled better (tools/matmul_bench.py --types fma,f32 on a 16-core Xeon)
        many = avx512 and runtime.n_threads > FMA_MAX_AVX512_THREADS
        return fma.KERNEL if fma.available() and not many else None
    if runtime.exact_f32:
        return None
    if amx.available():
        return amx.KERNEL
    if weight_type == types.BF16 and "AVX512_BF16" in cpu_features():
        return None
    if int8.available():
        return int8.KERNEL
    return int16.KERNEL if int16.available() else None


class LanguageModel:
    """OmniVoice's LM loaded from an `omnivoice-lm` GGUF onto a runtime."""

    def __init__(self, runtime: Runtime, path, flash_attn: bool | None = None, clamp_fp16: bool = False,
                 stack_projections: bool | None = None, variant: lm_graph.Variant | None = None,
                 padded_attention: bool | None = None, max_graphs: int | None = None,
                 max_graph_bytes: int | None = None, cpu_products: str | None = None,
                 device_maskgit: bool | None = None, shape_classes: bool | None = None) -> None:
        """`stack_projections` (default: on GPUs) loads q/k/v and gate/up as one matrix each; the CPU
        otherwise computes on the file's memory map in place, which stacking would have to copy.
        `variant`: another composition of the graph (models.lm.Variant; qk_rope stacks the projections);
        default (OMNIVOICE_LM_VARIANT, e.g. "none" or "kv_rows", overrides): kv_rows on CUDA with F16 K/V (one
        fused kernel for K's norm, RoPE and cast on CUDA, a tenth off a 5 s step),
        with fused_casts where the ggml build fuses them (patch 0005); on the CPU fma_attention (its attention on
        the package's FMA kernel where that runs); else the plain graph.
        `padded_attention` (default: on GPUs with flash attention; OMNIVOICE_PADDED_ATTENTION=0/1 overrides)
        attends the segments of a packed batch in padded buckets (models.lm.padded_attention), a few kernels
        per layer instead of one per segment; the CPU keeps one call per segment, exact per request.
        `max_graphs` and `max_graph_bytes`: how many closed sessions' graphs are kept, and how much compute memory
        they may hold together, for the next session of the same shape (default 16 graphs within 1 GiB on GPUs,
        none on the CPU; OMNIVOICE_LM_GRAPHS overrides the count; see ChunkSession.reused).
        `shape_classes` (default: where graphs are kept and attention is padded, i.e. GPUs; OMNIVOICE_SHAPE_CLASSES
        =0/1 overrides): a session of at most CLASS_MAX_PROMPTS greedy prompts takes the graph of its shape class
        (class_layout) rather than of its exact lengths, so that requests of similar length share one kept graph.
        `cpu_products`: auto, ggml, i16, i8, amx or fma (see products_kernel). `device_maskgit` (default on;
        OMNIVOICE_DEVICE_MASKGIT=0 turns it off): MaskGIT's choices on the device where the build has the kernel."""
        self.runtime = runtime
        f = open_model(path, loader.ARCH)
        self.cfg = loader.read_config(f)
        if variant is None:
            env = current().lm_variant
            if env is not None:
                variant = lm_graph.Variant.parse(env)
            else:
                cuda_f16_kv = runtime.device.backend.lower() == "cuda" and not runtime.exact_f32
                # fused_casts where the build fuses them (patch 0005; without it the casts would be CPY kernels
                # of their own; vendor/ggml/README.md has the measurements); their outputs in a scratch that no
                # input shares (cast_scratch), and the attention's written as its product's input by patch 0013's
                # kernel where that takes the model (attn_cast): a few per cent of a step's GPU time, the same logits
                # the CPU: its attention on the package's FMA kernel where that runs (Variant.fma_attention)
                fused = runtime.has(FUSED_CASTS)
                variant = (lm_graph.Variant(kv_rows=True, fused_casts=fused, cast_scratch=fused,
                                            attn_cast=runtime.has(FATTN_TYPED_OUT) and short_attention_fits(self.cfg))
                           if cuda_f16_kv else lm_graph.Variant(fma_attention=not runtime.is_gpu))
        if stack_projections is None:
            stack_projections = runtime.is_gpu or variant.qk_rope
        if variant.qk_rope and not stack_projections:
            raise ValueError("the qk_rope graph variant needs stacked projections")
        self.variant = variant
        first = loader.product_matrices(self.cfg)[0]  # a missing one is the loader's error to report
        weight_type = next((t.tensor_type for t in f.tensors if t.name == first), None)
        kernel = products_kernel(runtime, weight_type, cpu_products, stack_projections)
        self.weights, self.store = loader.load_weights(runtime, f, self.cfg, stack=stack_projections,
                                                       joint_qk_norm=variant.qk_rope, packed_products=kernel)
        # the package's kernel that the products run on ("i16", "i8", "amx", "fma"), or None for ggml's (a matrix
        # whose rows do not split into the kernel's blocks keeps ggml's)
        self.cpu_products = kernel.name if self.weights.packed else None
        # Flash attention keeps K/V in F16 on GPUs (their kernels take that and accumulate in F32); the CPU
        # kernel takes F32 K/V and then accumulates in F32 too (with F16 K/V it accumulates V in F16, 1e-2 off
        # in the logits), faster than the plain path and float32-exact. A runtime asked
        # for exact float32 keeps F32 K/V everywhere (Vulkan has an F32 kernel; CUDA, whose kernels round K/V to F16,
        # then takes the plain path: Runtime.supports_flash_attn).
        self.flash_kv = types.F16 if runtime.is_gpu and not runtime.exact_f32 else types.F32
        if flash_attn is None or flash_attn:
            supported = runtime.supports_flash_attn(self.cfg.head_dim, self.flash_kv)
            if flash_attn and not supported:
                raise ValueError(f"{runtime.device.spec} has no flash attention for head size {self.cfg.head_dim}")
            flash_attn = supported
        self.flash_attn = flash_attn
        self.clamp_fp16 = clamp_fp16
        if padded_attention is None:
            padded_attention = current().padded_attention
            if padded_attention is None:
                padded_attention = runtime.is_gpu
        self.padded_attention = bool(padded_attention and flash_attn)
        if max_graphs is None:
            env = current().lm_graphs
            # Only GPUs: there a new shape costs the graph's build and allocation, a first run and a second
            # captured into a CUDA graph, a large share of a whole 5 s request; on the CPU it is small beside
            # LM steps of a second.
            max_graphs = env if env is not None else (16 if runtime.is_gpu else 0)
        self.max_graphs = max(0, int(max_graphs))
        classes_possible = self.padded_attention and not self.variant.one_attention
        # Shape classes by default where graphs are kept: on an H100 (the real server, 24 one-sentence requests of 12
        # to 15 words, four text sets, one machine) one client's first audio p50 was 76-78 ms with them against 80-89
        # without; the closed loop's rate within the noise either way (130-144 against 129-142 audio s/s at 32
        # clients), 64 conversational clients' p99 409-610 against 418-527 ms (BENCHMARKS.md, "Shape classes").
        # Under load they once failed 1-2 % of requests (NaN logits in class graphs of 2 to 4 prompts); since the
        # tail's attention outputs and a kept graph's padded rows are zeroed constants, none of about 2900 requests
        # has, and tools/class_check.py finds no read of unwritten compute memory on CUDA.
        if shape_classes is None:
            shape_classes = current().shape_classes
        if shape_classes is None:
            shape_classes = self.max_graphs > 0 and classes_possible
        if shape_classes and not classes_possible:
            raise ValueError("shape classes need padded attention (flash attention, not the one_attention variant)")
        self.shape_classes = bool(shape_classes)
        self.max_graph_bytes = int(max_graph_bytes) if max_graph_bytes is not None else 1 << 30
        self._kept: OrderedDict[tuple, list[_KeptGraph]] = OrderedDict()
        self._kept_lock = threading.Lock()
        # Patch 0024's MaskGIT step on CUDA: greedy chunks' steps queued back to back, each choice made on the
        # device, which writes the next run's ids (ChunkSession.run_on_device, sessions opened with
        # device_steps); device_maskgit=False (OMNIVOICE_DEVICE_MASKGIT=0) keeps the choices on the host (A/Bs).
        if device_maskgit is None:
            device_maskgit = current().device_maskgit
        self.maskgit_step = (runtime.proc(MASKGIT_STEP, "ggml_backend_cuda_maskgit_step_t")
                             if device_maskgit else None)

    @property
    def metadata(self) -> dict:
        return self.store.metadata

    @property
    def device_maskgit(self) -> bool:
        """Whether a lone greedy prompt's MaskGIT steps can run on the device (CUDA with patch 0024; a session
        opened with device_steps, ChunkSession.run_on_device)."""
        return self.maskgit_step is not None

    @property
    def context_length(self) -> int | None:
        """Positions one prompt may span (the checkpoint's max_position_embeddings; None if the file omits it)."""
        n = self.metadata.get(K.LM_CONTEXT_LENGTH)
        return int(n) if n else None

    def session(self, prompts: list[LMInput], guidance_scale: float | Sequence[float],
                greedy: bool | Sequence[bool],
                with_logits: bool = False, device_steps: bool = False) -> "ChunkSession":
        """A graph for these prompts' shapes, ready to be stepped. `guidance_scale` and `greedy` are one value
        for all prompts or one per prompt (a batch mixes requests with different settings). `device_steps`: the
        session is to run its steps on the device (ChunkSession.run_on_device), so its ids live there."""
        if self.store.closed:  # a graph built now would point at freed weights
            raise RuntimeError(f"the language model of {self.store.source} is closed")
        try:
            return ChunkSession(self, prompts, guidance_scale, greedy, with_logits, device_steps)
        except MemoryError:
            if not self.clear_graphs():
                raise
            return ChunkSession(self, prompts, guidance_scale, greedy, with_logits,  # the kept graphs' memory freed
                                device_steps)

    # ------------------------------------------------------------------------ graphs kept across sessions
    def _take_graph(self, key: tuple) -> "_KeptGraph | None":
        """A kept graph of this shape, removed from the keep (a session owns it alone), or None."""
        with self._kept_lock:
            kept = self._kept.get(key)
            if not kept:
                return None
            g = kept.pop()
            if not kept:
                del self._kept[key]
            return g

    def _keep_graph(self, key: tuple, g: "_KeptGraph") -> None:
        """Keep a closed session's graph for the next session of its shape; the least recently kept go first
        when there are more than max_graphs or they hold more than max_graph_bytes."""
        freed = []
        with self._kept_lock:
            if self.store.closed or g.nbytes > self.max_graph_bytes or not self.max_graphs:
                freed.append(g)
            else:
                self._kept.setdefault(key, []).append(g)
                self._kept.move_to_end(key)
                count, nbytes = self._kept_totals()
                while count > self.max_graphs or nbytes > self.max_graph_bytes:
                    first = next(iter(self._kept))
                    oldest = self._kept[first].pop(0)
                    if not self._kept[first]:
                        del self._kept[first]
                    freed.append(oldest)
                    count, nbytes = count - 1, nbytes - oldest.nbytes
        for f in freed:
            f.close()

    def _kept_totals(self) -> tuple[int, int]:
        """(graphs, bytes) kept; the caller holds _kept_lock."""
        return sum(len(v) for v in self._kept.values()), sum(g.nbytes for v in self._kept.values() for g in v)

    @property
    def kept_graphs(self) -> int:
        """Graphs of closed sessions kept for reuse."""
        with self._kept_lock:  # another thread's session may be closing meanwhile
            return self._kept_totals()[0]

    @property
    def kept_bytes(self) -> int:
        """Device and host memory that the kept graphs hold (compute buffers and per-chunk constants)."""
        with self._kept_lock:
            return self._kept_totals()[1]

    def clear_graphs(self) -> int:
        """Free every kept graph; returns how many there were."""
        with self._kept_lock:
            kept = [g for v in self._kept.values() for g in v]
            self._kept.clear()
        for g in kept:
            g.close()
        return len(kept)

    def close(self) -> None:
        self.clear_graphs()  # their graphs point at the weights
        self.store.close()


def short_attention_fits(cfg: lm_graph.LMConfig) -> bool:
    """Whether ggml patch 0007's short-sequence flash-attention kernel takes this model's attention (head size
    128, 2 to 8 query heads a K/V head; its lengths are checked per call): elsewhere attn_cast's cast would be a
    conversion kernel of its own, slower than the product's."""
    if cfg.n_head_kv <= 0 or cfg.n_head % cfg.n_head_kv:
        return False
    return cfg.head_dim == 128 and 2 <= cfg.n_head // cfg.n_head_kv <= 8


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


@dataclass
class _KeptGraph:
    """A closed session's graph and per-chunk constants, kept for the next session of the same shape."""

    graph: Graph
    constants: WeightStore
    buckets: list | None  # padded attention's buckets (None: one attention call per segment)
    nbytes: int

    def close(self) -> None:
        self.graph.close()
        self.constants.close()


class ChunkSession:
    """One chunk's graph: `step(tokens)` runs the LM on the prompts with their current target tokens.

    `reused` says whether the graph was one a closed session of the same shape left (LanguageModel.max_graphs):
    no build, no allocation, and on CUDA its captured graph replays from the first step."""

    def __init__(self, model: LanguageModel, prompts: list[LMInput], guidance_scale: float | Sequence[float],
                 greedy: bool | Sequence[bool], with_logits: bool, device_steps: bool = False) -> None:
        self.graph = self.constants = None
        self.reused = False
        self._key: tuple | None = None  # set once the graph is whole: only then is it kept at close
        self.times = (0.0, 0.0, 0.0)  # the last step's wall seconds: preparing the ids, the graph run, read-back
        # the build's wall seconds: the constants (made and uploaded, or a kept graph's rewritten), the graph's
        # nodes, its allocation on the scheduler (a kept graph: none)
        self.build_times = {"constants": 0.0, "nodes": 0.0, "allocate": 0.0}
        self._launched: Optional[tuple[float, float]] = None  # a run started and not yet finished
        try:
            self._build(model, prompts, guidance_scale, greedy, with_logits, device_steps)
        except BaseException:  # also Ctrl-C: a half-built graph freed later by GC, after its runtime, crashes
            self.close()
            raise

    def _build(self, model: LanguageModel, prompts: list[LMInput], guidance_scale: float | Sequence[float],
               greedy: bool | Sequence[bool], with_logits: bool, device_steps: bool) -> None:
        t_start = time.perf_counter()
        cfg = model.cfg
        self.model, self.cfg, self.prompts = model, cfg, list(prompts)
        n = len(self.prompts)
        self.greedy = [bool(greedy)] * n if isinstance(greedy, (bool, np.bool_)) else [bool(x) for x in greedy]
        self.guidance_scale = ([float(guidance_scale)] * n if np.isscalar(guidance_scale)
                               else [float(x) for x in guidance_scale])
        if len(self.greedy) != n or len(self.guidance_scale) != n:
            raise ValueError(f"{n} prompts, {len(self.greedy)} greedy flags, {len(self.guidance_scale)} guidance scales")
        self.with_logits = with_logits
        C = cfg.n_codebook
        for p in self.prompts:
            if p.input_ids.shape[0] != C:
                raise ValueError(f"prompt has {p.input_ids.shape[0]} codebook rows, the model {C}")

        # Packed layout: [cond_0 | uncond_0 | cond_1 | uncond_1 | ...], in a shape class a tail of rows after them
        segments, starts = [], []
        for p in self.prompts:
            Lc, T = p.input_ids.shape[1], p.n_target
            starts.append((sum(segments), sum(segments) + Lc))
            segments += [Lc, T]
        # Steps run on the device (run_on_device) where asked and possible: their ids then live on the device, where
        # the device's choices write them. Not by default: there the ids come from the host at every step, and in
        # the serving engine, which steps on the host, device-held ids made a lone streamed request's first audio
        # later (BENCHMARKS.md, "Tried and did not pay").
        self._device_loop = (device_steps and model.maskgit_step is not None and all(self.greedy)
                             and not with_logits)
        greedy_targets = sum(self.prompts[i].n_target for i in range(n) if self.greedy[i])
        classed = (model.shape_classes and n <= CLASS_MAX_PROMPTS and all(self.greedy) and not with_logits)
        padded = (model.padded_attention and not model.variant.one_attention and len(segments) > 2) or classed
        if classed:
            L, self._buckets = class_layout(segments)
            S = -(-greedy_targets // CLASS_TARGETS) * CLASS_TARGETS
        else:
            L, self._buckets = sum(segments), (padded_buckets(segments) if padded else None)
            S = greedy_targets
        if model.runtime.is_gpu and L > MAX_GPU_POSITIONS:  # a capacity limit: the engine halves its batch
            raise MemoryError(f"{n} prompts pack {L} positions; a graph on {model.runtime.device.spec} holds at most "
                             f"{MAX_GPU_POSITIONS} (fewer prompts per step)")
        self.L, self.starts, self._S = L, starts, S

        text_ids = np.zeros(L, np.int32)
        audio_mask = np.zeros(L, np.float32)
        pos = np.zeros(L, np.int32)
        self._ids = np.zeros((C, L), np.int64)  # unshifted ids of every position (a class's tail: text id 0)
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
        self._greedy = [i for i in range(n) if self.greedy[i]]
        self._scales = sorted({self.guidance_scale[i] for i in self._greedy})
        # The constants that follow the prompts' content, not only the graph's shape: what a kept graph is given
        # anew. For exact shapes that is the text and the masks (positions, row ids, head columns, guidance and
        # padding all follow from the key); a shape class keys only the sizes, so all of them.
        content = {"text_ids": text_ids, "audio_mask": audio_mask, "text_mask": 1.0 - audio_mask}
        layout = dict(pos=pos)
        if padded:
            layout.update(padded_constants(self._buckets, segments, L))
        # The greedy prompts' target columns, cond then uncond, go through the audio heads and the guided pick
        # together: one product and a dozen ops for the whole batch rather than per prompt (on a GPU each is a
        # kernel, and each output a copy back). A class's spare columns read row 0; their picks are not read.
        if self._greedy:
            pad = np.zeros(S - greedy_targets, np.int64)
            cond = [np.arange(starts[i][0] + self.prompts[i].input_ids.shape[1] - self.prompts[i].n_target,
                              starts[i][0] + self.prompts[i].input_ids.shape[1]) for i in self._greedy]
            uncond = [np.arange(starts[i][1], starts[i][1] + self.prompts[i].n_target) for i in self._greedy]
            layout["heads_index"] = np.concatenate(cond + [pad] + uncond + [pad]).astype(np.int32)
            if len(self._scales) > 1:  # a guidance scale per column: keep = 1 + g, mix = g (spare columns g = 0)
                per_col = np.concatenate([np.full(C * self.prompts[i].n_target, self.guidance_scale[i])
                                          for i in self._greedy] + [np.zeros(C * len(pad))])  # float64: rounded
                layout["guidance_keep"] = (1.0 + per_col).astype(np.float32).reshape(-1, 1)  # once, as ggml_scale's
                layout["guidance_mix"] = per_col.astype(np.float32).reshape(-1, 1)
        if classed:
            content.update(layout)
            key = ("class", L, tuple((P, len(m)) for P, m in self._buckets), S, tuple(self.greedy),
                   tuple(self.guidance_scale), self._device_loop)
        else:
            key = (tuple(segments), tuple(self.greedy), tuple(self.guidance_scale), bool(with_logits),
                   self._device_loop)
        # Where classes are on, only class graphs are kept: an exact packed batch's composition rarely comes again (on
        # an H100, 1 of 13 and 0 of 33 such graphs reused under 32 and 64 closed-loop clients), and kept it pushed
        # the classes of lone requests out of the keep (a conversational load after those then reused none).
        keep = classed or not model.shape_classes
        kept = model._take_graph(key) if keep else None
        if kept is not None:
            self.graph, self.constants = kept.graph, kept.constants
            if not classed:
                self._buckets = kept.buckets
            for name, value in content.items():
                write_tensor(self.constants[name], value, name)
            if classed:
                # Rows the last session's lengths made real are padding or tail rows now, which no set_rows writes:
                # zeros again, as a new graph's (models.lm.PaddedSegments), so that what a session left there,
                # non-finite values where its outputs went so, reaches neither the spare row nor a masked key.
                for name in PADDED_ROWS:
                    self.constants.zero(name)
            self.reused, self._key = True, key
            self.build_times["constants"] = time.perf_counter() - t_start
            return

        flash_kv = model.flash_kv if model.flash_attn else None
        # Each packed segment adds its own attention nodes to every layer (plain path: 14, 16 with contiguous
        # Q and K on Vulkan; measured on the tiny model); the default node budget holds a few dozen segments of
        # the full model.
        # A class's graph serves many sessions: its scheduler is its own, sized for it (a pooled one keeps the
        # buffers its last graph grew, a packed batch's or a codec decode's gigabyte, and a lone graph that large
        # is over max_graph_bytes and never kept).
        self.graph = g = Graph(model.runtime, what=f"the LM graph for {L} positions",
                               max_nodes=max(DEFAULT_MAX_NODES, cfg.n_layer * (64 + 18 * len(segments)) + 64 * n),
                               pooled=not classed)
        w = model.weights
        # What stays fixed for the whole chunk lives on the device from the start, like a weight: a graph
        # input would be copied from the host again at every step.
        consts = dict(content, **layout)
        spans = list(zip(np.cumsum([0] + segments[:-1]).tolist(), segments))
        consts.update(variant_constants(model.variant, L, spans))
        if padded:
            # Q, K and V scattered into the padded layout (models.lm.PaddedSegments): zeroed once, rewritten by
            # every layer's set_rows at the real rows only (a class's tail rows all at one spare row after them).
            R = len(layout["pad_scatter"]) + (L > sum(segments))
            width = cfg.head_dim * cfg.n_head_kv
            kv_dtype = np.float16 if model.flash_kv == types.F16 else np.float32
            consts["pad_q"] = Zeros(np.float32, (R, cfg.head_dim * cfg.n_head))
            consts["pad_k"] = Zeros(kv_dtype, (R, width))
            consts["pad_v"] = Zeros(kv_dtype, (R, width))
            if L > sum(segments):
                # a class's tail: the attention's outputs in a zeroed constant whose tail rows stay zero (no
                # set_rows writes them), so that the tail's activations, and the spare K/V row they write, stay
                # finite (models.lm.PaddedSegments). Left to the compute buffer, whose memory the last run's tensors
                # after the last layer had taken, the spare row went non-finite in 11 of 300 class sessions on the
                # CPU, and at the second run of a session in the GPU's composition (BF16 outputs:
                # tests/models/test_lm_graph_reuse.py); on CUDA class graphs of 2 to 4 prompts then gave NaN logits
                # under load (BENCHMARKS.md, "Shape classes").
                out_type = lm_graph.padded_out_type(w.layers[0], model.variant)
                consts["pad_out"] = Zeros(out_type, (L + 1, cfg.head_dim * cfg.n_head))
        # A lone greedy prompt's device-side MaskGIT state (run_on_device): its tokens, the steps' rows, the step
        # counter and error bits, the choice's scratch; kept with the graph like the other constants.
        if self._device_loop:
            T_max = S if classed else max(p.n_target for p in self.prompts)
            # every prompt's tokens, plan rows and state, one after another; one scratch for the choices' keys, as
            # the prompts' kernels run one after another on the stream
            consts.update(mg_tokens=Zeros(np.int32, (C * S,)), mg_plan=Zeros(np.int32, (n * MAX_DEVICE_STEPS, 6)),
                          mg_state=Zeros(np.int32, (2 * n,)), mg_keys=Zeros(np.int32, (C * T_max,)))
        t0 = time.perf_counter()
        self.constants = WeightStore.from_arrays(model.runtime, consts)
        self.build_times["constants"] = time.perf_counter() - t0
        c = self.constants
        inputs = lm_graph.VariantInputs(**{n: c[n] for n in ("kv_rows", "attn_mask") if n in c})
        if padded:
            spans = self._padded_segments()
        # Both masks are constants: a [1, L] tensor computed in the graph would, for an odd L, shift every
        # activation after it off the 64-byte lines that AVX-512 loads want (Graph.input pads inputs for the
        # same reason; an F32 step at an odd length then ran over half as long again).
        # The ids change at every step; a session whose steps run on the device holds them there (Graph.input).
        t_audio = g.input("audio_ids", np.int32, (C * L,), device=self._device_loop)
        h = lm_graph.hidden_states(g.ctx, w, cfg, c["text_ids"], t_audio, c["audio_mask"], c["text_mask"],
                                   c["pos"], spans, flash_kv, model.clamp_fp16, model.variant, inputs,
                                   contiguous_qk=model.runtime.products_need_contiguous,
                                   cpu=not model.runtime.is_gpu)                                   # [n_embd, L]

        if self._greedy:
            self._heads(g, h)
        for i, ((c0, u0), p) in enumerate(zip(starts, self.prompts)):
            if self.greedy[i]:
                continue
            Lc, T = p.input_ids.shape[1], p.n_target
            cond = lm_graph.audio_logits(g.ctx, w, cfg, lm_graph.columns(g.ctx, h, c0 + Lc - T, T),
                                         model.variant)                                            # [V, C, T]
            uncond = lm_graph.audio_logits(g.ctx, w, cfg, lm_graph.columns(g.ctx, h, u0, T), model.variant)
            if with_logits:
                g.output(f"cond_logits_{i}", cond)
                g.output(f"uncond_logits_{i}", uncond)
            cond2 = lib.ggml_reshape_2d(g.ctx, cond, cfg.audio_vocab, C * T)                       # [V, C*T]
            uncond2 = lib.ggml_reshape_2d(g.ctx, uncond, cfg.audio_vocab, C * T)
            g.output(f"log_probs_{i}", lm_graph.guided_log_probs(g.ctx, cond2, uncond2, self.guidance_scale[i],
                                                                 cpu=not self.model.runtime.is_gpu))
        t0 = time.perf_counter()
        g.allocate()
        self.build_times.update(nodes=t0 - t_start - self.build_times["constants"], allocate=time.perf_counter() - t0)
        self._key = key if keep else None

    def _heads(self, g: Graph, h) -> None:
        """Audio heads, guidance and the greedy pick of every greedy prompt in one pass: outputs `pred` and
        `score` over their C * T targets, prompt after prompt (and each prompt's logits with_logits)."""
        cfg, w, c, C, V = self.cfg, self.model.weights, self.constants, self.cfg.n_codebook, self.cfg.audio_vocab
        S = self._S  # the greedy targets (a class's spare columns included)
        cpu = not self.model.runtime.is_gpu
        logits = lm_graph.audio_logits(g.ctx, w, cfg, lib.ggml_get_rows(g.ctx, h, c["heads_index"]),
                                       self.model.variant)                                     # [V, C, 2S]
        if self.model.runtime.has(GUIDED_PICK):
            # Patch 0021's one kernel for the guidance and the pick below reads the logits while it writes pred
            # and score, so their memory must not pass to those (it refuses to run where it would): an output's
            # memory is never handed on.
            lib.ggml_set_output(logits.view_src)
        row = logits.nb[1]
        cond = lib.ggml_view_2d(g.ctx, logits, V, C * S, row, 0)                                  # [V, C*S]
        uncond = lib.ggml_view_2d(g.ctx, logits, V, C * S, row, C * S * row)
        if self.with_logits:
            at = 0
            for i in self._greedy:
                T = self.prompts[i].n_target
                for name, off in (("cond_logits", 0), ("uncond_logits", S)):
                    g.output(f"{name}_{i}", lib.ggml_view_3d(g.ctx, logits, V, C, T, row, logits.nb[2],
                                                              (off + at) * logits.nb[2]))
                at += T
        if len(self._scales) > 1:
            lp = lm_graph.guided_log_probs_per_column(g.ctx, cond, uncond, c["guidance_keep"], c["guidance_mix"],
                                                      cpu)
        else:
            lp = lm_graph.guided_log_probs(g.ctx, cond, uncond, self._scales[0], cpu)              # [V, C*S]
        pred, score = lm_graph.greedy_pick(g.ctx, lp, w.class_bias, cpu)
        g.output("pred", pred)
        g.output("score", score)

    def _padded_segments(self) -> "lm_graph.PaddedSegments":
        c = self.constants
        buckets = tuple(lm_graph.PaddedBucket(c[f"pad_mask_{b}"], P, len(members))
                        for b, (P, members) in enumerate(self._buckets))
        # a class's tail: the outputs' zeroed constant, by its type (the session's build says why)
        results = {c["pad_out"].type: c["pad_out"]} if "pad_out" in c else {}
        return lm_graph.PaddedSegments(buckets, c["pad_rows"], c["pad_q"], c["pad_k"], c["pad_v"], c["pad_scatter"],
                                       results=results, same_rows=self.model.runtime.has(FATTN_MASK_ROW))

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
        self.launch(tokens)
        return self.finish()

    def launch(self, tokens: list[np.ndarray]) -> None:
        """`step`'s first half: write the tokens and start the graph run (on a GPU: queued, not waited for)."""
        if self.graph is None:  # its graph went back to the model (or was freed) at close
            raise RuntimeError("ChunkSession.launch: the session is closed")
        if self._launched is not None:
            raise RuntimeError("ChunkSession.launch: the previous run was not finished")
        t0 = time.perf_counter()
        ids = self._audio_ids(tokens)
        t1 = time.perf_counter()
        self.graph.launch(audio_ids=ids)
        self._launched = (t1 - t0, time.perf_counter() - t1)
        self.times = (0.0, 0.0, 0.0)

    def finish(self) -> list[dict[str, np.ndarray]]:
        """`step`'s second half: wait for the run that `launch` started and return its outputs."""
        if self._launched is None:
            raise RuntimeError("ChunkSession.finish: no run was launched")
        (prepare, launch), self._launched = self._launched, None
        t0 = time.perf_counter()
        self.graph.wait()
        t1 = time.perf_counter()
        out = self._results(self.graph.read_outputs())
        # the run's share: launching and waiting (host work between the two is not the run's)
        self.times = (prepare, launch + t1 - t0, time.perf_counter() - t1)
        return out

    @property
    def device_steps(self) -> int:
        """How many MaskGIT steps `run_on_device` takes at most now: MAX_DEVICE_STEPS in a session of greedy prompts
        opened with device_steps on CUDA with patch 0024, 0 elsewhere (the caller steps on the host)."""
        return MAX_DEVICE_STEPS if self._device_loop and self.graph is not None and self._launched is None else 0

    def run_on_device(self, tokens: Sequence[np.ndarray], plans: Sequence[np.ndarray],
                      layer_penalty_factors: Sequence[float], position_temperatures: Sequence[float],
                      mask_id: int) -> list:
        """Run MaskGIT steps of every prompt on the device: each step is the graph's run and then each prompt's
        choice on the device, which writes its tokens into the next run's ids, so the steps are queued back to back
        with no host work between them; the host waits once. Per prompt: `tokens` int32 [C, T] before the first
        step, `plans` the steps' rows (generate.maskgit.MaskGitState.device_plan: k, the Philox seed and offset,
        the noise flag; as many for every prompt), its layer penalty and position temperature. Returns per prompt
        the tokens after the last step, or the ValueError of a prompt whose scores were NaN, whose choice was the
        mask id or whose tokens hold a -1 (generate.maskgit.unscored_pick). Only where `device_steps` covers the
        plans (a ValueError elsewhere). The tokens are the host loop's, bit for bit
        (tests/models/test_lm_device_maskgit.py, tests/engine/test_device_path.py)."""
        n = len(self.prompts)
        steps = len(plans[0]) if len(plans) == n else 0
        if not 0 < steps <= self.device_steps or any(len(p) != steps for p in plans) or len(tokens) != n:
            raise ValueError(f"ChunkSession.run_on_device: {len(plans)} plans of {[len(p) for p in plans]} steps for "
                             f"{n} prompts; this session runs 1 to {self.device_steps} steps, as many for each")
        args = self._device_args(tokens, plans, layer_penalty_factors, position_temperatures, mask_id)
        g, c, backend = self.graph, self.constants, self.model.runtime.backend
        try:
            for _ in range(steps):
                g.launch()
                for a in args:
                    if self.model.maskgit_step(backend, a) != 0:
                        raise RuntimeError("the device's MaskGIT step refused its arguments")
        finally:
            lib.ggml_backend_synchronize(backend)  # every queued run and choice, before anything is read or reused
        state = read_tensor(c["mg_state"]).reshape(n, 2)
        out, at = [], read_tensor(c["mg_tokens"])
        for (done, flags), tok in zip(state.tolist(), tokens):
            size, shape = np.size(tok), np.shape(tok)
            if flags & 1:
                out.append(ValueError("MaskGIT: the LM produced NaN scores"))
            elif flags & 2:
                out.append(ValueError(f"MaskGIT: the LM predicted the mask id {mask_id} for a position being "
                                      "unmasked"))
            elif flags or done != steps:
                raise RuntimeError(f"the device's MaskGIT ran {done} of {steps} steps (error bits {flags})")
            elif (at[:size] < 0).any():  # a pick of a row with no finite logit: no error bit says it
                out.append(unscored_pick())
            else:
                out.append(at[:size].reshape(shape).astype(np.int32))
            at = at[size:]
        return out

    def run_steps_many(self, tokens: Sequence[np.ndarray], plans: Sequence[np.ndarray], configs) -> list:
        """`run_on_device` with each prompt's sampler settings (generate.maskgit.GenerationConfig): what
        generate.batch.run_on_device asks of a packed LM."""
        return self.run_on_device(tokens, plans, [c.layer_penalty_factor for c in configs],
                                  [c.position_temperature for c in configs], self.cfg.audio_mask_id)

    def _device_args(self, tokens: Sequence[np.ndarray], plans: Sequence[np.ndarray],
                     layer_penalty_factors: Sequence[float], position_temperatures: Sequence[float], mask_id: int):
        """run_on_device's start: the tokens, the plans and zeroed step counters written to the device, the graph's
        ids made from the tokens, and each prompt's kernel arguments (cffi structs): its share of the outputs
        (pred and score, prompt after prompt), of the tokens, plans and states, and its target columns."""
        c, cfg, g = self.constants, self.cfg, self.graph
        n, C = len(self.prompts), cfg.n_codebook
        tokens = [np.asarray(t, np.int32) for t in tokens]
        flat = np.concatenate([t.reshape(-1) for t in tokens])
        held = np.zeros(int(c["mg_tokens"].ne[0]), np.int32)  # a class's spare targets after the prompts': zeros
        held[:flat.size] = flat
        write_tensor(c["mg_tokens"], held, "mg_tokens")
        rows = np.zeros((n * MAX_DEVICE_STEPS, 6), np.int32)
        for i, plan in enumerate(plans):
            rows[i * MAX_DEVICE_STEPS:i * MAX_DEVICE_STEPS + len(plan)] = plan
        write_tensor(c["mg_plan"], rows, "mg_plan")
        write_tensor(c["mg_state"], np.zeros(2 * n, np.int32), "mg_state")
        g.set_input("audio_ids", self._audio_ids(tokens))
        ptr = {name: ffi.cast(kind, t.data) for name, kind, t in (
            ("pred", "int32_t *", g.tensor("pred")), ("score", "float *", g.tensor("score")),
            ("tokens", "int32_t *", c["mg_tokens"]), ("ids", "int32_t *", g.tensor("audio_ids")),
            ("plan", "int32_t *", c["mg_plan"]), ("state", "int32_t *", c["mg_state"]),
            ("keys", "uint32_t *", c["mg_keys"]))}
        args, at = [], 0  # at: the prompt's first target in pred, score and the tokens
        for i, ((c0, u0), p) in enumerate(zip(self.starts, self.prompts)):
            Lc, T = p.input_ids.shape[1], p.n_target
            temp = float(position_temperatures[i])
            args.append(ffi.new("struct ggml_cuda_maskgit_args *", dict(
                pred=ptr["pred"] + at, score=ptr["score"] + at, tokens=ptr["tokens"] + at, ids=ptr["ids"],
                plan=ptr["plan"] + 6 * MAX_DEVICE_STEPS * i, state=ptr["state"] + 2 * i, keys=ptr["keys"],
                penalty=float(np.float32(layer_penalty_factors[i])),
                inv_temp=float(np.float32(1.0 / temp)) if temp > 0 else 0.0, C=C, T=T, L=self.L,
                cond0=c0 + Lc - T, uncond0=u0, audio_vocab=cfg.audio_vocab, mask_id=mask_id, n_steps=len(plans[i]))))
            at += C * T
        return args

    def _results(self, out: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
        C = self.cfg.n_codebook
        if self._greedy:
            pred, score = out["pred"].reshape(-1), out["score"].reshape(-1)
            at = dict(zip(self._greedy, np.cumsum([0] + [C * self.prompts[i].n_target for i in self._greedy])))
        results = []
        for i, p in enumerate(self.prompts):
            T = p.n_target
            r = {}
            if self.greedy[i]:
                r["pred"] = pred[at[i]:at[i] + C * T].reshape(T, C).T.copy()
                r["score"] = score[at[i]:at[i] + C * T].reshape(T, C).T.copy()
            else:
                r["log_probs"] = out[f"log_probs_{i}"].reshape(T, C, -1).transpose(1, 0, 2).copy()
            if self.with_logits:
                for name in ("cond_logits", "uncond_logits"):
                    r[name] = out[f"{name}_{i}"].reshape(T, C, -1).transpose(1, 0, 2).copy()
            results.append(r)
        return results

    def close(self) -> None:
        """Give the graph back to the model for the next session of this shape (LanguageModel.max_graphs), or
        free it. A run still in flight (launched, never finished) is waited for first."""
        graph, constants, self.graph, self.constants = self.graph, self.constants, None, None
        key, self._key = self._key, None
        if key is not None:  # a whole graph: the model keeps it or frees it (_keep_graph)
            if self._launched is not None:
                self._launched = None
                graph.wait()
            self.model._keep_graph(key, _KeptGraph(graph, constants, self._buckets,
                                                   graph.buffer_size() + constants.nbytes))
            return
        if graph is not None:
            graph.close()
        if constants is not None:
            constants.close()

    def __enter__(self) -> "ChunkSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class GuidedChunk:
    """A one-prompt session as the MaskGIT loop's LM (generate.maskgit.GuidedLM): the guided argmax (launched
    without waiting, so the loop draws its noise meanwhile) or the guided log-probs of the prompt's tokens, and,
    where the session can (CUDA with patch 0024), whole runs of steps on the device (`device_steps`,
    `run_steps`; MaskGitState.run_on_device)."""

    def __init__(self, session: ChunkSession, mask_id: int) -> None:
        self.session, self.mask_id = session, mask_id

    @property
    def device_steps(self) -> int:
        return self.session.device_steps

    def run_steps(self, tokens: np.ndarray, plan: np.ndarray, config) -> np.ndarray:
        out = self.session.run_on_device([tokens], [plan], [config.layer_penalty_factor],
                                         [config.position_temperature], self.mask_id)[0]
        if isinstance(out, Exception):
            raise out
        return out

    def guided_argmax(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.launch_guided_argmax(tokens)()

    def launch_guided_argmax(self, tokens: np.ndarray) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        self.session.launch([tokens])
        return self._argmax

    def _argmax(self) -> tuple[np.ndarray, np.ndarray]:
        r = self.session.finish()[0]
        if "pred" in r:
            return r["pred"], r["score"]
        lp = r["log_probs"]
        lp[..., self.mask_id] = -np.inf
        return lp.argmax(-1).astype(np.int32), lp.max(-1)

    def guided_log_probs(self, tokens: np.ndarray) -> np.ndarray:
        return self.session.step([tokens])[0]["log_probs"]


# Steps a session runs on the device at most (its plan's rows, kept with the graph; a request's num_step is 32 by
# default): a chunk of more steps steps on the host.
MAX_DEVICE_STEPS = 256

# A bucket of padded attention takes segments up to PAD_RATIO times (plus PAD_SLACK positions) as long as its
# shortest: padding costs at most that share of a bucket's attention work, small beside the matrix products.
# Nor does a bucket span more than one count of KEY_CHUNK-key chunks (CUDA's short-sequence kernel stages keys 64
# at a time and skips a segment's chunks past its keys, but computes every query row of the bucket's length): a
# five-second request's uncond segment (125 positions, 2 chunks) padded to its cond's 147 (3 chunks) cost 2 query
# tiles of 10 for nothing. One bucket more is one attention kernel more a layer.
PAD_RATIO, PAD_SLACK, KEY_CHUNK = 1.25, 16, 64


def padded_buckets(lengths: list[int]) -> list[tuple[int, list[int]]]:
    """Segments (by index) grouped by similar length: [(padded length, members)], shortest first."""
    buckets: list[tuple[int, list[int]]] = []
    first = None
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if (first is None or lengths[i] > PAD_RATIO * first + PAD_SLACK
                or -(-lengths[i] // KEY_CHUNK) != -(-first // KEY_CHUNK)):
            buckets.append((0, []))
            first = lengths[i]
        P, members = buckets[-1]
        buckets[-1] = (max(P, lengths[i]), members + [i])
    return buckets


def padded_constants(buckets: list[tuple[int, list[int]]], lengths: list[int],
                     positions: int | None = None) -> dict[str, np.ndarray]:
    """Row indices and masks of padded attention (models.lm.PaddedSegments) for segments packed in order;
    `positions` (default: the segments' sum) counts a shape class's tail too, whose rows all go to one spare row
    after the buckets' (attended by nothing)."""
    starts = np.cumsum([0] + lengths[:-1])
    L = sum(lengths) if positions is None else positions
    R = sum(P * len(members) for P, members in buckets)
    rows = np.full(L, R, np.int64)   # the padded row of each packed position
    out: dict[str, np.ndarray] = {}
    row = 0
    for b, (P, members) in enumerate(buckets):
        mask = np.zeros((len(members), 1, P, P), np.float16)   # ggml [P keys, P queries, 1, S]
        for j, i in enumerate(members):
            n, s = lengths[i], int(starts[i])
            mask[j, 0, :, n:] = -np.inf
            rows[s:s + n] = row + j * P + np.arange(n)
        out[f"pad_mask_{b}"] = mask
        row += P * len(members)
    out["pad_rows"] = rows
    # the inverse: each padded row's packed position, L (a row left out of the result) for padding
    scatter = np.full(row, L, np.int64)
    real = rows < R
    scatter[rows[real]] = np.arange(L)[real]
    out["pad_scatter"] = scatter
    return out


# Shape classes (LanguageModel.shape_classes, on GPUs by default: see there): sessions of up to CLASS_MAX_PROMPTS greedy
# prompts whose packed length rounds up to the same multiple of CLASS_POSITIONS (one tail row at least), whose
# segments round up to the same multiples of KEY_CHUNK and whose greedy targets round up to the same multiple of
# CLASS_TARGETS share a graph. On a GPU a new graph costs its build and allocation (11 ms of a lone one-sentence
# request on an H100), a first run and a second captured into a CUDA graph; with classes, the server's graph building
# under 32 conversational clients fell from 0.53 to 0.15 s of the run, first audio the same within the noise
# (tree 615b956: `git log -p BENCHMARKS.md`). The padding: a tail of at most CLASS_POSITIONS rows through the products,
# queries up to the next KEY_CHUNK in attention. Larger packed batches keep their exact shapes: their compositions
# rarely repeat, and there the padding would be paid at every step.
CLASS_MAX_PROMPTS, CLASS_POSITIONS, CLASS_TARGETS = 4, 64, 64
# A class graph's constants that hold rows of a session's lengths: the padded Q, K and V rows and the attention outputs
PADDED_ROWS = ("pad_q", "pad_k", "pad_v", "pad_out")


def class_layout(lengths: list[int]) -> tuple[int, list[tuple[int, list[int]]]]:
    """A shape class's packed length and padded buckets for segments packed in order: (positions, [(padded
    length, members)]), the buckets by length, each segment in the one of its length rounded up to KEY_CHUNK."""
    positions = -(-(sum(lengths) + 1) // CLASS_POSITIONS) * CLASS_POSITIONS
    buckets: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        buckets.setdefault(-(-n // KEY_CHUNK) * KEY_CHUNK, []).append(i)
    return positions, sorted(buckets.items())
