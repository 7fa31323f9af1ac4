"""The process's configuration from its environment: every `OMNIVOICE_*` variable the package reads, read here
into one typed, frozen record (docs/CONFIG.md has the table; VARIABLES is its source: tools/config_table.py).

    from omnivoice.config import current
    current().threads          # OMNIVOICE_THREADS as an int, or None when unset

No other module reads an `OMNIVOICE_*` variable (tests/test_config.py checks). Every setting a user would
change is also an argument in code (the `argument` column): OmniVoice(n_threads=, exact_f32=, cpu_products=,
device_maskgit=, model=), LanguageModel(variant=, padded_attention=, max_graphs=, shape_classes=),
BatchEngine(pipeline=); an argument given wins over the variable. `current()` parses the
variables again only when one of them changed, so a test may set one per process or with monkeypatch. A malformed
value is a ValueError naming the variable.

This module imports nothing of the package: every layer may use it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Mapping, Optional

__all__ = ["Config", "Variable", "VARIABLES", "current", "from_env", "variable"]


def _switch(name: str, text: str) -> Optional[bool]:
    """"1" on, "0" off; any other value leaves the choice to the code, as unset does."""
    return text == "1" if text in ("0", "1") else None


def _count(name: str, text: str, low: int) -> int:
    if not text.strip().isdigit() or int(text) < low:
        raise ValueError(f"{name} must be a whole number >= {low}, got {text!r}")
    return int(text)


@dataclass(frozen=True)
class Variable:
    """One environment variable: the Config field it sets, how its text is read, what it does (the docs table),
    and the argument in code that overrides it."""

    env: str
    field: str
    parse: Callable[[str, str], object]
    doc: str
    argument: str = ""


VARIABLES: tuple[Variable, ...] = (
    Variable("OMNIVOICE_MODEL", "model", lambda n, t: t or None,
             "the model when none is named: a GGUF, a folder, a checkpoint or a Hugging Face repo id "
             "(default k2-fsa/OmniVoice)", "OmniVoice(model=), --model"),
    Variable("OMNIVOICE_CACHE", "cache", lambda n, t: Path(t).expanduser() if t else None,
             "where converted checkpoints are kept (default ~/.cache/omnivoice)"),
    Variable("OMNIVOICE_THREADS", "threads", lambda n, t: _count(n, t, 1) if t.strip() else None,
             "CPU threads (default: the usable cores less the busy ones; at most 4 a usable core)",
             "OmniVoice(n_threads=), --threads"),
    Variable("OMNIVOICE_EXACT_F32", "exact_f32", lambda n, t: t.strip() not in ("", "0"),
             "1: float32 arithmetic where a GPU backend would round (Vulkan's float32 shaders, F32 K/V)",
             "OmniVoice(exact_f32=)"),
    Variable("OMNIVOICE_CPU_PRODUCTS", "cpu_products", lambda n, t: t or None,
             "the LM's matrix products on the CPU: auto, ggml, i16, i8, amx, fma (runners.lm.products_kernel)",
             "OmniVoice(cpu_products=), --cpu-products"),
    Variable("OMNIVOICE_DEVICE_MASKGIT", "device_maskgit", lambda n, t: t != "0",
             "0: MaskGIT's choices on the host even where the device can make them (CUDA, where the build "
             "has the kernel); default 1", "OmniVoice(device_maskgit=)"),
    Variable("OMNIVOICE_DEVICE_REQUESTS", "device_requests", lambda n, t: _count(n, t, 1) if t else None,
             "the most greedy requests whose MaskGIT steps one run on the device takes (CUDA, where the build has "
             "the kernel); more run on the host in two pipelined groups (default 64)",
             "BatchEngine(device_requests=)"),
    Variable("OMNIVOICE_LM_VARIANT", "lm_variant", lambda n, t: t,
             "the LM graph's composition, e.g. none, kv_rows, qk_rope,kv_rows (models.lm.Variant; default: by "
             "backend and build)", "LanguageModel(variant=)"),
    Variable("OMNIVOICE_PADDED_ATTENTION", "padded_attention", _switch,
             "1/0: a packed batch's attention in padded buckets, or one call per segment (default: padded on "
             "GPUs with flash attention)", "LanguageModel(padded_attention=)"),
    Variable("OMNIVOICE_LM_GRAPHS", "lm_graphs", lambda n, t: _count(n, t, 0) if t else None,
             "how many closed LM graphs are kept for the next of their shape or shape class (default 16 on GPUs, 0 on "
             "the CPU)",
             "LanguageModel(max_graphs=)"),
    Variable("OMNIVOICE_SHAPE_CLASSES", "shape_classes", _switch,
             "1/0: sessions of up to four greedy prompts take the kept graph of their shape class, padded, instead "
             "of one of their exact lengths (default: where graphs are kept and attention is padded, GPUs)",
             "LanguageModel(shape_classes=)"),
    Variable("OMNIVOICE_PIPELINE", "pipeline", _switch,
             "1/0: the engine runs two step groups, one on the device while the host makes the other's choices "
             "(default: where a graph's run can be waited for alone, CUDA)", "BatchEngine(pipeline=)"),
    Variable("OMNIVOICE_GGML_LIB_DIR", "ggml_lib_dir", lambda n, t: Path(t) if t else None,
             "load ggml from this folder instead of the package's own build (read when omnivoice.ggml is first "
             "imported)"),
    Variable("OMNIVOICE_API_KEY", "api_key", lambda n, t: t or None,
             "the key the speech server asks of clients", "--api-key"),
)


@dataclass(frozen=True)
class Config:
    """The environment's settings; None where a variable is unset and the code decides (see VARIABLES)."""

    model: Optional[str] = None
    cache: Optional[Path] = None
    threads: Optional[int] = None
    exact_f32: bool = False
    cpu_products: Optional[str] = None
    device_maskgit: bool = True
    device_requests: Optional[int] = None
    lm_variant: Optional[str] = None
    padded_attention: Optional[bool] = None
    lm_graphs: Optional[int] = None
    shape_classes: Optional[bool] = None
    pipeline: Optional[bool] = None
    ggml_lib_dir: Optional[Path] = None
    api_key: Optional[str] = None

    @property
    def cache_dir(self) -> Path:
        """Where converted checkpoints live: OMNIVOICE_CACHE, else ~/.cache/omnivoice."""
        return self.cache or Path.home() / ".cache" / "omnivoice"


def from_env(environ: Mapping[str, str]) -> Config:
    """The Config these variables make (unset ones keep the defaults); ValueError names a malformed one."""
    return Config(**{v.field: v.parse(v.env, environ[v.env]) for v in VARIABLES if v.env in environ})


def variable(env: str) -> object:
    """One variable's setting as current() gives it, parsed alone: for what is read when a module is imported
    (OMNIVOICE_GGML_LIB_DIR), where another variable's malformed value must not stop the import (and with it
    every command's --help); that one's error then comes from the command's run, worded, exit status 2."""
    (v,) = [v for v in VARIABLES if v.env == env]
    text = os.environ.get(env)
    return getattr(Config(), v.field) if text is None else v.parse(env, text)


_last: Optional[tuple[tuple, Config]] = None


def current() -> Config:
    """This process's Config, parsed again only when one of the variables changed since the last call."""
    global _last
    key = tuple(os.environ.get(v.env) for v in VARIABLES)
    if _last is None or _last[0] != key:
        _last = (key, from_env(os.environ))
    return _last[1]


assert {v.field for v in VARIABLES} == {f.name for f in fields(Config)}, "one variable per Config field"
