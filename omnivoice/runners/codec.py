"""The codec on a runtime: AudioCodec runs the graphs of omnivoice.models.codec on the weights that
omnivoice.loaders.codec loads from the codec GGUF.

    with load_codec("omnivoice-tokenizer-F32.gguf", backend="cpu") as codec:
        codes = codec.encode(audio_24k)          # int32 [8, T]
        audio = codec.decode(codes)              # float32 [960 T]

Graphs are built once per input shape and the last few are kept for replay.

Precision: on CUDA, ggml computes F32 matrix products in TF32 (it sets cuBLAS's TF32 math mode and its own F32
kernels use TF32 tensor cores), about 3 significant digits per product. Decoding is unaffected in practice
(cosine 0.999996 against the float32 reference on the full-size preset), but encoding ends in argmins that
such errors flip: with random full-size weights 1-2 % of the codes of two codebooks changed. `encode_backend="cpu"`
runs the encoder on the CPU (its weights live there, the decoder's stay on the GPU) and gives the reference's
codes exactly. Decoding feeds at most `window_frames` frames of one sequence to a graph: longer sequences go in
windows that overlap by `context_frames` on each side, of which only the centre is kept. The decoder's receptive
field is about 12 frames each way (conv1 3, block 0's transposed conv 2 and residual units 39 samples at 8 per
frame, the later blocks about 1.5 together), so with 16 frames of context the windows give the samples of one
whole-sequence graph. The windows and short sequences of one call are packed side by side into graphs of at most
`max_decode_frames` frames, each decoded as if alone (models.dac.masked). The graphs run one after the other:
`decode_iter` hands back each sequence once the run holding its last window is read, the next run already
launched, so that on a GPU the caller's work on it (post-processing) overlaps that run.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ..ggml import Graph, Runtime, WeightStore
from ..gguf import open_model
from ..loaders import codec as loader
from ..models import codec as model
from ..nn import fma
from .lm import products_choice

log = logging.getLogger("omnivoice")

DEFAULT_WINDOW_FRAMES = 512
DEFAULT_CONTEXT_FRAMES = 16
# Sequences decoded together are packed side by side into one graph, DECODE_GAP_FRAMES zero frames apart (the
# widest reach of one convolution, at any rate: a residual unit's kernel of 7 at dilation 9 after the first
# upsampling by 8, 27 samples, 3.4 frames; models.dac.masked), every graph of a call but its last padded to
# max_decode_frames and the last rounded up to DECODE_ROUND_FRAMES, so that graphs serve many compositions. A
# sequence as a 680-node chain of its own in a shared graph took about twice as long on a GPU for 64 five-second
# sequences as packed graphs of 1024 frames. On a GPU a packed sequence's samples differ from its lone decode's
# in the last bits (other product kernels for other widths: 3.6e-6 at most there, 1.1e-3 with TF32); on the CPU
# they are the same.
DECODE_GAP_FRAMES = 4
DECODE_ROUND_FRAMES = 16
MAX_ENCODE_CHAINS = 8  # encoder chains in one graph: 1487 nodes each with the full codec (channels-last DAC)
DEFAULT_MAX_ENCODE_SAMPLES = 24000 * 40  # samples per encode graph: its im2col buffers grow with them


@dataclass(frozen=True)
class _Window:
    seq: int      # which input sequence
    start: int    # frames [start, stop) are fed to the graph
    stop: int
    keep0: int    # frames [keep0, keep1) of the sequence come out of this window
    keep1: int


@dataclass(frozen=True)
class _Run:
    windows: tuple[_Window, ...]  # packed side by side, in order
    starts: tuple[int, ...]       # the graph frame where each window's frames begin
    frames: int                   # the graph's length


class AudioCodec:
    """The codec on one runtime: `decode` codes to 24 kHz audio, `encode` 24 kHz audio to codes."""

    def __init__(self, runtime: Runtime, weights: model.CodecWeights, config: model.CodecConfig, *,
                 encode_runtime: Runtime | None = None, encode_weights: model.CodecWeights | None = None,
                 window_frames: int = DEFAULT_WINDOW_FRAMES, context_frames: int = DEFAULT_CONTEXT_FRAMES,
                 max_decode_frames: int | None = None, max_graphs: int | None = None,
                 max_encode_samples: int = DEFAULT_MAX_ENCODE_SAMPLES, metadata: dict | None = None,
                 owns: tuple = ()) -> None:
        """Wrap loaded weights (use `load_codec`); `owns` (stores, runtimes) are closed with it.

        The encoder runs on `encode_runtime` with `encode_weights` when given, else on `runtime` with `weights`.
        `max_decode_frames` caps the frames of sequences packed into one decode graph (default: two windows on
        a GPU, one on the CPU; the full-size decoder's graph takes ~1.1 MiB a frame; halved, down to a window,
        where a graph does not fit in the device's memory). `max_graphs`: decode and encode graphs kept for
        reuse (default: 8 on a GPU, where a new graph's build, allocation and CUDA graph capture cost more than a
        one-sentence decode, so that the lengths of a server's varied requests each keep theirs; 2 on the CPU).
        `metadata` is the file's,
        for callers that check a model and a codec belong together.
        """
        if context_frames < 0 or window_frames <= 2 * context_frames:
            raise ValueError(f"window_frames ({window_frames}) must exceed 2 * context_frames ({context_frames})")
        self.runtime = runtime
        self.weights = weights
        self.encode_runtime = encode_runtime or runtime
        self.encode_weights = encode_weights or weights
        self.config = config
        self.metadata = metadata or {}
        self.window_frames = int(window_frames)
        self.context_frames = int(context_frames)
        if max_decode_frames is None:
            max_decode_frames = window_frames * (2 if runtime.is_gpu else 1)
        self.max_decode_frames = max(self._decode_frames_floor(), -(-int(max_decode_frames) // DECODE_ROUND_FRAMES)
                                     * DECODE_ROUND_FRAMES)
        if max_graphs is None:
            max_graphs = 8 if runtime.is_gpu else 2
        self.max_graphs = max(1, int(max_graphs))
        self.max_encode_samples = int(max_encode_samples)
        self._graphs: OrderedDict[tuple, Graph] = OrderedDict()
        self._owns = tuple(owns)
        self._closed = False

    # ---------------------------------------------------------------------------------------- properties
    @property
    def sample_rate(self) -> int:
        """Audio rate of encode's input and decode's output (24000)."""
        return self.config.sample_rate

    @property
    def hop_length(self) -> int:
        """Samples per code frame (960)."""
        return self.config.hop_length

    @property
    def frame_rate(self) -> float:
        """Code frames per second (25.0)."""
        return self.config.frame_rate

    @property
    def n_codebooks(self) -> int:
        return self.config.n_quantizers

    @property
    def codebook_size(self) -> int:
        return self.config.codebook_size

    @property
    def can_encode(self) -> bool:
        return self.encode_weights.can_encode

    @property
    def can_decode(self) -> bool:
        return self.weights.can_decode

    # ---------------------------------------------------------------------------------------- graphs
    def _graph(self, key: tuple, build: Callable[[Graph], None], runtime: Runtime, what: str) -> Graph:
        g = self._graphs.get(key)
        if g is not None:
            self._graphs.move_to_end(key)
            return g
        while len(self._graphs) >= self.max_graphs:
            self._graphs.popitem(last=False)[1].close()
        g = Graph(runtime, what=what, pooled=False)  # cached: buffers sized for it, not a pooled scheduler's
        try:
            build(g)
            g.allocate()
        except BaseException:
            g.close()
            raise
        self._graphs[key] = g
        return g

    def _decode_frames_floor(self) -> int:
        """The fewest frames a decode graph must take: a whole window and its gap, rounded up (a multiple of the
        rounding, so that rounding a run never passes max_decode_frames)."""
        return -(-(self.window_frames + DECODE_GAP_FRAMES) // DECODE_ROUND_FRAMES) * DECODE_ROUND_FRAMES

    def _check_open(self) -> None:
        if self._closed:  # the weight records (shapes read for planning too) point at freed memory
            raise RuntimeError("this AudioCodec is closed")

    def clear_graphs(self) -> None:
        """Free every cached graph and its compute buffers."""
        while self._graphs:
            self._graphs.popitem()[1].close()

    # ---------------------------------------------------------------------------------------- decode
    def check_codes(self, codes, what: str = "codes") -> np.ndarray:
        """Validate codes [n_codebooks, T] (integers in [0, codebook_size), T >= 1); return them as int32."""
        a = np.asarray(codes)
        if a.dtype.kind not in "iu":
            raise TypeError(f"{what}: expected integer codes, got dtype {a.dtype}")
        if a.ndim != 2 or a.shape[0] != self.n_codebooks or a.shape[1] == 0:
            raise ValueError(f"{what}: expected shape [{self.n_codebooks}, T] with T >= 1, got {list(a.shape)}")
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= self.codebook_size:
            raise ValueError(f"{what}: code values must lie in [0, {self.codebook_size}); got min {lo}, max {hi}")
        return np.ascontiguousarray(a, dtype=np.int32)

    def _windows(self, seq: int, T: int) -> list[_Window]:
        if T <= self.window_frames:
            return [_Window(seq, 0, T, 0, T)]
        core = self.window_frames - 2 * self.context_frames
        core = -(-T // -(-T // core))  # equal cores, so a long sequence replays one graph
        return [_Window(seq, max(0, s - self.context_frames), min(T, s + core + self.context_frames),
                        s, min(T, s + core)) for s in range(0, T, core)]

    def decode_iter(self, codes_list: Sequence[np.ndarray]) -> Iterator[tuple[int, np.ndarray]]:
        """Decode several code sequences [n_codebooks, T_i]: yield (i, float32 audio [T_i * hop], unprocessed) for
        each as soon as the graph run holding its last window has been read back, in input order.

        The sequences (windows of long ones) are packed side by side into as few graphs as `max_decode_frames`
        allows, each decoded as if alone (models.dac.masked). Run k+1 is launched before the sequences that run k
        completed are yielded: on a GPU the caller's work on them overlaps it (the CPU backend computes at launch).
        Nothing is checked or run before the first item is asked for.
        """
        self._check_open()
        if not self.can_decode:
            raise RuntimeError("this codec was loaded without its decoder (parts=('encode',))")
        seqs = [self.check_codes(c, f"codes[{i}]" if len(codes_list) > 1 else "codes")
                for i, c in enumerate(codes_list)]
        left = dict.fromkeys(range(len(seqs)))  # the sequences not yielded yet
        g: Graph | None = None  # the graph of the run on the device: launched, not read yet
        try:
            while left:
                runs = self._decode_runs(seqs, list(left))
                pieces: dict[int, list[np.ndarray]] = {}
                for k in range(len(runs) + 1):
                    # Run k-1's outputs are read before run k is launched: runs of one length share a graph.
                    done = self._read_run(g, runs[k - 1], seqs, pieces) if g is not None else []
                    g = None
                    if k < len(runs):
                        g = self._launch_run(seqs, runs[k])
                    for i, audio in done:
                        del left[i]
                        yield i, audio
                    if g is None:  # every run read, or run k did not fit: the sequences left are planned again
                        break      # (those partly decoded redone whole)
        finally:
            if g is not None:  # the caller stopped early: the run ends before its graph's next launch
                g.wait()

    def decode_batch(self, codes_list: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Decode several code sequences [n_codebooks, T_i] -> float32 audio [T_i * hop] each, unprocessed:
        decode_iter's audio in input order."""
        return [audio for _, audio in self.decode_iter(codes_list)]

    def _decode_runs(self, seqs: list[np.ndarray], which: list[int]) -> list[_Run]:
        """The windows of sequences `which`, in order, packed into runs of at most max_decode_frames frames."""
        packed: list[list[_Window]] = []
        used = 0  # frames of the last run, the gap after each window included
        for w in (w for i in which for w in self._windows(i, seqs[i].shape[1])):
            n = w.stop - w.start + DECODE_GAP_FRAMES
            if packed and used + n <= self.max_decode_frames:
                packed[-1].append(w)
                used += n
            else:
                packed.append([w])
                used = n
        runs = []
        for i, run in enumerate(packed):
            starts = np.cumsum([0] + [w.stop - w.start + DECODE_GAP_FRAMES for w in run])
            # Every run but the last is full (within a window) and padded to the same length: one graph for all.
            T = (self.max_decode_frames if i < len(packed) - 1 else
                 -(-(int(starts[-1]) - DECODE_GAP_FRAMES) // DECODE_ROUND_FRAMES) * DECODE_ROUND_FRAMES)
            runs.append(_Run(tuple(run), tuple(int(a) for a in starts[:-1]), T))
        return runs

    def _launch_run(self, seqs: list[np.ndarray], run: _Run) -> Graph | None:
        """Launch the run on its graph (built first where not cached) and return the graph; None where the graph
        does not fit: max_decode_frames is lowered then (MemoryError where the graph holds only a window)."""
        T = run.frames

        def build(g: Graph) -> None:
            c = g.input("codes", np.int32, (self.n_codebooks, T))
            m = g.input("mask", np.float32, (T, 1, 1))
            g.output("audio", model.build_decode(g.ctx, self.weights, self.config, c, m))

        try:
            g = self._graph(("decode", T), build, self.runtime, f"the codec decoder's graph for {T} frames")
        except MemoryError:
            floor = self._decode_frames_floor()
            if T <= floor:
                raise
            # a device with less memory left than the packing assumed: smaller graphs from now on
            self.max_decode_frames = max(floor, T // 2 // DECODE_ROUND_FRAMES * DECODE_ROUND_FRAMES)
            log.warning("decode graph of %d frames does not fit: packing at most %d frames from now on",
                        T, self.max_decode_frames)
            return None
        codes = np.zeros((self.n_codebooks, T), np.int32)
        mask = np.zeros((T, 1, 1), np.float32)  # ggml [1, 1, T]
        for a, w in zip(run.starts, run.windows):
            codes[:, a:a + w.stop - w.start] = seqs[w.seq][:, w.start:w.stop]
            mask[a:a + w.stop - w.start] = 1.0
        g.launch(codes=codes, mask=mask)
        return g

    def _read_run(self, g: Graph, run: _Run, seqs: list[np.ndarray], pieces: dict[int, list[np.ndarray]]
                  ) -> list[tuple[int, np.ndarray]]:
        """Wait for the run and add its windows' kept audio to `pieces`; returns the sequences it completed."""
        g.wait()
        audio = g.read_outputs(["audio"])["audio"].reshape(-1)
        hop = self.hop_length
        done = []
        for a, w in zip(run.starts, run.windows):
            pieces.setdefault(w.seq, []).append(audio[(a + w.keep0 - w.start) * hop:(a + w.keep1 - w.start) * hop])
            if w.keep1 == seqs[w.seq].shape[1]:  # its last window
                p = pieces.pop(w.seq)
                done.append((w.seq, p[0] if len(p) == 1 else np.concatenate(p)))
        return done

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """Decode codes [n_codebooks, T] -> float32 audio [T * hop] at sample_rate (the reference's decode)."""
        return self.decode_batch([codes])[0]

    # ---------------------------------------------------------------------------------------- encode
    def encode(self, audio: np.ndarray, return_intermediates: bool = False):
        """Encode mono float audio [N] at sample_rate -> int32 codes [n_codebooks, T].

        Exactly the reference tokenizer's encode: the reference-clip preprocessing (loudness, silence trim,
        hop truncation) is omnivoice.audio.preprocess_reference's job, applied by the caller. With
        `return_intermediates` also returns numpy arrays laid out as the reference's tensors (batch dropped):
        semantic_features [T, 768] (HuBERT mean hidden state, every 2nd frame), e_semantic and e_acoustic
        [C, T], latent [1024, T] (after fc).
        """
        self._check_open()
        if not return_intermediates:
            return self.encode_batch([audio])[0]
        names = ("semantic_features", "e_semantic", "e_acoustic", "latent")
        a, a16, pad = self._encode_input(audio)

        def build(g: Graph) -> None:
            self._encode_chain(g, "", a.shape, a16.shape, pad, names)

        g = self._graph(("encode", a.shape[0], True), build, self.encode_runtime,
                        f"the codec encoder's graph for {a.shape[0] / self.config.sample_rate:.1f} s of audio")
        out = g.compute(audio=a, audio16=a16)
        codes = np.stack([out[f"codes_{k}"].reshape(-1) for k in range(self.n_codebooks)]).astype(np.int32)
        return codes, {"semantic_features": out["semantic_features"], "e_semantic": out["e_semantic"],
                       "e_acoustic": out["e_acoustic"], "latent": np.ascontiguousarray(out["latent"].T)}

    def encode_batch(self, clips: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Encode several mono clips [N_i] at sample_rate -> int32 codes [n_codebooks, T_i] each, the codes
        `encode` gives for each alone: clips share graphs, one chain each (at most MAX_ENCODE_CHAINS and
        max_encode_samples samples per graph), so one graph is built for several reference lengths."""
        self._check_open()
        if not self.can_encode:
            raise RuntimeError("this codec was loaded without its encoder (parts=('decode',))")
        inputs = [self._encode_input(c, f"clips[{i}]" if len(clips) > 1 else "audio") for i, c in enumerate(clips)]
        runs: list[list[int]] = []
        for i, (a, _, _) in enumerate(inputs):
            if (runs and len(runs[-1]) < MAX_ENCODE_CHAINS
                    and sum(inputs[j][0].shape[0] for j in runs[-1]) + a.shape[0] <= self.max_encode_samples):
                runs[-1].append(i)
            else:
                runs.append([i])
        codes: list[np.ndarray] = [None] * len(inputs)  # type: ignore[list-item]
        for run in runs:
            shapes = tuple((inputs[i][0].shape, inputs[i][1].shape, inputs[i][2]) for i in run)

            def build(g: Graph, shapes=shapes) -> None:
                for j, (shape, shape16, pad) in enumerate(shapes):
                    self._encode_chain(g, str(j), shape, shape16, pad)

            seconds = sum(inputs[i][0].shape[0] for i in run) / self.config.sample_rate
            g = self._graph(("encode",) + shapes, build, self.encode_runtime,
                            f"the codec encoder's graph for {len(run)} clips, {seconds:.1f} s of audio")
            feed = {}
            for j, i in enumerate(run):
                feed[f"audio{j}"], feed[f"audio16{j}"] = inputs[i][0], inputs[i][1]
            out = g.compute(**feed)
            for j, i in enumerate(run):
                codes[i] = np.stack([out[f"codes{j}_{k}"].reshape(-1)
                                     for k in range(self.n_codebooks)]).astype(np.int32)
        return codes

    def _encode_input(self, audio: np.ndarray, what: str = "audio") -> tuple[np.ndarray, np.ndarray, bool]:
        """Checked float32 samples, their 16 kHz resampling, and whether the acoustic input is padded."""
        from ..audio import resample

        a = np.asarray(audio)
        if a.dtype.kind != "f":
            raise TypeError(f"{what}: expected floating point samples, got dtype {a.dtype}")
        if a.ndim == 2 and a.shape[0] == 1:
            a = a[0]
        if a.ndim != 1:
            raise ValueError(f"{what}: expected mono samples [N], got shape {list(a.shape)}")
        if a.size == 0 or not np.all(np.isfinite(a)):
            raise ValueError(f"{what}: empty, or contains NaN or infinite samples")
        cfg = self.config
        a = np.ascontiguousarray(a, dtype=np.float32)
        a16 = np.ascontiguousarray(resample(a, cfg.sample_rate, cfg.semantic_sample_rate), dtype=np.float32)
        _, pad = model.encode_plan(self.encode_weights, cfg, a.shape[0], a16.shape[0])
        return a, a16, pad

    def _encode_chain(self, g: Graph, tag: str, shape, shape16, pad: bool, names: Sequence[str] = ()) -> None:
        """One clip's encoder in graph g: inputs audio{tag}, audio16{tag}; outputs codes{tag}_{k} and `names`."""
        out = model.build_encode(g.ctx, self.encode_weights, self.config, g.input(f"audio{tag}", np.float32, shape),
                                 g.input(f"audio16{tag}", np.float32, shape16), pad,
                                 contiguous_qk=self.encode_runtime.products_need_contiguous,
                                 cpu=not self.encode_runtime.is_gpu)
        for k, code in enumerate(out["codes"]):
            g.output(f"codes{tag}_{k}", code)
        for n in names:
            g.output(n, out[n])

    # ---------------------------------------------------------------------------------------- lifetime
    def close(self) -> None:
        """Free the graphs, then what this object owns (its weights and runtime when load_codec made them)."""
        self._closed = True
        self.clear_graphs()
        for obj in self._owns:
            obj.close()
        self._owns = ()

    def __enter__(self) -> "AudioCodec":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def fma_convs(runtime: Runtime, cpu_products: str | None = None) -> bool:
    """Whether the DAC's convolutions on `runtime` run on the package's FMA kernel (nn.fma; float32, like ggml's
    products): on the CPU backend where the CPU and build have it, unless `cpu_products` (default
    OMNIVOICE_CPU_PRODUCTS; runners.lm.products_choice) is "ggml". ggml's products stream the DAC's column buffer
    once per group of rows; the kernel reads x where it lies, and the decode takes about 60 % of the time with it
    (tools/op_profile.py decode; BENCHMARKS.md)."""
    return not runtime.is_gpu and products_choice(cpu_products) != "ggml" and fma.available()


def load_codec(path: str | Path, backend: str = "auto", *, threads: int | None = None,
               runtime: Runtime | None = None, parts: Sequence[str] = model.PARTS,
               encode_backend: str | None = None, cpu_products: str | None = None, **options) -> AudioCodec:
    """Load the codec GGUF (arch omnivoice-tokenizer) onto `runtime`, or onto a new Runtime(backend, threads)
    that the codec then owns and closes.

    `parts` limits what is uploaded: ("decode",) for synthesis only, ("encode",) for voice-cloning prompts.
    `encode_backend` (e.g. "cpu") puts the encoder on a runtime of its own, see the module docstring.
    `cpu_products` "ggml" keeps ggml's products for the DAC's convolutions on the CPU (see fma_convs).
    Extra keyword options go to AudioCodec (window_frames, context_frames, max_graphs).
    """
    products_choice(cpu_products)  # a bad name is an error whatever the backend
    f = open_model(path, loader.ARCH)
    config = loader.read_config(f)
    parts = tuple(parts)
    if encode_backend is not None and "decode" not in parts:  # encode only: the encoder's runtime is the codec's
        if runtime is not None:
            raise ValueError("an encode-only codec takes runtime or encode_backend, not both")
        backend, encode_backend = encode_backend, None
    owned: list = []
    try:
        if runtime is None:
            runtime = Runtime(backend, n_threads=threads)
            owned.append(runtime)
        split = encode_backend is not None and "encode" in parts
        weights, store = loader.load_weights(runtime, f, config, ("decode",) if split else parts,
                                             fma_convs=fma_convs(runtime, cpu_products))
        owned.append(store)
        enc_runtime = enc_weights = None
        if split:
            enc_runtime = Runtime(encode_backend, n_threads=threads)
            owned.append(enc_runtime)
            enc_weights, enc_store = loader.load_weights(enc_runtime, f, config, ("encode",),
                                                         fma_convs=fma_convs(enc_runtime, cpu_products))
            owned.append(enc_store)
    except BaseException:
        for obj in reversed(owned):
            obj.close()
        raise
    # weights before runtimes: a buffer must be freed while its backend lives
    owns = tuple(o for o in owned if isinstance(o, WeightStore)) + tuple(o for o in owned if isinstance(o, Runtime))
    return AudioCodec(runtime, weights, config, encode_runtime=enc_runtime, encode_weights=enc_weights,
                      metadata=f.metadata, owns=owns, **options)
