"""Small file helpers shared by the converter tests."""

from __future__ import annotations

import os
from pathlib import Path


def link_copy(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    """A checkpoint directory whose files are symlinks to ``src``'s (cheap to damage or replace one file)."""
    for p in src.rglob("*"):
        rel = p.relative_to(src).as_posix()
        if p.is_file() and not rel.startswith(skip):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(p, dst / rel)
    return dst


def replace_file(path: Path, data: bytes) -> None:
    """Replace a (symlinked) file by a real one holding ``data``."""
    path.unlink()
    path.write_bytes(data)
