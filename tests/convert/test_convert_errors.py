"""Bad input gives a clear error naming the problem, and a failed conversion leaves no file behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from omnivoice.convert import CheckpointError, ConversionError, convert_checkpoint
from omnivoice.gguf import writer
from omnivoice.gguf.writer import GGUFWriteError
from tests.convert.convert_helpers import link_copy, replace_file

REPO = Path(__file__).resolve().parents[2]


def test_empty_directory_names_every_missing_file(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(CheckpointError) as e:
        convert_checkpoint(tmp_path, out, "f32", progress=False)
    msg = str(e.value)
    for need in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "audio_tokenizer/config.json", "audio_tokenizer/model.safetensors"):
        assert need in msg
    assert "not an OmniVoice checkpoint" in msg
    assert not out.exists()


def test_missing_audio_tokenizer(tmp_path, tiny_ckpt):
    ck = link_copy(tiny_ckpt, tmp_path / "ck", skip=("audio_tokenizer",))
    with pytest.raises(CheckpointError, match=r"missing: audio_tokenizer/config\.json .*audio_tokenizer/model"):
        convert_checkpoint(ck, tmp_path / "out", "f32", progress=False)


def test_not_a_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        convert_checkpoint(tmp_path / "nope", tmp_path / "out", progress=False)


def test_wrong_model_type(tmp_path, tiny_ckpt):
    ck = link_copy(tiny_ckpt, tmp_path / "ck")
    cfg = json.loads((tiny_ckpt / "config.json").read_text())
    cfg["model_type"] = "llama"
    replace_file(ck / "config.json", json.dumps(cfg).encode())
    with pytest.raises(CheckpointError, match=r"config\.json: model_type is 'llama', expected 'omnivoice'"):
        convert_checkpoint(ck, tmp_path / "out", progress=False)


def test_truncated_safetensors_names_file_and_tensor(tmp_path, tiny_ckpt):
    ck = link_copy(tiny_ckpt, tmp_path / "ck")
    data = (tiny_ckpt / "model.safetensors").read_bytes()
    replace_file(ck / "model.safetensors", data[: len(data) * 3 // 5])
    out = tmp_path / "out"
    with pytest.raises(CheckpointError) as e:
        convert_checkpoint(ck, out, "f32", progress=False)
    msg = str(e.value)
    assert "truncated safetensors file" in msg and str(ck / "model.safetensors") in msg
    assert "tensor '" in msg
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("damage, pattern", [
    (lambda d: d[:5], r"truncated safetensors file \(5 bytes"),
    (lambda d: (10 ** 12).to_bytes(8, "little") + d[8:], r"corrupt or truncated safetensors file \(header length"),
    (lambda d: d[:8] + b"\xff" * 40 + d[48:], r"corrupt safetensors header \(not valid JSON"),
])
def test_corrupt_codec_safetensors(tmp_path, tiny_ckpt, damage, pattern):
    ck = link_copy(tiny_ckpt, tmp_path / "ck")
    target = ck / "audio_tokenizer" / "model.safetensors"
    replace_file(target, damage((tiny_ckpt / "audio_tokenizer" / "model.safetensors").read_bytes()))
    with pytest.raises(CheckpointError, match=pattern) as e:
        convert_checkpoint(ck, tmp_path / "out", progress=False)
    assert str(target) in str(e.value)


def test_header_offsets_inconsistent_with_shape(tmp_path, tiny_ckpt):
    ck = link_copy(tiny_ckpt, tmp_path / "ck")
    raw = (tiny_ckpt / "audio_tokenizer" / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header["fc.bias"]["shape"] = [header["fc.bias"]["shape"][0] + 1]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text))
    assert len(text) == n
    replace_file(ck / "audio_tokenizer" / "model.safetensors", raw[:8] + text + raw[8 + n:])
    with pytest.raises(CheckpointError, match=r"tensor 'fc\.bias' F32\[\d+\] needs \d+ bytes"):
        convert_checkpoint(ck, tmp_path / "out", progress=False)


def test_weights_that_disagree_with_config(tmp_path, tiny_ckpt):
    ck = link_copy(tiny_ckpt, tmp_path / "ck")
    cfg = json.loads((tiny_ckpt / "config.json").read_text())
    cfg["llm_config"]["intermediate_size"] += 32
    replace_file(ck / "config.json", json.dumps(cfg).encode())
    with pytest.raises(CheckpointError, match=r"llm\.layers\.0\.mlp\.gate_proj\.weight has shape \[\d+, \d+\], "
                                              r"expected \[\d+, \d+\]"):
        convert_checkpoint(ck, tmp_path / "out", progress=False)


def test_missing_codec_tensor(tmp_path, tiny_ckpt):
    from safetensors.numpy import load_file, save_file

    ck = link_copy(tiny_ckpt, tmp_path / "ck")
    tensors = load_file(tiny_ckpt / "audio_tokenizer" / "model.safetensors")
    del tensors["acoustic_decoder.block.4.conv_t1.weight"]
    (ck / "audio_tokenizer" / "model.safetensors").unlink()
    save_file(tensors, ck / "audio_tokenizer" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"acoustic_decoder\.block\.4\.conv_t1\.weight is missing"):
        convert_checkpoint(ck, tmp_path / "out", progress=False)


def test_failure_while_writing_leaves_nothing(tmp_path, tiny_ckpt, monkeypatch):
    calls = {"n": 0}
    real = writer.encode

    def failing(values, qtype):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("disk full (simulated)")
        return real(values, qtype)

    monkeypatch.setattr(writer, "encode", failing)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="simulated"):
        convert_checkpoint(tiny_ckpt, out, "q8_0", progress=False)
    assert list(out.iterdir()) == []


def test_unknown_quant_and_long_names():
    with pytest.raises(ConversionError, match="unknown quantization 'q4_0'"):
        convert_checkpoint("/nonexistent", "/nonexistent-out", "q4_0", progress=False)
    writer.check_name("x" * 127)
    with pytest.raises(GGUFWriteError, match="128 bytes, over the 127 limit"):
        writer.check_name("x" * 128)


def test_cli_reports_a_bad_directory(tmp_path, capsys):
    from omnivoice.convert.__main__ import main

    assert main([str(tmp_path), "-o", str(tmp_path / "out")]) == 2  # bad input, as in every CLI (omnivoice.cli)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "config.json" in err and "Traceback" not in err


# Runs the converter's CLI where the ggml binding cannot be imported: converting is numpy only (issue 12.2).
WITHOUT_GGML = """
import sys
class NoGGML:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[:2] == ["omnivoice", "ggml"]:
            raise ImportError("no ggml build here")
sys.meta_path.insert(0, NoGGML())
from omnivoice.convert.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_cli_converts_with_progress_and_without_ggml(tmp_path, tiny_ckpt):
    res = subprocess.run([sys.executable, "-c", WITHOUT_GGML, str(tiny_ckpt), "-o", str(tmp_path), "--quant", "bf16"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "llm.embed_tokens.weight" in res.stderr and "fold(" in res.stderr and "permute(" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["omnivoice-base-BF16.gguf", "omnivoice-tokenizer-F32.gguf"]


def test_cli_default_weight_type_follows_the_backend(tmp_path, tiny_ckpt, capsys):
    from omnivoice.convert.__main__ import main

    assert main([str(tiny_ckpt), "-o", str(tmp_path), "--backend", "cpu", "-q"]) == 0
    assert capsys.readouterr().err == ""  # -q: no progress at all
    from omnivoice.resolve import default_quant  # what tts --quant auto converts to on this CPU

    assert (tmp_path / f"omnivoice-base-{default_quant('cpu').upper()}.gguf").is_file()
