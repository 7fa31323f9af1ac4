"""Their GGUFs of a checkpoint synthesize what ours of the same checkpoint do: auto voice, voice design and
voice cloning give equal tokens and equal audio, F32, BF16 and Q8_0 (and Q4_K_M on the k256 checkpoint)."""

from __future__ import annotations

import numpy as np
import pytest

import omnivoice
from omnivoice.gguf import GGUFFormatError

from tests.golden_paths import GOLDEN

GREEDY = dict(num_step=8, position_temperature=0.0, class_temperature=0.0)


def synthesize_cases(lm, codec, cases=("auto", "design", "clone")) -> dict:
    """case -> (tokens, audio) for a fixed text, deterministic decoding."""
    out = {}
    with omnivoice.OmniVoice(str(lm), str(codec), backend="cpu") as ov:
        if "auto" in cases:
            r = ov.synthesize("Hello world. This is a test.", language="English", duration=1.6, **GREEDY)
            out["auto"] = r
        if "design" in cases:
            out["design"] = ov.synthesize("Good morning!", instruct="female, low pitch", duration=1.2, **GREEDY)
        if "clone" in cases:
            clip = np.load(GOLDEN / "ref_clone.npz")["ref_wav_input"][:48000]
            voice = ov.create_voice((clip, 24000), "Hello world, this is me")
            out["clone"] = ov.synthesize("Nice to meet you.", voice=voice, duration=1.2, **GREEDY)
            out["clone_codes"] = voice.codes
    return out


def assert_same(theirs: dict, ours: dict) -> None:
    assert set(theirs) == set(ours)
    for case in theirs:
        if case.endswith("_codes"):
            np.testing.assert_array_equal(theirs[case], ours[case], err_msg=case)
            continue
        a, b = theirs[case], ours[case]
        assert len(a.tokens) == len(b.tokens), case
        for x, y in zip(a.tokens, b.tokens):
            np.testing.assert_array_equal(x, y, err_msg=case)
        np.testing.assert_array_equal(a.audio, b.audio, err_msg=case)


@pytest.mark.parametrize("quant", ["f32", "bf16", "q8_0"])
def test_their_files_synthesize_as_ours(quant, cpp_tiny, tiny_gguf):
    """Their base file (F32 from their convert.py; BF16 and Q8_0 from their quantizer) with their F32 codec file,
    against our converter's files of the same checkpoint. BF16 and Q8_0 tensors are byte-equal, so the output
    must be too."""
    assert_same(synthesize_cases(cpp_tiny[quant], cpp_tiny["codec"]),
                synthesize_cases(tiny_gguf[quant], tiny_gguf["codec"]))


def test_their_k_quant_files_synthesize_as_ours(k256_theirs, k256_gguf):
    assert_same(synthesize_cases(k256_theirs["q4_k_m"], k256_theirs["codec"], ("auto",)),
                synthesize_cases(k256_gguf["q4_k_m"], k256_gguf["codec"], ("auto",)))


@pytest.mark.parametrize("quant", ["bf16", "q8_0"])
def test_their_quantized_codec_runs_close_to_f32(quant, cpp_tiny, tiny_gguf):
    """Their BF16 / Q8_0 codec file (HuBERT and DAC weights quantized, RVQ F32) is expanded to F32 at load: its
    audio is close to the F32 codec's for the same tokens, and encoding gives mostly the same codes."""
    f32 = synthesize_cases(tiny_gguf["q8_0"], tiny_gguf["codec"], ("auto", "clone"))
    q8 = synthesize_cases(tiny_gguf["q8_0"], cpp_tiny[f"codec_{quant}"], ("auto", "clone"))
    np.testing.assert_array_equal(f32["auto"].tokens[0], q8["auto"].tokens[0])  # the LM is the same
    a, b = f32["auto"].audio, q8["auto"].audio
    assert a.shape == b.shape and np.all(np.isfinite(b))
    assert float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) > 0.99
    assert np.mean(f32["clone_codes"] == q8["clone_codes"]) > 0.8


def test_a_truncated_base_file_of_theirs_is_a_clear_error(cpp_tiny, tmp_path):
    cut = tmp_path / "omnivoice-base-F32.gguf"
    cut.write_bytes(cpp_tiny["f32"].read_bytes()[: cpp_tiny["f32"].stat().st_size // 2])
    with pytest.raises(GGUFFormatError, match="truncated"):
        omnivoice.OmniVoice(str(cut), str(cpp_tiny["codec"]), backend="cpu")


def test_a_base_file_of_theirs_with_a_wrong_shape_is_a_clear_error(cpp_layout, tiny_checkpoint, cpp_tiny, tmp_path):
    def edit(name, w):
        return w[:-16] if name == "llm.layers.1.self_attn.k_proj.weight" else w

    bad = cpp_layout.write_base(tiny_checkpoint, tmp_path / "omnivoice-base-F32.gguf", edit=edit)
    with pytest.raises(ValueError, match=r"llm\.layers\.1\.self_attn\.k_proj\.weight") as e:
        omnivoice.OmniVoice(str(bad), str(cpp_tiny["codec"]), backend="cpu")
    assert str(bad) in str(e.value)
