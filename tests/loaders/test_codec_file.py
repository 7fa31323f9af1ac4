"""The codec file is checked before ggml sees it (issue 14.1), and its records hold exactly the file's tensors.

As for the LM (test_lm_file.py): one key or tensor of the converted tiny codec is damaged, and each file must be
a clear error naming the file and the problem; before the checks a conv weight retyped to I32 crashed the
process (SIGSEGV in graph.compute) and several others aborted inside ggml. Loaded in a subprocess.
"""

from __future__ import annotations

import re

import numpy as np

from omnivoice import nn
import pytest

from omnivoice.ggml import ne_of, read_tensor
from omnivoice.ggml.graph import tensor_name
from omnivoice.gguf import keys as K, names as N, read_gguf

from ..gguf_edit import set_array_item, set_key, set_tensor, set_tensor_value
from .conftest import load_in_subprocess

DEC_CONV1 = N.tensor(N.DAC_DEC_CONV_IN, N.WEIGHT)
ENC_CONV1 = N.tensor(N.DAC_ENC_CONV_IN, N.WEIGHT)
SNAKE = N.tensor(N.DAC_DEC_RES_UNIT, N.RES_SNAKE1, N.ALPHA, i=3, j=2)
CODEBOOK_0 = "quantizer.quantizers.0.codebook.embed"

DAMAGE = {
    "conv_as_i32": (lambda s, d: set_tensor(s, d, DEC_CONV1, ggml_type=26),
                    re.escape(f"'{DEC_CONV1}' has type i32, expected f32")),
    "encoder_conv_as_i32": (lambda s, d: set_tensor(s, d, ENC_CONV1, ggml_type=26), r"has type i32, expected f32"),
    # (an F16 or quantized kernel is no damage: omnivoice.gguf.compat expands a codec's weights to F32 at load)
    "conv_as_i16": (lambda s, d: set_tensor(s, d, DEC_CONV1, ggml_type=25), r"has type i16, expected f32"),
    "unknown_type": (lambda s, d: set_tensor(s, d, DEC_CONV1, ggml_type=99), r"unknown ggml tensor type 99"),
    "alignment_0": (lambda s, d: set_key(s, d, K.GENERAL_ALIGNMENT, 0), r"general\.alignment is 0"),
    "alignment_3": (lambda s, d: set_key(s, d, K.GENERAL_ALIGNMENT, 3), r"general\.alignment is 3"),
    "n_codebooks_0": (lambda s, d: set_key(s, d, K.N_CODEBOOKS, 0), r"n_codebooks is 0, expected an integer >= 1"),
    "n_codebooks_9": (lambda s, d: set_key(s, d, K.N_CODEBOOKS, 9), r"'quantizer\.quantizers\.8\.codebook\.embed' "
                                                                    r"is missing"),
    "codebook_size": (lambda s, d: set_key(s, d, K.CODEBOOK_SIZE, 1000), r"codebook\.embed' has ggml shape"),
    "hop_length": (lambda s, d: set_key(s, d, K.HOP_LENGTH, 961), r"hop_length = 961 is not the product"),
    "upsampling_ratio": (lambda s, d: set_array_item(s, d, K.AC_UPSAMPLING_RATIOS, 0, 0),
                         r"upsampling_ratios is \[0, 5, 4, 2, 3\], expected a list of integers >= 1"),
    "decoder_width": (lambda s, d: set_key(s, d, K.AC_DECODER_HIDDEN_SIZE, 100), r"does not halve 5 times"),
    "acoustic_width": (lambda s, d: set_key(s, d, K.AC_HIDDEN_SIZE, 0), r"acoustic\.hidden_size is 0"),
    "hubert_heads": (lambda s, d: set_key(s, d, K.SEM_NUM_HEADS, 5), r"does not split into .*num_attention_heads = 5"),
    "hubert_groups": (lambda s, d: set_key(s, d, K.SEM_NUM_CONV_POS_GROUPS, 8),
                      r"'semantic_model\.encoder\.pos_conv_embed\.conv\.weight' has ggml shape"),
    "hubert_stride": (lambda s, d: set_array_item(s, d, K.SEM_CONV_STRIDE, 0, 4), r"conv_stride .* do not multiply"),
    "pos_conv_trim": (lambda s, d: set_key(s, d, K.SEM_POS_CONV_TRIM, 1000), r"pos_conv_trim = 1000; a kernel"),
    "input_pad": (lambda s, d: set_key(s, d, K.SEM_INPUT_PAD, 1 << 30), r"must each be below one frame"),
    "semantic_rate": (lambda s, d: set_key(s, d, K.SEMANTIC_SAMPLE_RATE, 8000), r"are not one frame"),
    "snake_half": (lambda s, d: set_tensor(s, d, SNAKE, ne=(1, 2, 1)),
                   re.escape(f"'{SNAKE}' has ggml shape [1, 2, 1], expected [1, 4, 1]")),
    "missing_fc2": (lambda s, d: set_tensor(s, d, "fc2.weight", rename="fc3.weight"), r"'fc2\.weight' is missing"),
    "conv_bias_claimed": (lambda s, d: set_key(s, d, K.SEM_CONV_BIAS, True), r"conv_layers\.0\.conv\.bias' is missing"),
    # files that loaded and ran, silently wrong (issue 56)
    "decoder_channels_huge": (lambda s, d: set_array_item(s, d, K.AC_DECODER_CHANNELS, 2, 2**32 - 1),
                              r"decoder_channels is \[32, 16, 4294967295, 4, 2\], but the blocks' tensors are "
                              r"\[32, 16, 8, 4, 2\] wide"),
    "encoder_channels": (lambda s, d: set_array_item(s, d, K.AC_ENCODER_CHANNELS, 0, 9),
                         r"encoder_channels is \[9, 16, 32, 64, 128\], but the blocks' tensors are \[8, 16"),
    "snake_eps_tiny": (lambda s, d: set_key(s, d, K.AC_SNAKE_EPS, 1e-45), r"snake_eps is 1\.4\d*e-45, expected an "
                                                                         r"epsilon from 1e-12 to 0\.1"),
    "group_norm_eps_big": (lambda s, d: set_key(s, d, K.SEM_GROUP_NORM_EPS, 10.0), r"group_norm_eps is 10\.0"),
    "codebook_nan": (lambda s, d: set_tensor_value(s, d, CODEBOOK_0, 7, float("nan")),
                     re.escape(f"tensor '{CODEBOOK_0}' holds 1 NaN or infinite value of")),
    "snake_inf": (lambda s, d: set_tensor_value(s, d, SNAKE, 1, float("-inf")),
                  re.escape(f"tensor '{SNAKE}' holds 1 NaN or infinite value of 4")),
    "data_into_neighbour": (lambda s, d: set_tensor(s, d, DEC_CONV1, move_by=-64),
                            r"inside the data of .* before it .*overlapping or out-of-order tensor data"),
}


@pytest.fixture(scope="module")
def damaged(tiny_gguf, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("damaged_codec")
    return {name: edit(tiny_gguf["codec"], out / f"{name}.gguf") for name, (edit, _) in DAMAGE.items()}


def test_damaged_codec_files_are_clear_errors(damaged, tiny_gguf):
    results = load_in_subprocess("codec", [tiny_gguf["codec"], *damaged.values()])
    assert results[tiny_gguf["codec"].name]["error"] is None, results[tiny_gguf["codec"].name]  # the control
    for name, (_, pattern) in DAMAGE.items():
        r = results[f"{name}.gguf"]
        assert r["error"] in ("ModelFileError", "GGUFFormatError"), f"{name}: {r}"
        assert str(damaged[name]) in r["message"], f"{name}: the error does not name the file: {r['message']}"
        assert re.search(pattern, r["message"]), f"{name}: {r['message']!r} does not match {pattern!r}"


def test_records_hold_the_files_tensors(runtime, tiny_gguf):
    from omnivoice.gguf import open_model
    from omnivoice.loaders import codec as loader

    f = open_model(tiny_gguf["codec"], loader.ARCH)
    cfg = loader.read_config(f)
    w, store = loader.load_weights(runtime, f, cfg)
    try:
        ref = read_gguf(str(tiny_gguf["codec"]))

        def values(name):
            t = ref.tensor(name)
            return t.data.view(np.float32).reshape(tuple(reversed(t.shape)))

        unit = w.decoder.blocks[3].res_units[1]
        # the file's [1, 4, 1] held as [C]
        assert tensor_name(unit.snake1.alpha) == SNAKE and ne_of(unit.snake1.alpha) == (4,)
        alpha = values(SNAKE).reshape(-1)
        np.testing.assert_array_equal(read_tensor(unit.snake1.alpha).reshape(-1), alpha)
        inv_beta = read_tensor(unit.snake1.inv_beta).reshape(-1)
        np.testing.assert_array_equal(inv_beta, np.float32(1) / (alpha + np.float32(1e-9)))
        assert tensor_name(unit.snake1.inv_beta) == N.tensor(N.DAC_DEC_RES_UNIT, N.RES_SNAKE1, N.INV_BETA, i=3, j=2)
        t = w.decoder.blocks[3].conv_t1
        # the DAC's conv weights are held rearranged for channels-last activations (nn.conv_transpose_weight_cl)
        assert tensor_name(t.weight) == "acoustic_decoder.block.3.conv_t1.weight.cl" and ne_of(t.weight) == (8, 16)
        np.testing.assert_array_equal(read_tensor(t.weight), nn.conv_transpose_weight_cl(
            values("acoustic_decoder.block.3.conv_t1.weight"), t.bias.ne[0]))
        layer = w.hubert.layers[1]
        name = N.tensor(N.HUBERT_FFN_UP, N.WEIGHT, i=1)
        assert tensor_name(layer.ffn_up.weight) == name == "semantic_model.encoder.layers.1.feed_forward." \
            "intermediate_dense.weight"
        assert len(w.quantizers) == cfg.n_quantizers == 8 and len(w.encoder.blocks) == 5
        cb = w.quantizers[7]
        embed = values("quantizer.quantizers.7.codebook.embed")
        np.testing.assert_array_equal(read_tensor(cb.embed), embed)
        np.testing.assert_allclose(read_tensor(cb.embed_sqnorm), (embed.astype(np.float64) ** 2).sum(1), rtol=1e-5)
        np.testing.assert_array_equal(read_tensor(cb.rank), np.arange(1024, 0, -1))
    finally:
        store.close()
