"""Voice-design instructs: the attribute vocabulary, validation, and the English/Chinese resolution rule.

A port of the reference's utils/voice_design.py and `_resolve_instruct` (models/omnivoice.py). An instruct is a
comma-separated list of attributes, at most one per category: "female, low pitch, british accent" or
"女，低音调，四川话". Accents exist only in English and force English; dialects only in Chinese and force
Chinese; otherwise the items are written in Chinese when the text to speak contains CJK ideographs
(see `instruct_uses_zh`), else in English.
"""

from __future__ import annotations

import difflib
import re
from typing import Dict, FrozenSet, List, Optional, Tuple

_ZH_RE = re.compile(r"[\u4e00-\u9fff]")

# Mutually exclusive categories, as (name, {english: chinese}) for translatable ones.
GENDER = {"male": "男", "female": "女"}
AGE = {"child": "儿童", "teenager": "少年", "young adult": "青年", "middle-aged": "中年", "elderly": "老年"}
PITCH = {
    "very low pitch": "极低音调",
    "low pitch": "低音调",
    "moderate pitch": "中音调",
    "high pitch": "高音调",
    "very high pitch": "极高音调",
}
STYLE = {"whisper": "耳语"}
# English only: no Chinese counterpart.
ACCENTS: FrozenSet[str] = frozenset({
    "american accent", "british accent", "australian accent", "chinese accent", "canadian accent",
    "indian accent", "korean accent", "portuguese accent", "russian accent", "japanese accent",
})
# Chinese only: no English counterpart.
DIALECTS: FrozenSet[str] = frozenset({
    "河南话", "陕西话", "四川话", "贵州话", "云南话", "桂林话", "济南话", "石家庄话", "甘肃话", "宁夏话", "青岛话", "东北话",
})

EN_TO_ZH: Dict[str, str] = {**GENDER, **AGE, **PITCH, **STYLE}
ZH_TO_EN: Dict[str, str] = {v: k for k, v in EN_TO_ZH.items()}

# (category name, every spelling in it), in the reference's order.
CATEGORIES: Tuple[Tuple[str, FrozenSet[str]], ...] = (
    ("gender", frozenset(GENDER) | frozenset(GENDER.values())),
    ("age", frozenset(AGE) | frozenset(AGE.values())),
    ("pitch", frozenset(PITCH) | frozenset(PITCH.values())),
    ("style", frozenset(STYLE) | frozenset(STYLE.values())),
    ("accent", ACCENTS),
    ("dialect", DIALECTS),
)

ALL_VALID: FrozenSet[str] = frozenset(EN_TO_ZH) | frozenset(ZH_TO_EN) | ACCENTS | DIALECTS
VALID_EN: FrozenSet[str] = frozenset(i for i in ALL_VALID if not _ZH_RE.search(i))
VALID_ZH: FrozenSet[str] = frozenset(i for i in ALL_VALID if _ZH_RE.search(i))


class InstructError(ValueError):
    """An instruct with an unsupported item, a dialect mixed with an accent, or two items of one category."""


def instruct_uses_zh(text: Optional[str]) -> bool:
    """Whether the text to speak asks for a Chinese instruct (it contains a CJK ideograph U+4E00..U+9FFF)."""
    return bool(text and _ZH_RE.search(text))


def category_of(item: str) -> Optional[str]:
    """Category name ("gender", "age", "pitch", "style", "accent", "dialect") of a normalised item."""
    for name, members in CATEGORIES:
        if item in members:
            return name
    return None


def resolve_instruct(instruct: Optional[str], use_zh: bool = False) -> Optional[str]:
    """Validate and normalise a voice-design instruct; None or blank gives None.

    Items are split on "," or "，", stripped and lower-cased, then translated to one language: Chinese if a
    dialect is present or (without accent) if use_zh, English otherwise; joined with "，" when any item is
    Chinese, else ", ". Raises InstructError (a ValueError, with the reference's message listing the bad items,
    a close match, and all valid items) for unknown items, dialect + accent, or two items of one category.
    """
    if instruct is None:
        return None
    if not isinstance(instruct, str):
        raise TypeError(f"instruct must be a str or None, got {type(instruct).__name__}")
    instruct_str = instruct.strip()
    if not instruct_str:
        return None

    raw_items = [x for x in re.split(r"\s*[,，]\s*", instruct_str) if x]
    unknown: List[Tuple[str, str, Optional[str]]] = []
    normalised: List[str] = []
    for raw in raw_items:
        n = raw.strip().lower()
        if n in ALL_VALID:
            normalised.append(n)
        else:
            sug = difflib.get_close_matches(n, ALL_VALID, n=1, cutoff=0.6)
            unknown.append((raw, n, sug[0] if sug else None))

    if unknown:
        lines = []
        for raw, n, sug in unknown:
            if sug:
                lines.append(f"  '{raw}' -> '{n}' (unsupported; did you mean '{sug}'?)")
            else:
                lines.append(f"  '{raw}' -> '{n}' (unsupported)")
        raise InstructError(
            f"Unsupported instruct items found in {instruct_str}:\n"
            + "\n".join(lines)
            + "\n\nValid English items: "
            + ", ".join(sorted(VALID_EN))
            + "\nValid Chinese items: "
            + "，".join(sorted(VALID_ZH))
            + "\n\nTip: Use only English or only Chinese instructs. "
            "English instructs should use comma + space (e.g. "
            "'male, indian accent'),\nChinese instructs should use full-width "
            "comma (e.g. '男，河南话')."
        )

    has_dialect = any(n.endswith("话") for n in normalised)
    has_accent = any(" accent" in n for n in normalised)
    if has_dialect and has_accent:
        raise InstructError(
            "Cannot mix Chinese dialect and English accent in a single instruct. "
            "Dialects are for Chinese speech, accents for English speech."
        )
    if has_dialect:
        use_zh = True
    elif has_accent:
        use_zh = False

    if use_zh:
        normalised = [EN_TO_ZH.get(n, n) for n in normalised]
    else:
        normalised = [ZH_TO_EN.get(n, n) for n in normalised]

    conflicts = []
    for _name, members in CATEGORIES:
        hits = [n for n in normalised if n in members]
        if len(hits) > 1:
            conflicts.append(hits)
    if conflicts:
        raise InstructError(
            "Conflicting instruct items within the same category: "
            + "; ".join(" vs ".join(f"'{x}'" for x in group) for group in conflicts)
            + ". Each category (gender, age, pitch, style, accent, dialect) "
            "allows at most one item."
        )

    has_zh = any(any("\u4e00" <= c <= "\u9fff" for c in n) for n in normalised)
    return ("，" if has_zh else ", ").join(normalised)
