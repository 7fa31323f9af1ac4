"""Content hashes of files: sha256 read in blocks (a checkpoint's weights are gigabytes).

The one file hasher of the package (the converter's source digest, the model cache's names), the build
(build_ext.py: the pinned archive and the ggml patches) and the tools. Standard library only: the build and the
PyTorch reference's environment, which cannot import this package under its name (the reference's is also
`omnivoice`), load this file by its path.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK = 1 << 22


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            h.update(block)
    return h.hexdigest()
