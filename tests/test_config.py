"""The environment is read in one place (omnivoice.config), into one typed record, documented in one table."""

from __future__ import annotations

import ast
import inspect
import re
import runpy
from pathlib import Path

import pytest

from omnivoice import config
from omnivoice.config import VARIABLES, Config, current, from_env

PACKAGE = Path(config.__file__).resolve().parent
DOC = PACKAGE.parent / "docs" / "CONFIG.md"


def test_each_variable_is_parsed_to_its_type():
    c = from_env({"OMNIVOICE_THREADS": "3", "OMNIVOICE_EXACT_F32": "1", "OMNIVOICE_DEVICE_MASKGIT": "0",
                  "OMNIVOICE_PADDED_ATTENTION": "0", "OMNIVOICE_LM_GRAPHS": "0", "OMNIVOICE_PIPELINE": "1",
                  "OMNIVOICE_LM_VARIANT": "", "OMNIVOICE_CACHE": "~/x", "OMNIVOICE_MODEL": "m.gguf"})
    assert (c.threads, c.exact_f32, c.device_maskgit, c.padded_attention, c.lm_graphs, c.pipeline) == \
        (3, True, False, False, 0, True)
    assert c.lm_variant == "" and c.cache_dir == Path.home() / "x" and c.model == "m.gguf"
    unset = from_env({})
    assert unset == Config() and unset.cache_dir == Path.home() / ".cache" / "omnivoice"
    assert (unset.threads, unset.exact_f32, unset.device_maskgit, unset.padded_attention, unset.lm_variant) == \
        (None, False, True, None, None)
    assert from_env({"OMNIVOICE_EXACT_F32": "0"}).exact_f32 is False
    assert from_env({"OMNIVOICE_PIPELINE": "maybe"}).pipeline is None  # not a switch's value: the code decides
    assert (from_env({"OMNIVOICE_SHAPE_CLASSES": "0"}).shape_classes, unset.shape_classes) == (False, None)
    assert from_env({"OMNIVOICE_SHAPE_CLASSES": "1"}).shape_classes is True


@pytest.mark.parametrize("name, value", [("OMNIVOICE_THREADS", "-1"), ("OMNIVOICE_THREADS", "two"),
                                         ("OMNIVOICE_LM_GRAPHS", "-3")])
def test_a_malformed_value_names_its_variable(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a whole number"):
        from_env({name: value})


def test_current_follows_the_environment(monkeypatch):
    monkeypatch.delenv("OMNIVOICE_THREADS", raising=False)
    assert current().threads is None
    monkeypatch.setenv("OMNIVOICE_THREADS", "5")
    assert current().threads == 5 and current() is current()  # parsed once while nothing changes
    monkeypatch.delenv("OMNIVOICE_THREADS")
    assert current().threads is None


def _is_variable(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
        re.fullmatch(r"OMNIVOICE_[A-Z0-9_]+", node.value) is not None


def _names(node) -> set[str]:
    return {n.attr if isinstance(n, ast.Attribute) else n.id for n in ast.walk(node)
            if isinstance(n, (ast.Attribute, ast.Name))}


def _reads_of_the_environment(path: Path) -> list[str]:
    """The OMNIVOICE_* variables a module reads: os.environ.get / os.getenv / environ[...] / `in os.environ` of
    such a name (a message that merely names one is no read)."""
    reads = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and _names(node.func) & {"environ", "getenv"}:
            reads += [a.value for a in node.args if _is_variable(a)]
        elif isinstance(node, ast.Subscript) and "environ" in _names(node.value) and _is_variable(node.slice):
            reads.append(node.slice.value)
        elif isinstance(node, ast.Compare) and _is_variable(node.left) and \
                any("environ" in _names(c) for c in node.comparators):
            reads.append(node.left.value)
    return reads


def test_no_other_module_reads_an_omnivoice_variable():
    readers = {str(p.relative_to(PACKAGE)): names for p in PACKAGE.rglob("*.py") if p.name != "config.py"
               for names in [_reads_of_the_environment(p)] if names}
    assert readers == {}


def test_the_scan_sees_each_way_of_reading(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('import os\nos.environ.get("OMNIVOICE_A")\nos.getenv("OMNIVOICE_B", "1")\n'
                     'os.environ["OMNIVOICE_C"]\nif "OMNIVOICE_D" in os.environ: pass\n'
                     'raise ValueError("OMNIVOICE_E must be 1")\n')
    assert sorted(_reads_of_the_environment(probe)) == ["OMNIVOICE_A", "OMNIVOICE_B", "OMNIVOICE_C", "OMNIVOICE_D"]


def test_the_table_in_docs_lists_every_variable():
    documented = set(re.findall(r"^\| `(OMNIVOICE_[A-Z0-9_]+)` \|", DOC.read_text(encoding="utf-8"), re.M))
    assert documented == {v.env for v in VARIABLES}


def test_the_table_in_docs_is_the_generated_one():
    """docs/CONFIG.md's rows are tools/config_table.py's from VARIABLES, word for word (run it after a change)."""
    tool = runpy.run_path(str(PACKAGE.parent / "tools" / "config_table.py"))
    page = DOC.read_text(encoding="utf-8")
    assert tool["with_table"](page) == page
    stale = page.replace("CPU threads (default:", "CPU threads (by default:")
    assert stale != page and tool["with_table"](stale) == page  # a row edited by hand is what the check sees


def test_a_setting_named_as_an_argument_is_one():
    from omnivoice.api import OmniVoice
    from omnivoice.engine.core import BatchEngine
    from omnivoice.runners.lm import LanguageModel

    owners = {"OmniVoice": OmniVoice, "LanguageModel": LanguageModel, "BatchEngine": BatchEngine}
    for v in VARIABLES:
        for owner, arg in re.findall(r"(\w+)\((\w+)=\)", v.argument):
            assert arg in inspect.signature(owners[owner].__init__).parameters, (v.env, owner, arg)
