"""python -m omnivoice.quantize and the weight policy shared with the converter (omnivoice.cpp's quantizer's)."""

from __future__ import annotations

import subprocess
import sys

import gguf
import numpy as np
import pytest

from omnivoice.gguf import keys as K, read_gguf
from omnivoice.quantize import SCHEMES, scheme, tensor_type
from omnivoice.quantize.__main__ import main

from tests.interop.conftest import REPO, load_tool

Q4_K_M = scheme("q4_k_m")


def _types(path) -> dict[str, str]:
    return {t.name: gguf.GGMLQuantizationType(t.tensor_type).name for t in read_gguf(str(path)).tensors}


# ------------------------------------------------------------------------------------------------ policy

def test_m_layers_of_a_28_layer_model():
    """Their rule for the "M" variants: i < 28 / 9, i >= 28 - 28 / 7, or i % 3 == 0 (integer division)."""
    bumped = {i for i in range(28)
              if tensor_type(f"llm.layers.{i}.mlp.down_proj.weight", (3072, 1024), Q4_K_M, 28) == "Q6_K"}
    assert bumped == {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 25, 26, 27}
    assert all(tensor_type(f"llm.layers.{i}.self_attn.v_proj.weight", (1024, 1024), Q4_K_M, 28) ==
               ("Q6_K" if i in bumped else "Q4_K") for i in range(28))
    assert tensor_type("llm.layers.0.self_attn.o_proj.weight", (2048, 1024), Q4_K_M, 28) == "Q4_K"
    assert tensor_type("llm.layers.0.self_attn.o_proj.weight", (2048, 1024), scheme("q3_k_l"), 28) == "Q5_K"
    assert tensor_type("llm.layers.5.mlp.down_proj.weight", (3072, 1024), scheme("q4_k_s"), 28) == "Q4_K"
    assert tensor_type("llm.layers.3.mlp.down_proj.weight", (3072, 1024), scheme("q4_k_s"), 28) == "Q5_K"


@pytest.mark.parametrize("name, ne, want", [
    ("llm.embed_tokens.weight", (1024, 151676), "Q6_K"),
    ("audio_embeddings.weight", (1024, 8200), "Q6_K"),
    ("audio_heads.weight", (1024, 8200), "Q4_K"),
    ("llm.layers.0.input_layernorm.weight", (1024,), None),
    ("llm.layers.0.self_attn.q_proj.weight", (64, 128), "F16"),             # 64 values: no whole K block
    ("acoustic_decoder.block.0.snake1.alpha", (1, 1024, 1), None),
    ("quantizer.quantizers.3.project_in.weight", (1024, 64), None),
    ("fc.weight", (1024, 1024), None),
    ("fc2.weight", (1024, 256), None),
    ("acoustic_encoder.block.0.conv1.weight", (4, 64, 128), "F16"),         # kernel taps: no whole block
    ("semantic_model.encoder.layers.3.attention.v_proj.weight", (768, 768), "Q6_K"),  # no block_count: all "M"
    ("semantic_model.encoder.layers.3.attention.q_proj.weight", (768, 768), "Q4_K"),
])
def test_tensor_types(name, ne, want):
    assert tensor_type(name, ne, Q4_K_M, 0) == want


def test_schemes_of_the_bench_tool():
    assert load_tool("bench").QUANTS == tuple(SCHEMES)


# ------------------------------------------------------------------------------------------------ the tool

def test_ours_requantized_equals_ours_converted(k256_gguf, tmp_path):
    out = tmp_path / "omnivoice-base-Q4_K_M.gguf"
    assert main([str(k256_gguf["f32"]), str(out), "--type", "Q4_K_M", "-q"]) == 0
    a, b = read_gguf(str(out)), read_gguf(str(k256_gguf["q4_k_m"]))
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for x, y in zip(a.tensors, b.tensors):
        assert (x.shape, x.tensor_type, x.data.tobytes()) == (y.shape, y.tensor_type, y.data.tobytes()), x.name
    assert a.metadata[K.GENERAL_FILE_TYPE] == b.metadata[K.GENERAL_FILE_TYPE] == 15
    assert a.metadata[K.GENERAL_QUANTIZATION_VERSION] == 2 and a.metadata[K.GENERAL_ALIGNMENT] == 64
    kinds = set(_types(out).values())
    assert {"Q4_K", "Q6_K", "F32"} <= kinds  # real K blocks: the k256 rows are 256 and 512 long


def test_theirs_requantized_keeps_their_layout(k256_theirs, k256_gguf):
    """Their F32 file quantized here is their layout (file type as a string, GGUF's default alignment, their
    tensor order, ranks without trailing 1s) with the same tensor bytes as our converter's Q4_K_M."""
    f = read_gguf(str(k256_theirs["q4_k_m"]))
    assert f.metadata[K.GENERAL_FILE_TYPE] == "Q4_K_M" and K.GENERAL_ALIGNMENT not in f.metadata
    assert f.types[K.GENERAL_FILE_TYPE] == "str" and f.types[K.AUDIO_CODEBOOK_WEIGHTS] == "[i32]"
    names = [t.name for t in f.tensors]
    assert names == sorted(names)
    ours = {t.name: t for t in read_gguf(str(k256_gguf["q4_k_m"])).tensors}
    for t in f.tensors:
        assert (t.tensor_type, t.data.tobytes()) == (ours[t.name].tensor_type, ours[t.name].data.tobytes()), t.name
    codec = read_gguf(str(k256_theirs["codec_q4_k_m"]))
    alpha = codec.tensor("acoustic_decoder.block.0.snake1.alpha")
    assert len(alpha.shape) == 2 and alpha.tensor_type == gguf.GGMLQuantizationType.F32


def test_requantizing_needs_a_flag(k256_gguf, tmp_path, capsys):
    out = tmp_path / "q6.gguf"
    assert main([str(k256_gguf["q4_k_m"]), str(out), "--type", "q6_k", "-q"]) == 2
    err = capsys.readouterr().err
    assert "already Q4_K" in err and "--allow-requantize" in err and not out.exists()
    assert main([str(k256_gguf["q4_k_m"]), str(out), "--type", "q6_k", "--allow-requantize", "-q"]) == 0
    assert set(_types(out).values()) <= {"Q6_K", "F32"}


def test_bad_inputs_exit_2_and_leave_nothing(tmp_path, k256_gguf, capsys):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    out = tmp_path / "out.gguf"
    assert main([str(junk), str(out), "--type", "q8_0"]) == 2
    assert "not a GGUF file" in capsys.readouterr().err
    assert main([str(tmp_path / "none.gguf"), str(out), "--type", "q8_0"]) == 2
    assert main([str(k256_gguf["f32"]), str(k256_gguf["f32"]), "--type", "q8_0"]) == 2
    assert "overwrite the input" in capsys.readouterr().err
    w = gguf.GGUFWriter(tmp_path / "llama.gguf", "llama")
    w.add_tensor("x", np.zeros((4, 32), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    assert main([str(tmp_path / "llama.gguf"), str(out), "--type", "q8_0"]) == 2
    assert "expected an OmniVoice model file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([str(k256_gguf["f32"]), str(out), "--type", "q4_0"])
    assert e.value.code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.gguf", "llama.gguf"]


def test_module_entry_point(k256_gguf, tmp_path):
    out = tmp_path / "omnivoice-base-Q6_K.gguf"
    proc = subprocess.run([sys.executable, "-m", "omnivoice.quantize", str(k256_gguf["f32"]), str(out),
                           "--type", "q6_k", "-q"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and read_gguf(str(out)).metadata[K.GENERAL_FILE_TYPE] == 18


def test_tensors_that_fall_back_to_f16_are_named(tiny_gguf, tiny_checkpoint, tmp_path, capsys):
    """The tiny model's rows (64 and 128 values) hold no whole K-quant block of 256: those matrices are stored
    F16, and both the quantizer and the converter say which and why (a Q4_K_M file larger than Q8_0 otherwise)."""
    from omnivoice.convert import convert_checkpoint

    out = tmp_path / "q4_k_m.gguf"
    assert main([str(tiny_gguf["f32"]), str(out), "--type", "q4_k_m", "-q"]) == 0
    err = capsys.readouterr().err
    fell_back = [t for t in read_gguf(str(out)).tensors if len(t.shape) > 1 and _types(out)[t.name] == "F16"]
    assert len(fell_back) > 10
    assert f"{len(fell_back)} tensors stored F16 instead of Q4_K_M's types" in err, err
    assert "of Q4_K (rows of 64 values, Q4_K's blocks hold 256): llm.layers.0.self_attn.q_proj.weight" in err
    assert "of Q6_K (rows of 128 values, Q6_K's blocks hold 256): llm.layers.0.mlp.down_proj.weight" in err
    lm, _ = convert_checkpoint(tiny_checkpoint, tmp_path / "converted", "q4_k_m", progress=False)
    assert f"{len(fell_back)} tensors stored F16 instead of Q4_K_M's types" in capsys.readouterr().err
    assert main([str(tiny_gguf["f32"]), str(tmp_path / "q8_0.gguf"), "--type", "q8_0", "-q"]) == 0
    assert capsys.readouterr().err == ""  # 64 and 128 values are whole Q8_0 blocks of 32
