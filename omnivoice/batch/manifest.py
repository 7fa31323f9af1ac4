"""The batch manifest: JSON Lines as the reference's `omnivoice-infer-batch` reads them.

One JSON object per line: `id` and `text` required; `ref_audio` (a path, relative to the manifest's folder),
`ref_text`, `instruct`, `language_id` (or `language`), `duration`, `speed` as in the reference; also any
synthesis option of `SynthesisRequest` (omnivoice.options: seed, num_step, guidance_scale, ...; and
preprocess_prompt), which override the command line's defaults for that line.
Blank lines are skipped. Any other key makes its line fail, naming the key and the nearest known one (the
reference ignores them, so a typo such as "speeed" would silently change nothing; the server refuses unknown
fields too).

Every line becomes an Item: a checked SynthesisRequest, or the reason it cannot be one (not JSON, with its line
number; no id or text; an id that is not a usable file name; a duplicate id; an unknown field; a missing or
unreadable ref_audio; an unknown language; any value SynthesisRequest.validate refuses, with api's option
checks). A failed item keeps the id as the line gave it, whatever it is. Every line is checked before a model
loads, so all bad lines are reported at once, before any work.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..engine.request import SynthesisRequest
from ..options import DEFAULTS as OPTIONS

__all__ = ["Item", "Manifest", "read_manifest", "REFERENCE_FIELDS", "OPTION_FIELDS", "KNOWN_FIELDS"]

REFERENCE_FIELDS = ("id", "text", "ref_audio", "ref_text", "instruct", "language_id", "language", "duration",
                    "speed")
# the synthesis options beside the reference's fields (omnivoice.options, the one table of them)
OPTION_FIELDS = tuple(k for k in OPTIONS if k not in REFERENCE_FIELDS) + ("preprocess_prompt",)
MAX_ID_BYTES = 200  # file names are at most 255 bytes; room for the extension and the writer's temp suffix


KNOWN_FIELDS = REFERENCE_FIELDS + OPTION_FIELDS


@dataclass
class Item:
    """One manifest line: its number, id and request, or the reason it failed. The id of a good item is its
    output's base name; a failed one keeps the line's value as it is (None when the line has none)."""

    line: int
    id: Any
    request: Optional[SynthesisRequest] = None
    error: Optional[str] = None


@dataclass
class Manifest:
    path: Path
    items: list[Item]

    @property
    def good(self) -> list[Item]:
        return [i for i in self.items if i.request is not None]

    @property
    def bad(self) -> list[Item]:
        return [i for i in self.items if i.error is not None]


def check_id(value: Any) -> str:
    """The id as the output file's base name; ValueError when it cannot be one."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"'id' must be a string, got {type(value).__name__}")
    s = str(value)
    if not s.strip():
        raise ValueError("'id' is empty")
    if "/" in s or "\\" in s or "\0" in s or s in (".", "..") or s.startswith("."):
        raise ValueError(f"'id' {s!r} cannot be a file name (no '/', '\\', NUL, or leading '.')")
    if len(s.encode("utf-8", "surrogatepass")) > MAX_ID_BYTES:
        raise ValueError(f"'id' is longer than {MAX_ID_BYTES} bytes")
    return s


def unknown_field(key: str) -> str:
    """The error of a field no manifest line may hold, naming the nearest known one."""
    near = difflib.get_close_matches(key, KNOWN_FIELDS, n=1)
    hint = f"did you mean {near[0]!r}?" if near else f"the fields are {', '.join(KNOWN_FIELDS)}"
    return f"unknown field {key!r} ({hint})"


def _request(obj: dict, base: Path, defaults: dict) -> SynthesisRequest:
    fields = dict(defaults)
    for key in REFERENCE_FIELDS + OPTION_FIELDS:
        if key in obj and key not in ("id", "language_id", "language"):
            fields[key] = obj[key]
    if "language_id" in obj and "language" in obj and obj["language_id"] != obj["language"]:
        raise ValueError(f"'language_id' {obj['language_id']!r} and 'language' {obj['language']!r} disagree")
    lang = obj.get("language_id", obj.get("language"))
    if lang is not None:
        fields["language"] = lang
    ref = fields.get("ref_audio")
    if isinstance(ref, str) and ref and not os.path.isabs(ref):
        fields["ref_audio"] = str(base / ref)
    elif ref is not None and not isinstance(ref, str):
        raise ValueError(f"'ref_audio' must be a path (a string), got {type(ref).__name__}")
    if fields.get("ref_audio") == "":
        fields["ref_audio"] = None
    if fields.get("instruct") == "":
        fields["instruct"] = None
    return SynthesisRequest(**fields).validate()


def read_manifest(path: str | os.PathLike, defaults: Optional[dict] = None) -> Manifest:
    """Read and check every line of a JSONL manifest. `defaults` are SynthesisRequest fields for options a line
    does not give. OSError (unreadable file) and UnicodeDecodeError propagate: the whole manifest is bad."""
    path = Path(path)
    base = path.resolve().parent
    defaults = dict(defaults or {})
    items: list[Item] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                items.append(Item(n, None, error=f"line {n}: not JSON ({e.msg} at column {e.colno})"))
                continue
            if not isinstance(obj, dict):
                items.append(Item(n, None, error=f"line {n}: expected a JSON object, got {type(obj).__name__}"))
                continue
            if "id" not in obj:
                items.append(Item(n, None, error=f"line {n}: no 'id'"))
                continue
            try:
                rid = check_id(obj["id"])
            except ValueError as e:
                items.append(Item(n, obj["id"], error=f"line {n}: {e}"))
                continue
            unknown = [key for key in obj if key not in KNOWN_FIELDS]
            if unknown:
                items.append(Item(n, rid, error=f"line {n}: " + "; ".join(unknown_field(k) for k in unknown)))
                continue
            if rid in seen:
                items.append(Item(n, rid, error=f"line {n}: duplicate id {rid!r} (first on line {seen[rid]})"))
                continue
            seen[rid] = n
            if "text" not in obj:
                items.append(Item(n, rid, error=f"line {n}: no 'text'"))
                continue
            try:
                items.append(Item(n, rid, request=_request(obj, base, defaults)))
            except (ValueError, TypeError) as e:
                items.append(Item(n, rid, error=f"line {n}: {e}"))
    for it in items:
        if it.request is not None:
            it.request.id = it.id
    return Manifest(path, items)
