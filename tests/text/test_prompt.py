"""Prompt builder: cond/uncond ids and audio masks equal the reference's _prepare_inference_inputs."""

import json

import numpy as np
import pytest
from text_golden import check_digest, load_golden_json, load_golden_npz

from omnivoice.text.prompt import build_prompt, combine_text, tokenize_with_nonverbal_tags


def test_combine_and_tag_tokenization_equal_reference(tokenizer, vocab_digest):
    g = load_golden_json("text_prompt_parts.json")
    check_digest(g["vocab_digest"], vocab_digest)
    assert len(g["cases"]) >= 300
    for c in g["cases"]:
        combined = combine_text(c["text"], c["ref_text"])
        assert combined == c["combined"], c
        assert tokenize_with_nonverbal_tags(f"<|text_start|>{combined}<|text_end|>", tokenizer) == c["ids"], c


def test_prompts_equal_reference(tokenizer, vocab_digest):
    z = load_golden_npz("text_prompts.npz")
    meta = json.loads(str(z["meta"]))
    check_digest(meta["vocab_digest"], vocab_digest)
    modes = {(m["mode"], m["denoise"]) for m in meta["cases"]}
    assert modes == {(a, b) for a in ("auto", "design", "clone") for b in (True, False)}
    for k, m in enumerate(meta["cases"]):
        ref = z[f"ref_{k}"] if m["has_ref"] else None
        p = build_prompt(tokenizer, m["text"], m["num_target_tokens"], ref_text=m["ref_text"], ref_audio_tokens=ref,
                         lang=m["lang"], instruct=m["instruct"], denoise=m["denoise"])
        assert p.cond_ids.dtype == np.int32 and p.audio_mask.dtype == np.bool_
        np.testing.assert_array_equal(p.cond_ids, z[f"cond_{k}"], err_msg=str(m))
        np.testing.assert_array_equal(p.audio_mask, z[f"mask_{k}"], err_msg=str(m))
        np.testing.assert_array_equal(p.uncond_ids, z[f"uncond_{k}"], err_msg=str(m))
        np.testing.assert_array_equal(p.uncond_audio_mask, z[f"uncond_mask_{k}"], err_msg=str(m))
        assert p.target_start == p.length - m["num_target_tokens"]


def test_bad_prompt_inputs(tokenizer):
    with pytest.raises(ValueError, match="num_target_tokens"):
        build_prompt(tokenizer, "hi", 0)
    with pytest.raises(ValueError, match="num_target_tokens"):
        build_prompt(tokenizer, "hi", 2.5)
    with pytest.raises(ValueError, match=r"shape \[8, T\]"):
        build_prompt(tokenizer, "hi", 5, ref_text="x", ref_audio_tokens=np.zeros((7, 3), np.int64))
    with pytest.raises(ValueError, match=r"\[0, 1024\)"):
        build_prompt(tokenizer, "hi", 5, ref_text="x", ref_audio_tokens=np.full((8, 3), 1024))
    with pytest.raises(ValueError, match=r"\[0, 1024\)"):
        build_prompt(tokenizer, "hi", 5, ref_text="x", ref_audio_tokens=np.zeros((8, 3), np.float32))
