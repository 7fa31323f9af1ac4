"""Codec parity on the tiny checkpoint: our ggml graphs against the PyTorch reference's dumped outputs.

On a GPU backend (OMNIVOICE_TEST_BACKEND=cuda) ggml computes F32 matrix products in TF32, so the float
comparisons use TF32-sized tolerances there, and exact codes are asked of the encoder placed on the CPU
(encode_backend="cpu"); the GPU encoder must still agree on most codes.

Goldens: tests/golden/codec_tiny.npz, regenerated with
    python3 tools/make_checkpoint.py --preset tiny --seed 0 -o /tmp/ckpt-tiny
    .venv-ref/bin/python tools/reference/goldens.py codec /tmp/ckpt-tiny -o tests/golden/codec_tiny.npz
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from omnivoice.codec import AudioCodec, load_codec
from omnivoice.ggml import WeightStore
from omnivoice.models import codec as model

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "codec_tiny.npz"
REGENERATE = ("python3 tools/make_checkpoint.py --preset tiny --seed 0 -o /tmp/ckpt-tiny && "
              ".venv-ref/bin/python tools/reference/goldens.py codec /tmp/ckpt-tiny -o tests/golden/codec_tiny.npz")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def golden(tiny_checkpoint) -> dict:
    g = dict(np.load(GOLDEN))
    meta = json.loads(str(g["meta_json"]))
    sha = hashlib.sha256((tiny_checkpoint / "audio_tokenizer" / "model.safetensors").read_bytes()).hexdigest()
    assert meta["audio_tokenizer_sha256"] == sha, (
        f"{GOLDEN} was made from another tiny checkpoint (make_checkpoint.py changed); regenerate: {REGENERATE}")
    return g


@pytest.fixture(scope="module")
def codec(tiny_gguf, backend_spec):
    with load_codec(tiny_gguf["codec"], backend_spec) as c:
        yield c


@pytest.fixture(scope="module")
def exact(codec, tiny_gguf, backend_spec):
    """The codec whose encoder computes in full float32: the test codec itself on the CPU."""
    if not codec.runtime.is_gpu:
        yield codec
        return
    with load_codec(tiny_gguf["codec"], backend_spec, encode_backend="cpu") as c:
        yield c


def tol(codec, cpu: float, gpu: float) -> float:
    """Error bound for this backend: float32 on the CPU, TF32 products on a GPU."""
    return gpu if codec.runtime.is_gpu else cpu


# ------------------------------------------------------------------------------------------------ encode

@pytest.mark.parametrize("clip, padded", [("a", False), ("b", True)])
def test_encode_codes_identical_to_reference(exact, golden, clip, padded):
    audio = golden[f"clip_{clip}"]
    # clip a is a whole number of frames (acoustic stream unpadded), clip b is not (padded 480 each side)
    from omnivoice.audio import resample
    n16 = resample(audio, 24000, 16000).shape[0]
    assert model.encode_plan(exact.encode_weights, exact.config, audio.shape[0], n16) == \
        (golden[f"codes_{clip}"].shape[1], padded)
    codes = exact.encode(audio)
    ref = golden[f"codes_{clip}"]
    assert codes.dtype == np.int32 and codes.shape == ref.shape
    agree = (codes == ref).mean(axis=1)
    assert np.array_equal(codes, ref), f"per-codebook agreement {np.round(agree, 3).tolist()}"


def test_encode_on_the_test_backend(codec, golden):
    """Whatever the backend, its own encoder must give nearly all of the reference's codes."""
    codes = codec.encode(golden["clip_a"])
    agree = float(np.mean(codes == golden["codes_a"]))
    assert agree >= tol(codec, 1.0, 0.9), f"agreement {agree:.4f}"


def test_encode_intermediates_match_reference(codec, golden):
    _, inter = codec.encode(golden["clip_a"], return_intermediates=True)
    for name, ref_name in (("semantic_features", "semantic_a"), ("e_semantic", "e_semantic_a"),
                           ("e_acoustic", "e_acoustic_a"), ("latent", "latent_a")):
        ours, ref = inter[name], golden[ref_name]
        assert ours.shape == ref.shape, name
        err = np.abs(ours - ref).max()
        assert err <= tol(codec, 1e-5, 5e-3) * max(1.0, np.abs(ref).max()), f"{name}: max error {err:.3g}"


def test_voice_clone_prompt_codes_identical_to_reference(exact, golden):
    """The reference's create_voice_clone_prompt = the audio layer's preprocess_reference + our encode."""
    from omnivoice.audio import preprocess_reference

    clip, rms = preprocess_reference(golden["clip_c"], 24000)
    assert rms == pytest.approx(float(golden["prompt_rms_c"]), rel=1e-6)
    assert np.array_equal(exact.encode(clip), golden["prompt_codes_c"])


def test_encode_rejects_bad_audio(codec):
    with pytest.raises(ValueError, match="too short"):
        codec.encode(np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="NaN"):
        codec.encode(np.full(24000, np.nan, np.float32))
    with pytest.raises(ValueError, match="mono"):
        codec.encode(np.zeros((2, 24000), np.float32))
    with pytest.raises(TypeError, match="floating point"):
        codec.encode(np.zeros(24000, np.int16))


def test_a_closed_codec_refuses_work(tiny_gguf, backend_spec):
    c = load_codec(tiny_gguf["codec"], backend_spec)
    c.close()
    with pytest.raises(RuntimeError, match="closed"):   # its weight records point at freed memory
        c.decode(np.zeros((c.n_codebooks, 10), np.int32))
    with pytest.raises(RuntimeError, match="closed"):
        c.encode(np.zeros(4 * c.sample_rate, np.float32))
    c.close()


# ------------------------------------------------------------------------------------------------ decode

@pytest.mark.parametrize("case", ["dec_0", "dec_1", "a"])
def test_decode_matches_reference(codec, golden, case):
    codes = golden["codes_a"] if case == "a" else golden[f"dec_codes_{case[-1]}"]
    ref = golden["dec_audio_a"] if case == "a" else golden[f"dec_audio_{case[-1]}"]
    audio = codec.decode(codes)
    assert audio.dtype == np.float32 and audio.shape == (960 * codes.shape[1],) == ref.shape
    err = np.abs(audio - ref).max()
    assert cosine(audio, ref) >= 0.9999, f"cosine {cosine(audio, ref):.6f}, max error {err:.3g}"
    # measured 1.5e-6 on the CPU against peaks of 0.45 (TF32 on CUDA: about 1e-3)
    assert err <= tol(codec, 2e-5, 1e-2), f"max error {err:.3g}"


def test_decode_batch_equals_single_decodes(codec, golden):
    codes = [golden["dec_codes_0"], golden["dec_codes_1"], golden["codes_a"]]
    batch = codec.decode_batch(codes)
    for c, got in zip(codes, batch):
        np.testing.assert_allclose(got, codec.decode(c), rtol=0, atol=tol(codec, 1e-6, 1e-4))
    np.testing.assert_allclose(batch[1], golden["dec_audio_1"], rtol=0, atol=tol(codec, 2e-5, 1e-2))


def test_decode_batch_of_many_short_sequences(codec, rng):
    """Short sequences packed a few frames apart, over more graphs than one: each decodes as it does alone,
    order kept (a gap narrower than a convolution's reach would mix neighbours: the control below)."""
    from omnivoice.runners import codec as runner

    seqs = [rng.integers(0, codec.codebook_size, (codec.n_codebooks, int(rng.integers(1, 6)))) for _ in range(30)]
    small = AudioCodec(codec.runtime, codec.weights, codec.config, window_frames=40, context_frames=16,
                       max_decode_frames=48)
    try:
        out = small.decode_batch(seqs)
        assert [len(a) for a in out] == [960 * s.shape[1] for s in seqs]
        assert sum(s.shape[1] + runner.DECODE_GAP_FRAMES for s in seqs) > 2 * small.max_decode_frames  # 3+ runs
        for i in range(len(seqs)):
            np.testing.assert_allclose(out[i], codec.decode(seqs[i]), rtol=0, atol=tol(codec, 1e-6, 1e-2))
        runner.DECODE_GAP_FRAMES, gap = 1, runner.DECODE_GAP_FRAMES
        try:
            mixed = small.decode_batch(seqs)
        finally:
            runner.DECODE_GAP_FRAMES = gap
        # 0.3 measured on the CPU, 0.27 on the H200, against peaks of 0.45
        assert max(np.abs(a - b).max() for a, b in zip(mixed, out)) > 0.1 * max(np.abs(a).max() for a in out)
    finally:
        small.close()


def test_decode_batch_packs_less_where_memory_is_short(codec, rng, monkeypatch):
    """A packed decode graph that does not fit (MemoryError from its allocation) halves the packing, down to a
    window, and the call still gives every sequence; a window that does not fit fails as before."""
    small = AudioCodec(codec.runtime, codec.weights, codec.config, window_frames=40, context_frames=16,
                       max_decode_frames=176)
    real = AudioCodec._graph

    def graph(self, key, *args):
        if key[0] == "decode" and key[1] > 48:
            raise MemoryError(f"the codec decoder's graph for {key[1]} frames needs more than there is")
        return real(self, key, *args)

    monkeypatch.setattr(AudioCodec, "_graph", graph)
    try:
        seqs = [rng.integers(0, codec.codebook_size, (codec.n_codebooks, 20)) for _ in range(6)]
        out = small.decode_batch(seqs)
        assert small.max_decode_frames == 48
        for s, a in zip(seqs, out):
            np.testing.assert_allclose(a, codec.decode(s), rtol=0, atol=tol(codec, 1e-6, 1e-2))
        monkeypatch.setattr(AudioCodec, "_graph", lambda self, key, *a: (_ for _ in ()).throw(MemoryError("none")))
        with pytest.raises(MemoryError):
            small.decode_batch(seqs[:1])
    finally:
        small.close()


def test_decode_iter_yields_each_sequence_as_its_last_run_is_read(codec, rng, monkeypatch):
    """decode_iter gives each sequence once, in order, with decode_batch's audio bit for bit (equal to its lone
    decode on the CPU), as soon as the run holding its last window is read: the next run already launched on the
    graph all full runs share, its outputs read first. A caller that stops early leaves the codec usable."""
    from omnivoice.ggml import Graph

    lens = [3, 1, 5, 2, 70, 4, 6, 2, 3]  # 70 frames: 9 windows of at most 40, over as many runs
    seqs = [rng.integers(0, codec.codebook_size, (codec.n_codebooks, n)) for n in lens]
    small = AudioCodec(codec.runtime, codec.weights, codec.config, window_frames=40, context_frames=16,
                       max_decode_frames=48)
    try:
        batch = small.decode_batch(seqs)
        runs = small._decode_runs([np.asarray(s) for s in seqs], list(range(len(seqs))))
        last_run = {w.seq: k for k, r in enumerate(runs) for w in r.windows}
        assert len(runs) > 3 and len({last_run[i] for i in range(len(seqs))}) > 2
        launches = []
        real = Graph.launch
        monkeypatch.setattr(Graph, "launch", lambda g, **inputs: (launches.append(1), real(g, **inputs))[1])
        got = [(i, a, len(launches)) for i, a in small.decode_iter(seqs)]
        monkeypatch.undo()
        assert [i for i, _, _ in got] == list(range(len(seqs)))
        for i, a, launched in got:
            assert launched == min(last_run[i] + 2, len(runs)), f"sequence {i}: {launched} runs launched"
            np.testing.assert_array_equal(a, batch[i])
            np.testing.assert_allclose(a, small.decode(seqs[i]), rtol=0, atol=tol(codec, 0.0, 1e-2))
        it = small.decode_iter(seqs)
        next(it)
        it.close()  # run 1 still launched: waited for
        for a, b in zip(small.decode_batch(seqs), batch):
            np.testing.assert_array_equal(a, b)
    finally:
        small.close()


def test_decode_iter_replans_what_is_left_when_a_graph_does_not_fit(codec, rng, monkeypatch):
    """A full run's graph that does not fit once sequences have been yielded (and a long one is partly decoded):
    the packing is halved and only the sequences not given yet are decoded again, each once, whole."""
    lens = [5] * 10 + [70] + [5] * 5  # runs of 96: ten short ones, then the long one's windows over several
    seqs = [rng.integers(0, codec.codebook_size, (codec.n_codebooks, n)) for n in lens]
    small = AudioCodec(codec.runtime, codec.weights, codec.config, window_frames=40, context_frames=16,
                       max_decode_frames=96)
    real, calls, got, failed_after = AudioCodec._graph, [], [], []

    def graph(self, key, *args):
        calls.append(key)
        if calls.count(("decode", 96)) == 3 and not failed_after:  # run 2: run 0 given, the long one begun
            failed_after.append(len(got))
            raise MemoryError("the codec decoder's graph for 96 frames needs more than there is (test)")
        return real(self, key, *args)

    monkeypatch.setattr(AudioCodec, "_graph", graph)
    try:
        got.extend((i, a) for i, a in small.decode_iter(seqs))
        monkeypatch.undo()
        assert failed_after == [10] and small.max_decode_frames == 48
        assert [i for i, _ in got] == list(range(len(seqs)))
        for i, a in got:
            np.testing.assert_allclose(a, codec.decode(seqs[i]), rtol=0, atol=tol(codec, 0.0, 1e-2))
    finally:
        small.close()


def test_windowed_decode_equals_whole(codec, rng):
    codes = rng.integers(0, codec.codebook_size, (codec.n_codebooks, 70))
    whole = codec.decode(codes)
    windowed = AudioCodec(codec.runtime, codec.weights, codec.config, window_frames=40, context_frames=16)
    try:
        got = windowed.decode(codes)
        assert len(windowed._windows(0, 70)) > 3
        assert got.shape == whole.shape
        err = np.abs(got - whole).max()
        # same math, other GEMM shapes: llamafile's sgemm (CPU) tiles by shape, so sums reassociate (1e-6
        # relative seen); on CUDA other shapes pick other kernels, which round to TF32 differently. A seam is
        # five orders of magnitude larger (the control below).
        assert err <= tol(codec, 1e-5, 1e-2) * np.abs(whole).max(), f"seam: max error {err:.3g}"
        # too little context must show (so the comparison above can fail)
        short = AudioCodec(codec.runtime, codec.weights, codec.config, window_frames=40, context_frames=2)
        try:
            assert np.abs(short.decode(codes) - whole).max() > 0.05 * np.abs(whole).max()  # 0.5 measured
        finally:
            short.close()
    finally:
        windowed.close()  # owns nothing: the shared weights stay


def test_graphs_are_cached_per_packed_length(codec, rng):
    """A decode graph serves every batch whose packed length rounds up to its own (9 frames, 16, two 5-frame
    sequences and their gap: 16); the cache keeps max_graphs of them."""
    codec.clear_graphs()
    codes = rng.integers(0, codec.codebook_size, (codec.n_codebooks, 9))
    first = codec.decode(codes)
    graph = codec._graphs[("decode", 16)]
    np.testing.assert_array_equal(codec.decode(codes), first)
    codec.decode(codes[:, :1].repeat(16, axis=1))
    codec.decode_batch([codes[:, :5], codes[:, 4:]])
    assert list(codec._graphs) == [("decode", 16)] and codec._graphs[("decode", 16)] is graph
    for T in range(17, 16 * (codec.max_graphs + 1) + 1, 16):  # one graph more than it keeps
        codec.decode(codes[:, :1].repeat(T, axis=1))
    assert len(codec._graphs) <= codec.max_graphs and ("decode", 16) not in codec._graphs


def test_graph_nodes_are_named(codec, golden):
    """A dump or profile of a codec graph says which part each node belongs to."""
    from .test_lm import graph_names

    codec.clear_graphs()
    codec.decode(golden["dec_codes_0"])
    codec.encode(golden["clip_a"])
    decode, encode = (names for names in map(graph_names, codec._graphs.values()))
    assert {"rvq_latent", "fc2_out", "dec_conv_in", "dec_block-4"} <= decode
    assert {"hubert_feat-0", "hubert_layer-1", "hubert_mean", "sem_block-1", "enc_block-4", "fc_out",
            "rvq_proj_in-7"} <= encode


def test_decode_rejects_bad_codes(codec):
    with pytest.raises(ValueError, match=r"shape \[8, T\]"):
        codec.decode(np.zeros((7, 5), np.int32))
    with pytest.raises(ValueError, match=r"\[0, 1024\)"):
        codec.decode(np.full((8, 5), 1024))
    with pytest.raises(ValueError, match=r"\[0, 1024\)"):
        codec.decode(np.full((8, 5), -1))
    with pytest.raises(TypeError, match="integer"):
        codec.decode(np.zeros((8, 5), np.float32))
    with pytest.raises(ValueError, match="T >= 1"):
        codec.decode(np.zeros((8, 0), np.int32))


# ------------------------------------------------------------------------------------------------ loading

def test_config_read_from_gguf_metadata(tiny_gguf, runtime):
    from dataclasses import replace

    from omnivoice.gguf import open_model
    from omnivoice.loaders import ModelFileError, codec as loader

    f = open_model(tiny_gguf["codec"])
    cfg = loader.read_config(f)
    assert (cfg.sample_rate, cfg.hop_length, cfg.frame_rate, cfg.n_quantizers, cfg.codebook_size) == \
        (24000, 960, 25.0, 8, 1024)
    assert cfg.upsampling_ratios == (8, 5, 4, 2, 3) and cfg.semantic_downsample_factor == 2
    assert cfg.hubert.n_layer == 2 and cfg.hubert.pos_conv_groups == 16

    missing = dict(f.metadata)
    del missing["omnivoice.semantic.num_attention_heads"]
    with pytest.raises(ModelFileError, match="'omnivoice.semantic.num_attention_heads' is missing"):
        loader.read_config(replace(f, metadata=missing))
    with pytest.raises(ModelFileError, match="layout is 'ic_oc_k'; this build reads 'oc_k_ic'"):
        loader.read_config(replace(f, metadata={**f.metadata, "omnivoice.conv_transpose_layout": "ic_oc_k"}))
    # the same hop from other strides: the transposed convs' kernels no longer fit
    for key, value, match in (("omnivoice.acoustic.upsampling_ratios", [8, 5, 4, 3, 2],
                               r"'acoustic_decoder\.block\.3\.conv_t1\.weight' has ggml shape \[8, 16\], "
                               r"expected \[8, 24\]"),
                              ("omnivoice.n_codebooks", 9, r"'quantizer\.quantizers\.8\.codebook\.embed' is missing")):
        damaged = replace(f, metadata={**f.metadata, key: value})
        with pytest.raises(ModelFileError, match=match):
            loader.load_weights(runtime, damaged, loader.read_config(damaged))


def test_encoder_on_its_own_cpu_runtime(tiny_gguf, backend_spec, golden):
    with load_codec(tiny_gguf["codec"], backend_spec, encode_backend="cpu") as c:
        assert c.encode_runtime is not c.runtime and c.encode_runtime.device.kind == "cpu"
        assert c.weights.fc2 is not None and c.weights.fc is None
        assert c.encode_weights.fc is not None and c.encode_weights.fc2 is None
        assert np.array_equal(c.encode(golden["clip_b"]), golden["codes_b"])
        assert c.decode(golden["codes_b"]).shape == (960 * golden["codes_b"].shape[1],)


def test_load_decode_only_skips_the_encoder(tiny_gguf, backend_spec):
    with load_codec(tiny_gguf["codec"], backend_spec, parts=("decode",)) as c:
        assert c.can_decode and not c.can_encode
        assert c.weights.hubert is None and c.weights.quantizers[0].project_in is None
        store = next(o for o in c._owns if isinstance(o, WeightStore))
        assert not any(n.startswith(("semantic_model.", "acoustic_encoder.")) or "project_in" in n
                       for n in store.names())
        with pytest.raises(RuntimeError, match="without its encoder"):
            c.encode(np.zeros(24000, np.float32))


def test_load_rejects_non_codec_files(tiny_gguf, tmp_path):
    with pytest.raises(ValueError, match="omnivoice-tokenizer"):
        load_codec(tiny_gguf["f32"], "cpu")
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf")
    with pytest.raises(ValueError, match="not a GGUF"):
        load_codec(bad, "cpu")
    with pytest.raises(FileNotFoundError):
        load_codec(tmp_path / "missing.gguf", "cpu")
