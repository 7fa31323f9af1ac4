"""docs/ARCHITECTURE.md's layer rule, checked on the source: every module belongs to one layer, imports only its own
layer and those below it (a function's deferred import counts too, and importing a module runs its packages'
__init__ first), and no import circle crosses a layer."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "omnivoice"
DOC = PACKAGE.parent / "docs" / "ARCHITECTURE.md"

# Bottom to top; a module belongs to the layer of its longest matching prefix ("" is the package's own
# __init__), and a module no prefix matches fails test_every_module_has_a_layer. The same list is the table of
# docs/ARCHITECTURE.md (test_the_doc_lists_the_layers).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("files", "digest", "config", "options")),
    ("gguf", ("gguf",)),
    ("pure", ("text", "generate", "audio", "codec.voice", "codec.rvq_format", "codec.rvq_packed")),
    ("ggml", ("ggml",)),
    ("formats", ("convert", "quantize")),
    ("nn", ("nn",)),
    ("models", ("models",)),
    ("loaders", ("loaders",)),
    ("runners", ("runners", "codec")),
    ("pipeline", ("settings", "pipeline")),
    ("engine", ("engine",)),
    ("api", ("", "api", "resolve")),
    ("commands", ("cli", "arguments", "tts", "cache", "codec.__main__", "convert.__main__", "quantize.__main__",
                  "batch", "server", "wyoming")),
]
RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def layer_of(module: str) -> str:
    """The layer of a module named relative to the package ("runners.lm", "" for the package itself)."""
    best, best_len = None, -1
    for name, prefixes in LAYERS:
        for p in prefixes:
            if (module == p or p and module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = name, len(p)
    return best


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: its name relative to the package -> (file, is a package's __init__)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (path, is_pkg)
    return out


def _with_parents(name: str) -> list[str]:
    """A module and the packages whose __init__ runs before it (not the package root's: it imports lazily)."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def import_graph() -> dict[str, set[str]]:
    """module -> the package's modules it imports, anywhere in its body."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        here = name.split(".") if name else []
        base = here if is_pkg else here[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name[len("omnivoice."):] for a in node.names if a.name.startswith("omnivoice.")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    pkg = base[:len(base) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                elif node.module and (node.module == "omnivoice" or node.module.startswith("omnivoice.")):
                    pkg = node.module.split(".")[1:]
                else:
                    continue
                prefix = ".".join(pkg)
                for a in node.names:
                    sub = f"{prefix}.{a.name}" if prefix else a.name
                    targets.append(sub if sub in mods else prefix)
            for t in targets:  # a package the importer is inside of is running its __init__ already
                deps.update(m for m in _with_parents(t) if m in mods and not (name == m or name.startswith(m + ".")))
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_every_module_has_a_layer():
    assert [m for m in modules() if layer_of(m) is None] == []


def test_no_module_imports_a_layer_above_its_own():
    graph = import_graph()
    upward = sorted(f"{m} ({layer_of(m)}) imports {d} ({layer_of(d)})" for m, deps in graph.items() for d in deps
                    if RANK[layer_of(d)] > RANK[layer_of(m)])
    assert upward == []


def test_no_import_circle_crosses_a_layer():
    crossing = [c for c in cycles(import_graph()) if len({layer_of(m) for m in c}) > 1]
    assert crossing == []


def test_no_module_imports_a_command_line():
    """A command line's module (python -m ..., tts, cache) is an entry point: no module but another command line
    imports it, so a library never runs argument parsing and a worker (a Ray actor) never loads a CLI."""
    entries = {m for m in modules() if m.endswith("__main__") or m in ("tts", "cache")}
    assert {"tts", "batch.__main__", "quantize.__main__"} <= entries
    assert sorted(f"{m} imports {d}" for m, deps in import_graph().items() if m not in entries
                  for d in deps if d in entries) == []


def test_the_checks_see_what_they_guard():
    """The graph holds deferred imports and package __init__s, and a circle is found: the two circles that the
    rule allows (inside the ggml binding, inside gguf's reader and its compat table) are seen."""
    graph = import_graph()
    assert "runners.lm" in graph["api"]           # OmniVoice.__init__ imports it inside the function
    assert "codec" in graph["pipeline"]           # `from .codec.voice import ...` runs codec/__init__ first
    found = cycles(graph)
    assert ["ggml.backend", "ggml.graph"] in found
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_doc_lists_the_layers():
    """ARCHITECTURE.md's layer table names the layers of this test, in the same order (top first)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Layers"):text.index("\n## ", text.index("## Layers") + 1)]
    names = re.findall(r"^    (\w+)\s{2,}", section, re.M)
    assert names == [name for name, _ in reversed(LAYERS)]


@pytest.mark.parametrize("module, layer", [("runners.lm", "runners"), ("codec.voice", "pure"),
                                           ("codec.__main__", "commands"), ("codec", "runners"), ("", "api"),
                                           ("quantize.__main__", "commands"), ("quantize", "formats")])
def test_layer_of(module, layer):
    assert layer_of(module) == layer
