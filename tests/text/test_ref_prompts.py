"""The whole text path (prepare_request -> plan_chunks -> build_prompt) against the reference's real step-0 ids.

tests/golden/ref_{auto,design,clone,long}.npz are full reference runs on the tiny checkpoint (owner: the reference
harness, see tests/golden/README.md); their tokenizer is the one tests/text/qwen_files.py builds.
"""

import json

import numpy as np
import pytest
from text_golden import load_golden_npz

from omnivoice.text import add_punctuation, build_prompt
from omnivoice.text.chunking import needs_chunking, plan_chunks
from omnivoice.text.request import prepare_request

FRAME_RATE = 25


@pytest.mark.parametrize("case", ["auto", "design", "clone", "long"])
def test_step0_ids_equal_reference_run(case, tokenizer):
    z = load_golden_npz(f"ref_{case}.npz")
    meta = json.loads(str(z["meta_json"]))
    s = meta["settings"]
    clone = s["mode"] == "clone"
    ref_codes = z["ref_codes"].astype(np.int64) if clone else None
    ref_text = None
    if clone:
        ref_text = add_punctuation(s["ref_text"]) if s["preprocess_prompt"] else s["ref_text"]
    req = prepare_request(s["text"], s["language"], s["instruct"], ref_text=ref_text,
                          num_ref_audio_tokens=None if ref_codes is None else ref_codes.shape[1],
                          duration=s["duration"], frame_rate=FRAME_RATE)
    if s["num_target_tokens"] is not None:
        assert req.num_target_tokens == s["num_target_tokens"]
    calls = meta["calls"]
    if needs_chunking(req.num_target_tokens, s["audio_chunk_threshold"], FRAME_RATE):
        plans = plan_chunks(req.text, req.num_target_tokens, s["audio_chunk_duration"], FRAME_RATE,
                            ref_text=req.ref_text, num_ref_audio_tokens=req.num_ref_audio_tokens, speed=req.speed)
        items = []
        for p in plans:
            codes = None
            if p.ref == "prompt":
                codes = ref_codes
            elif p.ref == "chunk0":
                codes = z["call0_tokens"].astype(np.int64)  # chunk 0's generated audio is the voice prompt
            items.append((p.text, p.num_target_tokens, p.ref_text, codes))
    else:
        items = [(req.text, req.num_target_tokens, req.ref_text, ref_codes)]
    assert len(items) == len(calls)
    if case == "long":
        assert len(calls) > 1
    for k, ((text, n_target, rtext, codes), call) in enumerate(zip(items, calls)):
        assert (text, n_target, rtext, req.lang, req.instruct) == (
            call["text"], call["target_len"], call["ref_text"], call["lang"], call["instruct"])
        p = build_prompt(tokenizer, text, n_target, ref_text=rtext, ref_audio_tokens=codes, lang=req.lang,
                         instruct=req.instruct, denoise=s["denoise"])
        np.testing.assert_array_equal(p.cond_ids, z[f"call{k}_cond_ids"])
        np.testing.assert_array_equal(p.audio_mask, z[f"call{k}_cond_audio_mask"])
        np.testing.assert_array_equal(p.uncond_ids, z[f"call{k}_uncond_ids"])
