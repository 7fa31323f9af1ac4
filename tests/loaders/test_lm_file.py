"""The LM file is checked before ggml sees it (issue 14.1), and its weight records hold exactly the file's tensors.

Each damaged file below changes one key or one tensor of the converted tiny model. Before the checks most of
them aborted the process inside ggml (GGML_ASSERT, "buffer pointer must be aligned"), one raised
ZeroDivisionError, one was silently accepted; now each is a clear error naming the file and what is wrong.
They are loaded in a subprocess, so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from omnivoice.ggml import ne_of, read_tensor
from omnivoice.ggml.graph import tensor_name
from omnivoice.gguf import keys as K, names as N, read_gguf
from omnivoice.loaders import ModelFileError

from ..gguf_edit import set_array_item, set_key, set_tensor, set_tensor_value
from .conftest import ROOT, load_in_subprocess

Q_NORM_0 = N.layer(N.LM_ATTN_Q_NORM, 0)
Q_PROJ_1 = N.layer(N.LM_ATTN_Q, 1)
DOWN_1 = N.layer(N.LM_FFN_DOWN, 1)

# name -> (edit of the tiny F32 LM file, what the error must say)
DAMAGE = {
    "head_count_kv_3": (lambda s, d: set_key(s, d, K.LM_HEAD_COUNT_KV, 3), r"head_count = 4 is not a multiple"),
    "head_count_kv_255": (lambda s, d: set_key(s, d, K.LM_HEAD_COUNT_KV, 255), r"head_count_kv = 255"),
    "head_count_0": (lambda s, d: set_key(s, d, K.LM_HEAD_COUNT, 0), r"head_count is 0, expected an integer >= 1"),
    "embedding_length_0": (lambda s, d: set_key(s, d, K.LM_EMBEDDING_LENGTH, 0), r"embedding_length is 0"),
    "feed_forward_length_0": (lambda s, d: set_key(s, d, K.LM_FEED_FORWARD_LENGTH, 0), r"feed_forward_length is 0"),
    "block_count_3": (lambda s, d: set_key(s, d, K.LM_BLOCK_COUNT, 3), r"'llm\.layers\.2\.[a-z_.]+' is missing"),
    "block_count_huge": (lambda s, d: set_key(s, d, K.LM_BLOCK_COUNT, 2**31 - 1),
                         r"block_count = 2147483647, but tensor 'llm\.layers\.2147483646\.input_layernorm\.weight' "
                         r"is missing \(the file holds the tensors of 2 layers\)"),
    "key_length_8": (lambda s, d: set_key(s, d, K.LM_KEY_LENGTH, 8), r"value_length = 16 differs"),
    "alignment_0": (lambda s, d: set_key(s, d, K.GENERAL_ALIGNMENT, 0), r"general\.alignment is 0, expected a power"),
    "alignment_3": (lambda s, d: set_key(s, d, K.GENERAL_ALIGNMENT, 3), r"general\.alignment is 3, expected a power"),
    "vocab_below_tokens": (lambda s, d: set_key(s, d, K.LM_VOCAB_SIZE, 1000), r"more than .*vocab_size = 1000"),
    "vocab_above_rows": (lambda s, d: set_key(s, d, K.LM_VOCAB_SIZE, 151677),
                         r"'llm\.embed_tokens\.weight' has ggml shape \[64, 151676\], expected \[64, 151677\]"),
    "audio_vocab_1026": (lambda s, d: set_key(s, d, K.AUDIO_VOCAB_SIZE, 1026), r"codebook_layer_offsets is \[0, 1025"),
    "audio_heads_rows": (lambda s, d: set_tensor(s, d, N.LM_AUDIO_HEADS, ne=(64, 8000)),
                         r"'audio_heads\.weight' has ggml shape \[64, 8000\], expected \[64, 8200\]"),
    "mask_id_1025": (lambda s, d: set_key(s, d, K.AUDIO_MASK_ID, 1025), r"audio_mask_id = 1025 is not an id below"),
    "rope_base_0": (lambda s, d: set_key(s, d, K.LM_ROPE_FREQ_BASE, 0.0), r"freq_base is 0\.0, expected a finite"),
    "rms_eps_nan": (lambda s, d: set_key(s, d, K.LM_RMS_EPS, float("nan")), r"epsilon is nan"),
    "offsets": (lambda s, d: set_array_item(s, d, K.CODEBOOK_LAYER_OFFSETS, 1, 1024), r"codebook_layer_offsets is"),
    "special_id": (lambda s, d: set_key(s, d, K.SPECIAL_TEXT_START, 151676), r"text_start = 151676 is not a token"),
    "q_norm_half": (lambda s, d: set_tensor(s, d, Q_NORM_0, ne=(8,)),
                    re.escape(f"'{Q_NORM_0}' has ggml shape [8], expected [16]")),
    "matrix_as_i32": (lambda s, d: set_tensor(s, d, Q_PROJ_1, ggml_type=26),
                      re.escape(f"'{Q_PROJ_1}' has type i32, expected one of f32, f16, bf16, q8_0")),
    "matrix_as_q4_0": (lambda s, d: set_tensor(s, d, Q_PROJ_1, ggml_type=2), r"has type q4_0, expected one of"),
    "norm_as_f16": (lambda s, d: set_tensor(s, d, N.LM_OUTPUT_NORM, ggml_type=1),
                    r"'llm\.norm\.weight' has type f16, expected f32"),
    "unknown_type": (lambda s, d: set_tensor(s, d, Q_PROJ_1, ggml_type=99), r"unknown ggml tensor type 99"),
    "removed_type": (lambda s, d: set_tensor(s, d, Q_PROJ_1, ggml_type=4), r"unknown ggml tensor type 4"),
    "misaligned_data": (lambda s, d: set_tensor(s, d, Q_PROJ_1, move_by=32),
                        r"starts at data offset \d+, not a multiple of general\.alignment = 64"),
    "tensor_twice": (lambda s, d: set_tensor(s, d, Q_PROJ_1, rename=N.layer(N.LM_ATTN_K, 1)),
                     r"tensor 'llm\.layers\.1\.self_attn\.k_proj\.weight' appears twice"),
    # files that loaded and gave finite audio, silently wrong (issue 56)
    "data_into_neighbour": (lambda s, d: set_tensor(s, d, DOWN_1, move_by=-64),
                            re.escape(f"tensor '{DOWN_1}' starts at data offset") + r" \d+, inside the data of "
                            r"'llm\.layers\.1\.mlp\.up_proj\.weight' before it .*overlapping or out-of-order"),
    "codebook_weights_nan": (lambda s, d: set_array_item(s, d, K.AUDIO_CODEBOOK_WEIGHTS, 0, float("nan")),
                             r"audio_codebook_weights is \[nan, 8\.0, .*expected 8 finite numbers"),
    "rms_eps_tiny": (lambda s, d: set_key(s, d, K.LM_RMS_EPS, 1e-45),
                     r"epsilon is 1\.4\d*e-45, expected an epsilon from 1e-12 to 0\.1"),
    "norm_nan": (lambda s, d: set_tensor_value(s, d, Q_NORM_0, 3, float("nan")),
                 re.escape(f"tensor '{Q_NORM_0}' holds 1 NaN or infinite value of 16")),
    "norm_inf": (lambda s, d: set_tensor_value(s, d, N.LM_OUTPUT_NORM, 0, float("inf")),
                 r"tensor 'llm\.norm\.weight' holds 1 NaN or infinite value of 64"),
    "missing_tensor": (lambda s, d: set_tensor(s, d, N.LM_OUTPUT_NORM, rename="llm.norx.weight"),
                       r"tensor 'llm\.norm\.weight' is missing \(expected ggml shape \[64\], type f32\)"),
}


@pytest.fixture(scope="module")
def damaged(tiny_gguf, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("damaged_lm")
    return {name: edit(tiny_gguf["f32"], out / f"{name}.gguf") for name, (edit, _) in DAMAGE.items()}


def test_damaged_lm_files_are_clear_errors(damaged):
    results = load_in_subprocess("lm", list(damaged.values()))
    for name, (_, pattern) in DAMAGE.items():
        r = results[f"{name}.gguf"]
        assert r["error"] in ("ModelFileError", "GGUFFormatError"), f"{name}: {r}"
        assert str(damaged[name]) in r["message"], f"{name}: the error does not name the file: {r['message']}"
        assert re.search(pattern, r["message"]), f"{name}: {r['message']!r} does not match {pattern!r}"


def test_undamaged_file_loads_in_the_same_harness(tiny_gguf):
    """The control: the harness itself loads and runs a good file."""
    assert load_in_subprocess("lm", [tiny_gguf["f32"]])[tiny_gguf["f32"].name]["error"] is None


def test_missing_tensor_exits_2_in_the_cli(damaged, tiny_gguf, tmp_path):
    out = tmp_path / "out.wav"
    r = subprocess.run([sys.executable, "-m", "omnivoice.tts", "Hi.", "--model", str(damaged["missing_tensor"]),
                        "--codec", str(tiny_gguf["codec"]), "--backend", "cpu", "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "'llm.norm.weight' is missing" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()


# ------------------------------------------------------------------------------------------------ records

@pytest.mark.parametrize("stack", [False, True])
def test_records_hold_the_files_tensors(runtime, tiny_gguf, stack):
    from omnivoice.gguf import open_model
    from omnivoice.loaders import lm as loader

    f = open_model(tiny_gguf["f32"], loader.ARCH)
    cfg = loader.read_config(f)
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.n_head_kv, cfg.head_dim, cfg.n_vocab) == (2, 64, 4, 2, 16,
                                                                                                   151676)
    w, store = loader.load_weights(runtime, f, cfg, stack=stack)
    try:
        ref = read_gguf(str(tiny_gguf["f32"]))

        def values(name):
            t = ref.tensor(name)
            return t.data.view(np.float32).reshape(tuple(reversed(t.shape)))

        layer = w.layers[1]
        assert tensor_name(layer.q_norm) == N.layer(N.LM_ATTN_Q_NORM, 1) and ne_of(layer.q_norm) == (16,)
        np.testing.assert_array_equal(read_tensor(layer.q_norm), values(N.layer(N.LM_ATTN_Q_NORM, 1)))
        np.testing.assert_array_equal(read_tensor(w.output_norm), values(N.LM_OUTPUT_NORM))
        assert ne_of(w.audio_heads) == (64, 8 * 1025) and len(w.layers) == 2
        if stack:
            assert layer.q is None and layer.gate is None
            assert tensor_name(layer.qkv) == N.layer(N.LM_ATTN_QKV, 1) and ne_of(layer.qkv) == (64, 128)
            want = np.concatenate([values(N.layer(n, 1)) for n in (N.LM_ATTN_Q, N.LM_ATTN_K, N.LM_ATTN_V)])
            np.testing.assert_array_equal(read_tensor(layer.qkv), want)
        else:
            assert layer.qkv is None and layer.gate_up is None
            np.testing.assert_array_equal(read_tensor(layer.k), values(N.layer(N.LM_ATTN_K, 1)))
        bias = read_tensor(w.class_bias)
        assert bias[1024] == -np.inf and not bias[:1024].any()
    finally:
        store.close()


def test_stacked_parts_must_share_their_type(runtime, tiny_gguf, tmp_path):
    """k retyped Q8_0 beside F16 q and v (its bytes, read as Q8_0, end inside its own F16 data: a retype to a
    larger type would run into the next tensor, which the reader refuses): each part is a valid matrix, but no one
    matrix can hold their rows, so stacking is refused by name."""
    from omnivoice.gguf import open_model
    from omnivoice.loaders import lm as loader

    k = N.layer(N.LM_ATTN_K, 0)
    assert read_gguf(str(tiny_gguf["f16"])).tensor(k).tensor_type == 1
    f = open_model(set_tensor(tiny_gguf["f16"], tmp_path / "mixed.gguf", k, ggml_type=8), loader.ARCH)
    with pytest.raises(ModelFileError, match=r"cannot stack llm\.layers\.0\.self_attn\.qkv_proj\.weight: .* types "
                                             r"differ .*k_proj\.weight q8_0"):
        loader.load_weights(runtime, f, loader.read_config(f), stack=True)
