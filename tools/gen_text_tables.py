"""Generate the data tables of omnivoice/text/ (committed; the package never reads these sources at run time).

Regenerate both files with one command from the repository root (system python, which has `tokenizers`):

    python3 tools/gen_text_tables.py

- omnivoice/text/lang_table.py: the reference's language map (LANG_NAME_TO_ID, 646 names) and its display-name
  exceptions, read with `ast` (not imported) from the reference's omnivoice/utils/lang_map.py
  (default: .venv-ref/lib/python3*/site-packages/omnivoice/utils/lang_map.py, or --lang-map PATH).
- omnivoice/text/unicode_classes.py: the code-point ranges of \\p{L}, \\p{N} and \\s exactly as the Hugging Face
  `tokenizers` regex engine (Oniguruma) sees them, found by running its Split pre-tokenizer over every code point.
  Python's `unicodedata` is an older Unicode version than Oniguruma's, so it cannot stand in for these.
"""

from __future__ import annotations

import argparse
import ast
import glob
import os
import sys
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FOUND = sorted(glob.glob(os.path.join(ROOT, ".venv-ref", "lib", "python3*", "site-packages", "omnivoice", "utils",
                                      "lang_map.py")))
DEFAULT_LANG_MAP = _FOUND[0] if _FOUND else None
OUT_DIR = os.path.join(ROOT, "omnivoice", "text")


def read_lang_map(path: str) -> Tuple[Dict[str, str], Dict[str, str]]:
    """LANG_NAME_TO_ID and _TITLE_EXCEPTIONS from the reference's lang_map.py, without importing it."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("LANG_NAME_TO_ID", "_TITLE_EXCEPTIONS"):
                found[name] = ast.literal_eval(node.value)
    for name in ("LANG_NAME_TO_ID", "_TITLE_EXCEPTIONS"):
        if name not in found:
            raise SystemExit(f"{path}: no top-level {name} dict")
    return found["LANG_NAME_TO_ID"], found["_TITLE_EXCEPTIONS"]


def write_lang_table(path: str, name_to_id: Dict[str, str], exceptions: Dict[str, str]) -> None:
    lines = [
        '"""Language table of the reference (omnivoice 0.2.1 utils/lang_map.py). Generated: do not edit.',
        "",
        "Regenerate with: python3 tools/gen_text_tables.py",
        '"""',
        "",
        "# Lower-case language name -> language id, in the reference's order.",
        "LANG_NAME_TO_ID = {",
    ]
    lines += [f"    {k!r}: {v!r}," for k, v in name_to_id.items()]
    lines += ["}", "", "# Names whose display form is not str.title().", "TITLE_EXCEPTIONS = {"]
    lines += [f"    {k!r}: {v!r}," for k, v in exceptions.items()]
    lines += ["}", ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def probe_ranges(pattern_not: str) -> List[Tuple[int, int]]:
    """Ranges of code points that the `tokenizers` regex does NOT match with pattern_not (a negated class)."""
    from tokenizers import Regex, pre_tokenizers

    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, cps))
    split = pre_tokenizers.Split(Regex(pattern_not), behavior="removed", invert=False)
    out: List[Tuple[int, int]] = []
    for piece, (a, b) in split.pre_tokenize_str(text):
        if text[a:b] != piece:
            raise SystemExit("tokenizers returned offsets that are not code-point offsets")
        lo, hi = cps[a], cps[b - 1]
        if out and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def unicode_class_ranges() -> Dict[str, List[Tuple[int, int]]]:
    """The three classes the Qwen2 pre-tokenizer regex uses, as Oniguruma (via `tokenizers`) defines them."""
    return {
        "LETTER_RANGES": probe_ranges(r"[^\p{L}]"),
        "NUMBER_RANGES": probe_ranges(r"[^\p{N}]"),
        "SPACE_RANGES": probe_ranges(r"\S"),
    }


def write_unicode_classes(path: str, classes: Dict[str, List[Tuple[int, int]]]) -> None:
    import tokenizers

    lines = [
        '"""Unicode classes of the Qwen2 pre-tokenizer regex as Hugging Face `tokenizers` sees them.',
        "",
        f"Generated from tokenizers {tokenizers.__version__} (Oniguruma) by probing every code point: do not edit.",
        "Regenerate with: python3 tools/gen_text_tables.py",
        '"""',
        "",
    ]
    what = {"LETTER_RANGES": "\\p{L}", "NUMBER_RANGES": "\\p{N}", "SPACE_RANGES": "\\s"}
    for name, ranges in classes.items():
        lines.append(f"# {what[name]}: inclusive (first, last) code points.")
        lines.append(f"{name} = (")
        row: List[str] = []
        for lo, hi in ranges:
            row.append(f"(0x{lo:X}, 0x{hi:X}),")
            if len(row) == 6:
                lines.append("    " + " ".join(row))
                row = []
        if row:
            lines.append("    " + " ".join(row))
        lines.append(")")
        lines.append("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv: List[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lang-map", default=DEFAULT_LANG_MAP, help="the reference's utils/lang_map.py")
    ap.add_argument("--out-dir", default=OUT_DIR)
    args = ap.parse_args(argv)
    if not args.lang_map:
        raise SystemExit("no reference venv found (.venv-ref); pass --lang-map PATH/omnivoice/utils/lang_map.py")
    name_to_id, exceptions = read_lang_map(args.lang_map)
    write_lang_table(os.path.join(args.out_dir, "lang_table.py"), name_to_id, exceptions)
    print(f"lang_table.py: {len(name_to_id)} names, {len(set(name_to_id.values()))} ids")
    classes = unicode_class_ranges()
    write_unicode_classes(os.path.join(args.out_dir, "unicode_classes.py"), classes)
    print("unicode_classes.py: " + ", ".join(f"{k} {len(v)}" for k, v in classes.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
