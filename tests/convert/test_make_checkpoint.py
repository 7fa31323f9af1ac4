"""tools/make_checkpoint.py: deterministic per (seed, name), the real layout, the real tokenizer, sane scales."""

from __future__ import annotations

import json

import numpy as np
import pytest

from omnivoice.convert.codec import codec_hparams, codec_inventory
from omnivoice.convert.lm import lm_hparams, lm_inventory


def test_values_depend_only_on_seed_and_name(make_checkpoint_module):
    m = make_checkpoint_module
    specs = {s.name: s for s in m.lm_specs(m.PRESETS["tiny"]) + m.codec_specs(m.PRESETS["tiny"])}
    for name in ("llm.layers.1.mlp.up_proj.weight", "audio_heads.weight", "acoustic_decoder.block.2.conv_t1.weight",
                 "semantic_model.encoder.layers.0.layer_norm.weight"):
        a, b, c = (m.materialize(specs[name], s) for s in (5, 5, 6))
        assert np.array_equal(a, b) and not np.array_equal(a, c), name
    # two tensors of one shape but different names draw different values
    assert not np.array_equal(m.materialize(specs["audio_heads.weight"], 5),
                              m.materialize(specs["audio_embeddings.weight"], 5))


def test_files_hold_exactly_the_specs(make_checkpoint_module, tiny_ckpt, source_tensors):
    m = make_checkpoint_module
    lm, codec = source_tensors
    for specs, tensors in ((m.lm_specs(m.PRESETS["tiny"]), lm), (m.codec_specs(m.PRESETS["tiny"]), codec)):
        assert len({s.name for s in specs}) == len(specs) and set(tensors) == {s.name for s in specs}
        for s in specs:
            assert np.array_equal(tensors[s.name], m.materialize(s, 1234)), s.name


@pytest.mark.parametrize("preset", ["tiny", "full"])
def test_layout_matches_the_converters_view_of_the_configs(make_checkpoint_module, preset):
    """Two independent derivations of the tensor inventory (the maker's and the converter's) agree."""
    m = make_checkpoint_module
    p = m.PRESETS[preset]
    lm = {s.name: s.shape for s in m.lm_specs(p)}
    assert lm == {**dict(lm_inventory(lm_hparams(m.lm_config(p)))), "codebook_layer_offsets": (8,)}
    codec = {s.name: s.shape for s in m.codec_specs(p)}
    conv = dict(codec_inventory(codec_hparams(m.codec_config(p), m.preprocessor_config())))
    pos = "semantic_model.encoder.pos_conv_embed.conv"
    kept = {n: s for n, s in codec.items()
            if not n.startswith(("decoder_semantic.", "fc1.")) and not n.endswith(("embed_avg", "cluster_size", "inited"))
            and ".parametrizations." not in n}
    assert kept == {n: s for n, s in conv.items() if n != pos + ".weight"}
    assert conv[pos + ".weight"] == codec[pos + ".parametrizations.weight.original1"]
    if preset == "full":
        # the real checkpoint: 527 codec tensors (NOTES.md), 312 LM tensors plus the offsets buffer
        assert len(codec) == 527 and len(lm) == 313
        assert lm["llm.embed_tokens.weight"] == (151676, 1024) and lm["audio_heads.weight"] == (8200, 1024)


def test_real_qwen_tokenizer(tiny_ckpt):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_ckpt / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == 151676
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    assert enc("hello") == [14990] and enc(" world") == [1879] and enc("English") == [22574]
    assert enc("<|lang_start|>en<|lang_end|>") == [151670, 268, 151671]
    assert enc("<|denoise|><|text_start|>hi<|text_end|>")[:2] == [151669, 151674]
    added = {a["id"]: a for a in json.loads((tiny_ckpt / "tokenizer.json").read_text())["added_tokens"]}
    assert sorted(added) == list(range(151643, 151676))
    assert [added[i]["special"] for i in range(151643, 151676)] == [True] * 14 + [False] * 12 + [True] * 7
    cfg = json.loads((tiny_ckpt / "tokenizer_config.json").read_text())
    assert cfg["eos_token"] == "<|im_end|>" and cfg["pad_token"] == "<|endoftext|>" and cfg["bos_token"] is None


def test_weight_scales(make_checkpoint_module, source_tensors):
    lm, codec = source_tensors
    norms = [v for k, v in lm.items() if k.endswith("norm.weight")]
    allnorm = np.concatenate(norms)
    assert abs(allnorm.mean() - 1) < 0.05 and 0.05 < allnorm.std() < 0.2  # near 1, visibly not 1
    emb = lm["audio_embeddings.weight"]
    rows = np.arange(8) * 1025 + 1024
    ratio = np.linalg.norm(emb[rows], axis=1).mean() / np.linalg.norm(np.delete(emb, rows, 0), axis=1).mean()
    assert ratio == pytest.approx(make_checkpoint_module.MASK_ROW_DAMP, rel=0.3)
    assert np.array_equal(lm["codebook_layer_offsets"], np.arange(8) * 1025)
    assert np.all(codec["acoustic_decoder.block.0.snake1.alpha"] > 0.4)
