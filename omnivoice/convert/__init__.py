"""Hugging Face OmniVoice checkpoint -> GGUF: ``python -m omnivoice.convert CHECKPOINT_DIR -o OUT_DIR``.

Writes ``omnivoice-base-{QUANT}.gguf`` (the LM and text tokenizer, see ``lm.py``) and
``omnivoice-tokenizer-F32.gguf`` (the audio codec, see ``codec.py``). Safetensors are read directly
(``safetensors_reader.py``, no torch); every tensor and config field is checked before the first byte is
written, and each file is written to a temporary name and renamed, so a failed run leaves nothing behind.
The codec file records the hash of what it was made from (``source.py``); a codec file already in the output
folder with the same hash is kept, so converting a second LM weight type does not rewrite it.
Metadata keys and file names live in ``omnivoice.gguf``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ..gguf import keys as K
from ..gguf.names import CODEC_FILENAME, lm_filename
from ..gguf.writer import GGUFWriteError, write_gguf
from .checkpoint import Checkpoint, open_checkpoint
from .codec import plan_codec
from .errors import CheckpointError, ConversionError
from .lm import QUANTS, plan_lm
from .source import FileHash, file_sha256, source_digest

__all__ = ["convert_checkpoint", "convert_codec", "lm_filename", "CODEC_FILENAME", "QUANTS", "CheckpointError", "ConversionError",
           "GGUFWriteError", "open_checkpoint", "Checkpoint"]


def convert_checkpoint(checkpoint_dir: str | Path, out_dir: str | Path, quant: str = "f16",
                       progress: bool = True, file_hash: FileHash = file_sha256) -> tuple[Path, Path]:
    """Convert a checkpoint directory; returns the paths of the LM GGUF and the codec GGUF.

    A codec GGUF already in `out_dir` that was made from the same codec files by the same converter is kept.
    `file_hash(path)` gives a file's content hash (sha256 hex); the model cache passes a memoised one.
    """
    if quant not in QUANTS:
        raise ConversionError(f"unknown quantization {quant!r}; expected one of {', '.join(QUANTS)}")
    t0 = time.time()
    ck = open_checkpoint(checkpoint_dir)
    lm_kv, lm_tensors, _ = plan_lm(ck, quant)
    codec = _plan_codec(ck, file_hash)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lm_path = write_gguf(out / lm_filename(quant), K.ARCH_LM, lm_kv, lm_tensors, progress, "lm ")
    codec_path = _write_codec(out, codec, progress)
    if progress:
        print(f"wrote {lm_path} and {codec_path} in {time.time() - t0:.1f} s", file=sys.stderr)
    return lm_path, codec_path


def convert_codec(checkpoint_dir: str | Path, out_dir: str | Path, progress: bool = True,
                  file_hash: FileHash = file_sha256) -> Path:
    """Convert only a checkpoint's codec (what a codec-only tool needs); returns the codec GGUF's path. As in
    convert_checkpoint, one already in `out_dir` made from the same codec files is kept."""
    codec = _plan_codec(open_checkpoint(checkpoint_dir), file_hash)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return _write_codec(out, codec, progress)


def _plan_codec(ck: Checkpoint, file_hash: FileHash) -> tuple[list, list, str]:
    """The codec GGUF's metadata (with the hash of the files it is made from), tensors, and that hash."""
    kv, tensors = plan_codec(ck)
    source = source_digest(ck.root, ("codec",), file_hash)
    kv.append((K.SOURCE_SHA256, source, "str"))
    return kv, tensors, source


def _write_codec(out: Path, plan: tuple[list, list, str], progress: bool) -> Path:
    kv, tensors, source = plan
    path = out / CODEC_FILENAME
    if _made_from(path, source):
        if progress:
            print(f"kept {path}: converted from the same codec weights", file=sys.stderr)
    else:
        write_gguf(path, K.ARCH_CODEC, kv, tensors, progress, "codec ")
    return path


def _made_from(path: Path, source: str) -> bool:
    """Whether the GGUF at `path` records `source` as what it was converted from."""
    from ..gguf.reader import GGUFFormatError, read_gguf_metadata

    if path.is_symlink() or not path.is_file():  # a planted link is replaced, whatever it records
        return False
    try:
        return read_gguf_metadata(str(path), [K.SOURCE_SHA256]).get(K.SOURCE_SHA256) == source
    except (GGUFFormatError, OSError):
        return False
