"""omnivoice.gguf.compat: their files of a checkpoint read as ours of the same checkpoint, key by key and tensor by
tensor, and clear errors for their files when damaged."""

from __future__ import annotations

import numpy as np
import pytest

from omnivoice.gguf import compat, keys as K, open_model, read_gguf
from omnivoice.gguf.compat import CompatError

# Keys whose value in their file completed differs from ours, by design (see the compat module doc).
DIFFER = {
    K.GENERAL_NAME,                # each converter's own name
    K.GENERAL_ALIGNMENT,           # theirs 32 (GGUF's default), ours 64
    K.TOKENIZER_EOS_ID,            # theirs <|endoftext|> (their C++), ours tokenizer_config.json's eos_token
    K.TOKENIZER_TOKEN_TYPE,        # theirs: only <|endoftext|> and the seven specials are control tokens
}
# Keys about our own conversion, which their files cannot have.
OURS_ONLY = {K.SOURCE_SHA256}
OUR_SPECIALS = ("<|endoftext|>", "<|denoise|>", "<|lang_start|>", "<|lang_end|>", "<|instruct_start|>",
                "<|instruct_end|>", "<|text_start|>", "<|text_end|>")


@pytest.mark.parametrize("which, schema", [("f32", K.LM_KEY_TYPES), ("codec", K.CODEC_KEY_TYPES)])
def test_their_metadata_completed_is_ours(which, schema, cpp_tiny, tiny_gguf):
    theirs, ours = open_model(cpp_tiny[which]), open_model(tiny_gguf[which])
    assert compat.layout(read_gguf(str(cpp_tiny[which])).metadata) == compat.LAYOUT_CPP
    assert compat.layout(ours.metadata) == compat.LAYOUT_OURS
    assert set(schema) - OURS_ONLY <= set(theirs.metadata)
    for key in schema:
        if key not in DIFFER | OURS_ONLY:
            assert theirs.metadata[key] == ours.metadata[key], key
            assert theirs.types[key] == schema[key], key


def test_their_token_types_follow_their_cpp(cpp_tiny, tiny_gguf):
    meta = open_model(cpp_tiny["f32"]).metadata
    tokens, types = meta[K.TOKENIZER_TOKENS], meta[K.TOKENIZER_TOKEN_TYPE]
    control = {tokens[i] for i, t in enumerate(types) if t == K.TOKEN_TYPE_CONTROL}
    assert control == set(OUR_SPECIALS)
    assert meta[K.TOKENIZER_EOS_ID] == meta[K.TOKENIZER_PAD_ID] == tokens.index("<|endoftext|>")
    ours = open_model(tiny_gguf["f32"]).metadata[K.TOKENIZER_TOKEN_TYPE]
    differ = {tokens[i] for i, (a, b) in enumerate(zip(types, ours)) if a != b}
    assert differ and all(t.startswith("<") and t not in OUR_SPECIALS for t in differ)  # Qwen's other added tokens


def test_their_tokenizer_encodes_as_ours(cpp_tiny, tiny_gguf):
    from omnivoice.text import Tokenizer

    theirs, ours = Tokenizer.from_gguf(str(cpp_tiny["f32"])), Tokenizer.from_gguf(str(tiny_gguf["f32"]))
    for text in ("Hello world.", "<|lang_start|>en<|lang_end|><|text_start|>Grüße, 你好!<|text_end|>",
                 "<|denoise|>  spaces\tand\nlines 123"):
        assert theirs.encode(text) == ours.encode(text), text
    # a Qwen added token that their C++ does not cut out is BPE-encoded there, and here for their files
    assert ours.encode("<|im_start|>") == [ours.added["<|im_start|>"]]
    assert len(theirs.encode("<|im_start|>")) > 1


def test_their_tensors_adapted_are_ours(cpp_tiny, tiny_gguf):
    """Same names; F32 bytes equal, the ConvTranspose weights after the permutation at load included (HuBERT's
    folded positional conv is folded in float32 by them, in float64 by us: within 1e-7)."""
    theirs, ours = open_model(cpp_tiny["codec"]), open_model(tiny_gguf["codec"])
    mine = {t.name: t for t in ours.tensors}
    names = {t.name for t in theirs.tensors}
    assert set(mine) <= names and names - set(mine) <= {"semantic_model.masked_spec_embed"}  # we drop that one
    n_conv_t = 0
    for t in theirs.tensors:
        if t.name not in mine:
            continue
        o = mine[t.name]
        assert (t.shape, t.tensor_type) == (o.shape, o.tensor_type), t.name
        a, b = t.data.view(np.float32), o.data.view(np.float32)
        if t.name.endswith("pos_conv_embed.conv.weight"):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-7)
        else:
            assert np.array_equal(a, b), t.name
        n_conv_t += t.name.endswith(".conv_t1.weight")
        in_file = np.may_share_memory(t.data, theirs.data)
        assert in_file != t.name.endswith(".conv_t1.weight"), t.name  # only those were rewritten in memory
    assert n_conv_t == 5


def test_their_quantized_codec_is_f32_at_load(cpp_tiny, tiny_gguf):
    """Their quantizer stores the codec's kernels F16 with their trailing 1s dropped and HuBERT's matrices Q8_0;
    at load every tensor is F32 again, with our ranks, and the ones they keep F32 are unchanged."""
    import gguf

    raw = read_gguf(str(cpp_tiny["codec_q8_0"]))
    kinds = {gguf.GGMLQuantizationType(t.tensor_type).name for t in raw.tensors}
    assert {"F16", "Q8_0", "F32"} <= kinds
    assert raw.tensor("acoustic_decoder.block.0.snake1.alpha").shape[-1] != 1  # (1, C): rank dropped
    loaded, ours = open_model(cpp_tiny["codec_q8_0"]), open_model(tiny_gguf["codec"])
    mine = {t.name: t for t in ours.tensors}
    for t in loaded.tensors:
        if t.name not in mine:
            continue
        assert t.tensor_type == gguf.GGMLQuantizationType.F32 and t.shape == mine[t.name].shape, t.name
        r = raw.tensor(t.name)
        if r.tensor_type == gguf.GGMLQuantizationType.F32 and not t.name.endswith("conv_t1.weight"):
            assert np.array_equal(t.data, mine[t.name].data), t.name  # RVQ, fc, fc2, alphas, biases
        if r.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            deq = gguf.quants.dequantize(np.asarray(r.data), gguf.GGMLQuantizationType.Q8_0)
            assert np.array_equal(t.data.view(np.float32), deq.reshape(-1)), t.name


# ------------------------------------------------------------------------------------------------ damage

def _codec(cpp_layout, tiny_checkpoint, tmp_path, **damage):
    return cpp_layout.write_codec(tiny_checkpoint, tmp_path / "omnivoice-tokenizer-F32.gguf", **damage)


def test_missing_key_of_theirs_is_named(cpp_layout, tiny_checkpoint, tmp_path):
    path = _codec(cpp_layout, tiny_checkpoint, tmp_path, drop=("omnivoice.acoustic.hop_length",))
    with pytest.raises(CompatError, match=r"omnivoice\.acoustic\.hop_length.* is missing") as e:
        open_model(path)
    assert str(path) in str(e.value)


def test_conv_transpose_that_fits_no_layout(cpp_layout, tiny_checkpoint, tmp_path):
    def edit(name, w):
        return w[:, :-1, :] if name == "acoustic_decoder.block.2.conv_t1.weight" else w  # one output channel short

    path = _codec(cpp_layout, tiny_checkpoint, tmp_path, edit=edit)
    with pytest.raises(CompatError, match=r"conv_t1\.weight.*does not fit its bias"):
        open_model(path)


def test_missing_tensor_it_derives_from(cpp_layout, tiny_checkpoint, tmp_path):
    path = _codec(cpp_layout, tiny_checkpoint, tmp_path, edit=lambda n, w: None if n == "acoustic_encoder.conv2.weight"
                  else w)
    with pytest.raises(CompatError, match=r"acoustic_encoder\.conv2\.weight.* is missing"):
        open_model(path)


def test_truncated_file_of_theirs(cpp_tiny, tmp_path):
    cut = tmp_path / "omnivoice-base-Q8_0.gguf"
    cut.write_bytes(cpp_tiny["q8_0"].read_bytes()[:-1000])
    with pytest.raises(ValueError, match="truncated"):
        open_model(cut)


def test_a_file_of_neither_keeps_the_architecture_error(tmp_path):
    import gguf

    w = gguf.GGUFWriter(tmp_path / "llama.gguf", "llama")
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    with pytest.raises(ValueError, match="general.architecture is 'llama', expected 'omnivoice-lm'"):
        open_model(tmp_path / "llama.gguf", K.ARCH_LM)
