"""Graphs that count on a patched kernel ask the loaded library whether it has it (Runtime.has), never which patch
files a build record names: renumbering or squashing the patches cannot switch a feature off unnoticed."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from omnivoice.ggml import Runtime, lib
from omnivoice.ggml import backend as B

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "vendor" / "ggml" / "patches"
CAPABILITIES = {name: getattr(B, name) for name in ("FUSED_CASTS", "FATTN_TYPED_OUT", "FATTN_MASK_ROW",
                                                    "GUIDED_PICK", "QKV_ROPE_BY_POSITION", "EMBED_SUM",
                                                    "MASKGIT_STEP")}


@pytest.fixture(scope="module")
def cpu():
    rt = Runtime("cpu", 1)
    yield rt
    rt.close()


def test_what_the_cpu_build_has_is_found_and_what_it_lacks_is_absent(cpu):
    reg = lib.ggml_backend_dev_backend_reg(lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU))
    features = B.registry_features(reg)
    listed = [name for name, value in features.items() if value not in ("0", "")]
    assert listed, features  # the CPU registry lists the SIMD features its kernels were built with
    assert all(cpu.has(name) for name in listed)
    assert cpu.has("ggml_backend_set_n_threads")  # a function the CPU registry exports
    assert not cpu.has("omnivoice_no_such_capability")
    # our patches' kernels are CUDA's: a CPU runtime has none of them, so its graphs take ggml's ops
    assert not any(cpu.has(c) for c in CAPABILITIES.values())
    assert B.cpu_features() == frozenset(listed)


def _patch_texts() -> dict[str, str]:
    lock = json.loads((ROOT / "vendor" / "ggml" / "ggml.lock").read_text())
    return {p["file"]: (PATCHES / p["file"]).read_text() for p in lock["patches"]}


@pytest.mark.parametrize("constant", sorted(CAPABILITIES))
def test_each_capability_is_added_by_one_patch_beside_its_kernel(constant):
    """The name Runtime.has asks for is one that a patch's added lines make the CUDA registry answer: a feature of
    ggml_backend_cuda_get_features, or a name its get_proc_address returns a function for."""
    name = CAPABILITIES[constant]
    feature = re.compile(r'^\+\s*features\.push_back\(\{ "' + re.escape(name) + r'", "1" \}\);', re.M)
    proc = re.compile(r'^\+\s*if \(strcmp\(name, "' + re.escape(name) + r'"\) == 0\)', re.M)
    adding = [f for f, text in _patch_texts().items() if feature.search(text) or proc.search(text)]
    assert len(adding) == 1, (name, adding)


def test_no_code_path_reads_patch_file_names():
    """No module of the package asks for a patch by its file name (built_with_patch("0005-"), build_info's
    ggml_patches) but the deprecated function itself."""
    offenders = []
    for path in (ROOT / "omnivoice").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "built_with_patch":
                continue
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == \
                    "built_with_patch":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"\d{4}-.*", node.value):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
        text = path.read_text(encoding="utf-8")
        if "ggml_patches" in text and path.name != "_ffi.py":
            offenders.append(f"{path.relative_to(ROOT)}: reads ggml_patches")
    assert offenders == []


def test_a_cuda_build_of_these_patches_has_every_capability():
    """On CUDA (OMNIVOICE_TEST_BACKEND=cuda, a build from this tree's patches) the library says it has every
    kernel the graphs ask for: the patches' feature lines and 0024's function are there."""
    from tests.backend import BACKEND

    if not BACKEND.lower().startswith("cuda"):
        pytest.skip("our patches' kernels are CUDA's; the CPU build's answers are checked above")
    rt = Runtime(BACKEND, 1)
    try:
        assert [c for c in CAPABILITIES.values() if not rt.has(c)] == []
    finally:
        rt.close()
