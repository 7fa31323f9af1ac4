"""What a converted file was made from: the checkpoint files that decide it, the converter's code, and one
content hash of both. The codec GGUF records its hash (omnivoice.source_sha256), so converting a second LM
weight type into the same folder keeps the codec file instead of rewriting it; the model cache
(omnivoice.resolve) names its entries after such hashes, so changed weights never reuse a stale GGUF.
"""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path
from typing import Callable

from ..digest import file_sha256
from .checkpoint import _read_json

FileHash = Callable[[Path], str]

_PACKAGE = Path(__file__).resolve().parents[1]


def source_files(root: str | Path) -> dict[str, list[Path]]:
    """The files of a checkpoint that decide the converted GGUFs, as {"lm": [...], "codec": [...]} of paths
    relative to `root` in a fixed order (existing files only): what open_checkpoint reads."""
    root = Path(root)
    lm = [Path(p) for p in ("config.json", "tokenizer.json", "tokenizer_config.json")]
    if (root / "model.safetensors").is_file():
        lm.append(Path("model.safetensors"))
    elif (root / "model.safetensors.index.json").is_file():
        weight_map = _read_json(root / "model.safetensors.index.json").get("weight_map")
        shards = sorted({v for v in weight_map.values() if isinstance(v, str)}) if isinstance(weight_map, dict) else []
        lm += [Path("model.safetensors.index.json")] + [Path(s) for s in shards]
    codec = [Path("audio_tokenizer") / n for n in ("config.json", "preprocessor_config.json", "model.safetensors")]
    return {"lm": [p for p in lm if (root / p).is_file()], "codec": [p for p in codec if (root / p).is_file()]}


def converter_id() -> str:
    """sha256 of the converter's code (this package, the GGUF key and writer modules) and the gguf package
    version whose quantizers it calls: a changed converter makes new files, so cached ones must not be reused."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(__file__).parent.glob("*.py") if p.name != "__main__.py")
    files += sorted(_PACKAGE.glob("gguf*.py")) + sorted((_PACKAGE / "gguf").glob("*.py"))
    for f in files:
        h.update(f"{f.relative_to(_PACKAGE)}\0".encode() + f.read_bytes() + b"\0")
    try:
        h.update(f"gguf {metadata.version('gguf')}".encode())
    except metadata.PackageNotFoundError:
        pass
    return h.hexdigest()


def source_digest(root: str | Path, parts: tuple[str, ...] = ("lm", "codec"), file_hash: FileHash = file_sha256) -> str:
    """One sha256 over the converter's code and the content of the checkpoint files behind `parts`."""
    root = Path(root)
    files = source_files(root)
    h = hashlib.sha256(converter_id().encode())
    for part in parts:
        for rel in files[part]:
            h.update(f"\n{part} {rel.as_posix()} {file_hash(root / rel)}".encode())
    return h.hexdigest()
