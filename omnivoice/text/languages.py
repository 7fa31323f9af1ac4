"""Language names and ids (646 of each), resolved as the reference's `_resolve_language` does.

Rules (models/omnivoice.py `_resolve_language`): None or any casing of "none" -> None (language-agnostic);
an exact language id ("en", "cmn", case-sensitive) -> itself; otherwise the lower-cased name ("English",
"ENGLISH") -> its id. The reference logs a warning and falls back to None for anything else; here that is an
error listing close matches, unless strict=False asks for the reference's fallback.
"""

from __future__ import annotations

import difflib
import logging
from typing import FrozenSet, List, Optional

from .lang_table import LANG_NAME_TO_ID, TITLE_EXCEPTIONS

logger = logging.getLogger(__name__)

LANG_NAMES: FrozenSet[str] = frozenset(LANG_NAME_TO_ID)
LANG_IDS: FrozenSet[str] = frozenset(LANG_NAME_TO_ID.values())


class UnknownLanguageError(ValueError):
    """A language that is neither a supported name nor a supported id."""


def suggest_languages(language: str, n: int = 5) -> List[str]:
    """Close matches among the supported names and ids (difflib ratio >= 0.6), best first."""
    key = language.strip().lower()
    names = difflib.get_close_matches(key, LANG_NAMES, n=n, cutoff=0.6)
    ids = difflib.get_close_matches(language.strip(), LANG_IDS, n=n, cutoff=0.6)
    out: List[str] = []
    for s in names + ids:
        if s not in out:
            out.append(s)
    return out[:n]


def resolve_language(language: Optional[str], strict: bool = True) -> Optional[str]:
    """Language id for a name or id, or None for no language.

    Raises UnknownLanguageError (naming close matches) for an unsupported language; with strict=False it logs a
    warning and returns None instead, exactly like the reference.
    """
    if language is None:
        return None
    if not isinstance(language, str):
        raise TypeError(f"language must be a str or None, got {type(language).__name__}")
    if language.lower() == "none":
        return None
    if language in LANG_IDS:
        return language
    key = language.lower()
    if key in LANG_NAME_TO_ID:
        return LANG_NAME_TO_ID[key]
    if not strict:
        logger.warning("Language %r is not recognized; falling back to None (language-agnostic mode).", language)
        return None
    sug = suggest_languages(language)
    hint = f" Did you mean: {', '.join(repr(s) for s in sug)}?" if sug else ""
    raise UnknownLanguageError(
        f"unknown language {language!r}: expected one of the {len(LANG_NAMES)} supported language names "
        f"(e.g. 'English', case-insensitive) or ids (e.g. 'en', case-sensitive), or 'None'.{hint}"
    )


def lang_display_name(name: str) -> str:
    """Display form of a lower-case language name ("english" -> "English"), as the reference writes it."""
    return TITLE_EXCEPTIONS.get(name, name.title())


def language_names() -> List[str]:
    """All supported lower-case language names, sorted."""
    return sorted(LANG_NAMES)


def language_ids() -> List[str]:
    """All supported language ids, sorted."""
    return sorted(LANG_IDS)
