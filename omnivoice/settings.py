"""One synthesis's checked settings: the options of omnivoice.options, with the language and instruct resolved.

    settings = make_settings("Hello.", language="English", num_step=16)   # OptionError names a bad option

`Settings` is what the pipeline and the engine read; `make_settings` the one place options become it, needing no
model (`omnivoice.api` re-exports it, with `check_options`). Pure Python: text/ and generate/ below it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .generate.maskgit import GenerationConfig
from .options import DEFAULTS, SAMPLER, check_all

__all__ = ["Settings", "make_settings", "check_options"]


@dataclass(frozen=True)
class Settings:
    """Everything that shapes one synthesis; defaults are the reference's (omnivoice.options)."""

    language: Optional[str] = None          # resolved language id, or None
    instruct: Optional[str] = None          # resolved instruct, or None
    duration: Optional[float] = DEFAULTS["duration"]   # seconds; None estimates from the text
    speed: float = DEFAULTS["speed"]
    denoise: bool = DEFAULTS["denoise"]
    sampler: GenerationConfig = field(default_factory=GenerationConfig)
    seed: Optional[int] = DEFAULTS["seed"]
    postprocess_output: bool = DEFAULTS["postprocess_output"]
    chunk_duration: float = DEFAULTS["chunk_duration"]
    chunk_threshold: float = DEFAULTS["chunk_threshold"]
    pad_duration: float = DEFAULTS["pad_duration"]      # seconds of silence added at each end of the output
    fade_duration: float = DEFAULTS["fade_duration"]    # seconds of fade-in and fade-out


def make_settings(text: str = "", language: Optional[str] = None, instruct: Optional[str] = None,
                  **options) -> Settings:
    """Check every option (omnivoice.options.TABLE lists them) and resolve language and instruct into Settings.

    Needs no model. Raises OptionError naming a bad option, UnknownLanguageError or InstructError (ValueErrors),
    and TypeError for an unknown option name. `text` decides whether instruct attributes are worded in Chinese.
    """
    from .text.languages import resolve_language
    from .text.voice_design import instruct_uses_zh, resolve_instruct

    o = check_all(options)
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    lang = resolve_language(language)
    inst = resolve_instruct(instruct, use_zh=instruct_uses_zh(text)) if instruct else None
    rest = {k: v for k, v in o.items() if k not in SAMPLER}
    return Settings(language=lang, instruct=inst, sampler=GenerationConfig(**{k: o[k] for k in SAMPLER}), **rest)


def check_options(text: str = "", language: Optional[str] = None, instruct: Optional[str] = None,
                  **options) -> None:
    """Raise what synthesize would raise for these options, without a model (see make_settings)."""
    make_settings(text, language, instruct, **options)
