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
