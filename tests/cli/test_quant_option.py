"""Every command that loads a model takes the same --quant: the weight types a converted folder or a Hugging Face
repo of GGUFs may hold (omnivoice.cpp's K-quant files among them), and nothing else."""

from __future__ import annotations

import pytest

from omnivoice.batch.__main__ import build_parser as batch_parser
from omnivoice.resolve import REPO_QUANT_ORDER
from omnivoice.server.__main__ import build_parser as server_parser
from omnivoice.tts import build_parser as tts_parser

COMMANDS = {"tts": (tts_parser, ["hello"]), "server": (server_parser, []),
            "batch": (batch_parser, ["m.jsonl", "-o", "out"])}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_weight_type_is_accepted(command):
    parser, required = COMMANDS[command]
    for quant in ("auto",) + REPO_QUANT_ORDER:
        assert parser().parse_args(required + ["--quant", quant]).quant == quant
    assert "q4_k_m" in REPO_QUANT_ORDER


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_type_is_refused(command, capsys):
    parser, required = COMMANDS[command]
    with pytest.raises(SystemExit) as e:
        parser().parse_args(required + ["--quant", "q3_x"])
    assert e.value.code == 2 and "q3_x" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(COMMANDS) + ["convert"])
def test_the_help_of_auto_says_what_default_quant_does(command, capsys):
    """Every --quant help says default_quant's rule (convert's said "f32 on the CPU" and wrote F16), and the
    rule is default_quant's for each backend and CPU it names."""
    from omnivoice.convert.__main__ import main as convert_main
    from omnivoice.resolve import AUTO_QUANT_HELP, default_quant

    if command == "convert":
        with pytest.raises(SystemExit):
            convert_main(["--help"])
        text = capsys.readouterr().out
    else:
        text = COMMANDS[command][0]().format_help()
    text = " ".join(text.split())
    assert AUTO_QUANT_HELP in text and "f32 on the CPU" not in text
    assert AUTO_QUANT_HELP.startswith("bf16 on CUDA, f16 on other GPUs;")
    assert (default_quant("cuda"), default_quant("vulkan"), default_quant("metal")) == ("bf16", "f16", "f16")
    assert "f16 with AVX2 and F16C, else f32" in AUTO_QUANT_HELP
    assert (default_quant("cpu", frozenset({"AVX2", "F16C"})), default_quant("cpu", frozenset())) == ("f16", "f32")
