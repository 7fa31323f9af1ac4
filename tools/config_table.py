"""Write docs/CONFIG.md's table of OMNIVOICE_* variables from omnivoice/config.py's VARIABLES, its one source.

    python3 tools/config_table.py            # rewrite the table's rows in docs/CONFIG.md
    python3 tools/config_table.py --check    # exit 1 and say so when the committed table is not the generated one

Only the rows of the table (the lines after its header and separator) are replaced; the prose around it is the
page's own. tests/test_config.py checks that the committed table is this tool's.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DOC = ROOT / "docs" / "CONFIG.md"
HEADER = "| variable | what it sets | argument in code (wins over the variable) |\n|---|---|---|\n"


def rows() -> str:
    """The table's rows, one a variable, in VARIABLES' order."""
    from omnivoice.config import VARIABLES

    def argument(text: str) -> str:
        return ", ".join(f"`{a.strip()}`" for a in text.split(", ")) if text else "-"

    return "".join(f"| `{v.env}` | {v.doc} | {argument(v.argument)} |\n" for v in VARIABLES)


def with_table(page: str) -> str:
    """`page` with the rows after HEADER replaced by rows(); ValueError when the page has no such table."""
    at = page.find(HEADER)
    if at < 0:
        raise ValueError(f"{DOC}: no table headed {HEADER.splitlines()[0]!r}")
    start = at + len(HEADER)
    end = start + re.match(r"(?:\|.*\n)*", page[start:]).end()
    return page[:start] + rows() + page[end:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 when the table is out of date")
    args = p.parse_args(argv)
    page = DOC.read_text(encoding="utf-8")
    new = with_table(page)
    if args.check:
        if new != page:
            print(f"{DOC.relative_to(ROOT)}: the table is not omnivoice/config.py's; run tools/config_table.py")
            return 1
        return 0
    if new != page:
        from omnivoice.files import atomic_write_text

        atomic_write_text(DOC, new)
        print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
