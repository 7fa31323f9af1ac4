"""The synthesis options: each one's name, type, default (the reference's), bounds and help, written once.

Every surface is made from this table: `OmniVoice.synthesize`'s keyword options and their checks
(`omnivoice.settings.make_settings`, re-exported by `omnivoice.api`), the sampler's `GenerationConfig`, the
pipeline's `Settings` defaults, the engine's `SynthesisRequest` fields, the command lines' flags
(`add_arguments`: `python -m omnivoice.tts`, `python -m omnivoice.batch`), the batch manifest's option fields
and the server's request schema (`pydantic_field`). A surface narrows a bound only for a reason written beside
it (the server's, in server/schema.py).

    >>> check("num_step", 8)
    8
    >>> check("speed", 0)
    Traceback (most recent call last):
    omnivoice.options.OptionError: speed must be a finite number > 0, got 0

This module imports nothing of the package: every layer may use it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

import numpy as np

__all__ = ["Option", "OptionError", "TABLE", "BY_NAME", "DEFAULTS", "SAMPLER", "MAX_DURATION", "check", "check_all",
           "flags", "add_arguments", "from_arguments", "flag_message", "pydantic_field"]

# The longest `duration` one LM context holds: Qwen3's 40960 positions at the codec's 25 frames a second. Longer
# asked for one graph past the context (the pipeline refuses a chunk that does not fit its model's context, with
# the prompt); 900 s, inside it, is a step of minutes on a CPU. Not a promise that memory allows it.
MAX_DURATION = 40960 / 25


class OptionError(ValueError):
    """A synthesis option with a value it cannot take. `option` is its name in the API (num_step), so a
    command line can name it in its own terms (--steps); `problem` says what it must be."""

    def __init__(self, option: str, problem: str, value: object) -> None:
        super().__init__(f"{option} {problem}, got {value!r}")
        self.option, self.problem, self.value = option, problem, value


@dataclass(frozen=True)
class Option:
    """One synthesis option. `kind` is float, int or bool; `nullable`: None is a value (duration: estimate
    from the text; seed: random). Numbers lie in [low, high] (`open_low`: low itself excluded) and are finite.
    `flag` is its command-line flag (a bool whose default is True gets `--no-...`); `aliases` are other
    spellings a command line also takes."""

    name: str
    kind: type
    default: Any
    help: str
    low: float = -math.inf
    high: float = math.inf
    open_low: bool = False
    nullable: bool = False
    what: str = "a finite number"          # the noun of the error message: "speed must be <what> > 0"
    flag: Optional[str] = None
    aliases: tuple[str, ...] = ()
    sampler: bool = False                  # a field of generate.GenerationConfig

    @property
    def cli_flag(self) -> str:
        if self.flag:
            return self.flag
        return ("--no-" if self.kind is bool and self.default else "--") + self.name.replace("_", "-")

    def problem(self) -> str:
        """What a value must be, in the words of the error message."""
        if self.kind is bool:
            return "must be True or False"
        if self.kind is int:
            if self.name == "seed":
                return "must be an integer below 2**64 (negative: random) or None"
            return f"must be an integer >= {self.low:g}"
        bounds = []
        if self.low > -math.inf:
            bounds.append(f"{'>' if self.open_low else '>='} {self.low:g}")
        if self.high < math.inf:
            bounds.append(f"<= {self.high:g}")
        return f"must be {self.what}{' ' + ' and '.join(bounds) if bounds else ''}"

    def check(self, value: Any) -> Any:
        """The value as the pipeline takes it (float, int, bool or None), or OptionError."""
        if value is None and self.nullable:
            return None
        if self.kind is bool:
            if isinstance(value, (bool, np.bool_)):
                return bool(value)
            raise OptionError(self.name, self.problem(), value)
        if self.kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
            if ok and self.low <= value <= self.high:
                return int(value)
            raise OptionError(self.name, self.problem(), value)
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if ok and (value > self.low if self.open_low else value >= self.low) and value <= self.high:
            return float(value)
        raise OptionError(self.name, self.problem(), value)


_SECONDS = "a number of seconds"
TABLE: tuple[Option, ...] = (
    Option("duration", float, None, "length of the generated speech in seconds, before the padding (default: "
           "estimated from the text)", low=0, high=MAX_DURATION, open_low=True, nullable=True, what=_SECONDS),
    Option("speed", float, 1.0, "speaking rate factor", low=0, open_low=True),
    Option("num_step", int, 32, "MaskGIT steps (fewer is faster)", low=1, aliases=("--steps",), sampler=True),
    Option("guidance_scale", float, 2.0, "classifier-free guidance scale", low=0, sampler=True),
    Option("t_shift", float, 0.1, "time shift of the unmasking schedule", low=0, open_low=True, sampler=True),
    Option("layer_penalty_factor", float, 5.0, "how much later codebooks are held back in the unmasking order",
           flag="--layer-penalty", aliases=("--layer-penalty-factor",), sampler=True),
    Option("position_temperature", float, 5.0, "temperature of the Gumbel noise on the unmasking order (0: "
           "greedy)", low=0, sampler=True),
    Option("class_temperature", float, 0.0, "temperature of the token sampling (0: greedy)", low=0, sampler=True),
    Option("seed", int, None, "sampling seed (default: random; a negative seed is random too)", low=-math.inf,
           high=2**64 - 1, nullable=True),
    Option("denoise", bool, True, "omit the <|denoise|> token"),
    Option("postprocess_output", bool, True, "skip the output post-processing (silence trimming, fades, padding)",
           flag="--no-postprocess"),
    Option("pad_duration", float, 0.1, "seconds of silence added at each end of the output (0: none)", low=0,
           high=10, what=_SECONDS),
    Option("fade_duration", float, 0.1, "seconds of fade-in and fade-out (0: none)", low=0, high=10, what=_SECONDS),
    Option("chunk_duration", float, 15.0, "long-form chunk length in seconds (<= 0: no chunking)",
           what="a finite number of seconds"),
    Option("chunk_threshold", float, 30.0, "chunk only above this estimated duration in seconds", low=0,
           what=_SECONDS),
)
"""Every synthesis option, in the order the API documents them."""

BY_NAME: dict[str, Option] = {o.name: o for o in TABLE}
DEFAULTS: dict[str, Any] = {o.name: o.default for o in TABLE}
"""Every synthesis option and its default (the reference's): `omnivoice.api.OPTIONS`."""
SAMPLER: tuple[str, ...] = tuple(o.name for o in TABLE if o.sampler)
"""The options that are fields of generate.GenerationConfig."""


def check(name: str, value: Any) -> Any:
    """One option's value checked and normalised (OptionError names the option); KeyError for an unknown name."""
    return BY_NAME[name].check(value)


def check_all(options: Mapping[str, Any]) -> dict[str, Any]:
    """Every option, checked and normalised, with the defaults for those not given. TypeError names unknown
    options; OptionError the first bad value."""
    unknown = sorted(set(options) - set(BY_NAME))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)}; the options are {', '.join(BY_NAME)}")
    return {o.name: o.check(options.get(o.name, o.default)) for o in TABLE}


# ---------------------------------------------------------------------------------------------- command lines
def flags(names: Iterable[str], primary: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """{option name: the flag a command line shows and names in errors}: the table's, or the spelling `primary`
    picks among the option's flag and aliases (the tts command's --steps)."""
    out = {}
    for name in names:
        o = BY_NAME[name]
        out[name] = (primary or {}).get(name, o.cli_flag)
        if out[name] not in (o.cli_flag, *o.aliases):
            raise ValueError(f"{name}: {out[name]} is not one of its flags {(o.cli_flag, *o.aliases)}")
    return out


def add_arguments(group, names: Iterable[str], primary: Optional[Mapping[str, str]] = None,
                  help: Optional[Mapping[str, str]] = None) -> None:
    """Add the flags of these options to an argparse parser or group: the one `flags` names first, then the
    option's other spellings. `help` replaces the table's help of some options in this command's words. The
    parsed value lands in `args.<name>`: None where the flag is absent, so that the table's default applies
    (from_arguments)."""
    names = list(names)
    for name, first in flags(names, primary).items():
        o = BY_NAME[name]
        spellings = [first] + [s for s in (o.cli_flag, *o.aliases) if s != first]
        text = (help or {}).get(name, o.help)
        if o.kind is bool:
            if not o.default:
                raise ValueError(f"{name}: an option whose default is False has no --no- flag")
            group.add_argument(*spellings, dest=name, action="store_const", const=False, default=None, help=text)
            continue
        default = "" if o.default is None or name in (help or {}) else f" (default {o.default:g})"
        metavar = "N" if o.kind is int else "SECONDS" if "seconds" in o.what else "X"
        group.add_argument(*spellings, dest=name, type=float if o.kind is float else int, default=None,
                           metavar=metavar, help=text + default)


def from_arguments(args, names: Iterable[str]) -> dict[str, Any]:
    """The options a command line set ({name: value}, the table's default where a flag was absent)."""
    out = {}
    for name in names:
        value = getattr(args, name)
        out[name] = BY_NAME[name].default if value is None else value
    return out


def flag_message(e: OptionError, flags: Mapping[str, str]) -> str:
    """An OptionError in a command line's terms: '--steps must be an integer >= 1, got 0'."""
    return f"{flags.get(e.option, e.option)} {e.problem}, got {e.value!r}"


# ---------------------------------------------------------------------------------------------- schemas
def pydantic_field(name: str, default: Any = None, *, low: Optional[float] = None, high: Optional[float] = None):
    """A pydantic Field of this option with the table's bounds; `low`/`high` narrow them for one surface (give
    the reason beside the call). The table's checks run again when the request becomes Settings."""
    from pydantic import Field

    o = BY_NAME[name]
    lo = o.low if low is None else max(low, o.low)
    hi = o.high if high is None else min(high, o.high)
    bounds: dict[str, float] = {}
    if lo > -math.inf:
        bounds["gt" if o.open_low and lo == o.low else "ge"] = lo
    if hi < math.inf:
        bounds["le"] = hi
    if o.kind is float:
        bounds["allow_inf_nan"] = False
    return Field(default, description=o.help, **bounds)
