"""Files in omnivoice.cpp's layout beside ours, made from the same checkpoints (session-wide).

Theirs: tests/fixtures/omnivoice_cpp_layout.py (their convert.py's F32 files) and, for their quantized files,
omnivoice.quantize run on those (their tools/quantize.cpp re-created: on the tiny and k256 checkpoints its
files were byte-identical to the C++ tool's, built against this project's ggml).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_tool(name: str):
    """tools/NAME.py as a module (tools/ is not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def cpp_layout():
    from tests.fixtures import omnivoice_cpp_layout

    return omnivoice_cpp_layout


def _theirs(cpp_layout, ckpt: Path, out: Path, quants: tuple[str, ...]) -> dict[str, Path]:
    from omnivoice.quantize import quantize_file

    base, codec = cpp_layout.write_files(ckpt, out)
    paths = {"f32": base, "codec": codec}
    for q in quants:
        paths[q] = quantize_file(base, out / f"omnivoice-base-{q.upper()}.gguf", q, progress=False)
        paths[f"codec_{q}"] = quantize_file(codec, out / f"omnivoice-tokenizer-{q.upper()}.gguf", q, progress=False)
    return paths


@pytest.fixture(scope="session")
def cpp_tiny(cpp_layout, tiny_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """Their files of the tiny checkpoint: 'f32', 'bf16', 'q8_0' (base), 'codec', 'codec_bf16', 'codec_q8_0'."""
    return _theirs(cpp_layout, tiny_checkpoint, tmp_path_factory.mktemp("cpp-tiny"), ("bf16", "q8_0"))


@pytest.fixture(scope="session")
def k256_theirs(cpp_layout, k256_checkpoint, tmp_path_factory) -> dict[str, Path]:
    """Their files of the k256 checkpoint: 'f32', 'q4_k_m' (base and codec_q4_k_m), 'codec'."""
    return _theirs(cpp_layout, k256_checkpoint, tmp_path_factory.mktemp("k256-cpp"), ("q4_k_m",))
