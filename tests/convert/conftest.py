"""Fixtures of the converter tests: a tiny random checkpoint and its GGUFs at every quantization (session-wide)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.convert.gguf_parse import GGUFFile

REPO = Path(__file__).resolve().parents[2]
BASIC_QUANTS = ("f32", "f16", "bf16", "q8_0")


def load_make_checkpoint():
    """tools/make_checkpoint.py as a module (tools/ is not a package)."""
    if "make_checkpoint" in sys.modules:
        return sys.modules["make_checkpoint"]
    spec = importlib.util.spec_from_file_location("make_checkpoint", REPO / "tools" / "make_checkpoint.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_checkpoint"] = mod  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def make_checkpoint_module():
    return load_make_checkpoint()


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory, make_checkpoint_module) -> Path:
    """A tiny-preset checkpoint (seed 1234) in the Hugging Face layout."""
    return make_checkpoint_module.make_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", "tiny", 1234)


@pytest.fixture(scope="session")
def converted(tmp_path_factory, tiny_ckpt) -> dict[str, tuple[Path, Path]]:
    """quant -> (LM GGUF, codec GGUF) of the tiny checkpoint, for the float schemes and Q8_0 (the tiny rows are
    too short for K-quant blocks: tests/interop converts a k256 checkpoint to those)."""
    from omnivoice.convert import convert_checkpoint

    out = {}
    for q in BASIC_QUANTS:
        out[q] = convert_checkpoint(tiny_ckpt, tmp_path_factory.mktemp(f"gguf-{q}"), q, progress=False)
    return out


_parsed: dict[Path, GGUFFile] = {}


@pytest.fixture(scope="session")
def parse():
    """Parse a GGUF file once per session."""

    def get(path: Path) -> GGUFFile:
        if path not in _parsed:
            _parsed[path] = GGUFFile(path)
        return _parsed[path]

    return get


@pytest.fixture(scope="session")
def source_tensors(tiny_ckpt):
    """All source tensors, read with the safetensors library (independent of the converter's reader)."""
    from safetensors.numpy import load_file

    return load_file(tiny_ckpt / "model.safetensors"), load_file(tiny_ckpt / "audio_tokenizer" / "model.safetensors")
