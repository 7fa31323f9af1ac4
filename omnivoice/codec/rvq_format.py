"""The .rvq container: the audio codec's residual-VQ codes of one clip, e.g. a pre-encoded voice-cloning prompt.

Layout (all little-endian), a 40-byte header followed by the codes:

    offset  type      field
    0       4 bytes   magic b"ORVQ"
    4       uint32    version (1)
    8       uint32    header size in bytes (40): where the codes start
    12      uint32    n_codebooks (8)
    16      uint32    n_frames T (>= 1)
    20      uint32    sample_rate of the audio the codes stand for (24000)
    24      float32   frame_rate in frames per second (25.0; hop = sample_rate / frame_rate = 960 samples)
    28      uint32    codebook_size (1024): every code lies in [0, codebook_size)
    32      float32   ref_rms: RMS of the reference clip before loudness normalisation (what the synthesis
                      loudness step needs), finite and >= 0; the quiet NaN 0x7FC00000 when unknown
    36      uint32    reserved, 0
    40      int32     codes[n_codebooks][n_frames], codebook-major (row k holds codebook k for every frame)

The file size is exactly header size + 4 * n_codebooks * n_frames. Readers reject a wrong magic, a newer
version, a header smaller than 40 bytes, more than MAX_CODEBOOKS codebooks or MAX_FRAMES frames, a size
mismatch, out-of-range codes or a ref_rms that is infinite, negative or any NaN but the one meaning "unknown",
with an RvqFormatError naming the file and the field; a larger header (a later minor addition) is skipped.
The header is checked before the codes are read. Writes are atomic
(omnivoice.files.atomic_write).

A file without the magic is read as omnivoice.cpp's headerless, bit-packed .rvq (``rvq_packed``), whose number
of codebooks and codebook size are the codec's (OmniVoice's 8 and 1024 unless the caller passes others), with
the same MAX_FRAMES limit, checked from the file's size before it is read; ``save_rvq(..., fmt=FORMAT_CPP)``
writes that layout.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np

from ..files import atomic_write
from . import rvq_packed

MAGIC = b"ORVQ"
VERSION = 1
HEADER = struct.Struct("<4sIIIIIfIfI")
HEADER_SIZE = HEADER.size  # 40

PathLike = Union[str, "os.PathLike[str]"]

# One clip's codes: a voice prompt is seconds long (the encoder takes at most 60 s). An hour of frames keeps any
# file's decoded audio far inside one WAV file; a header claiming a million frames is refused before reading.
MAX_FRAMES = 90_000
MAX_CODEBOOKS = 64
_RMS_UNKNOWN = struct.pack("<f", float("nan"))  # b"\x00\x00\xc0\x7f": what save_rvq writes for ref_rms=None
FORMAT_OMNIVOICE = "omnivoice"      # this container (header, int32 codes)
FORMAT_CPP = "omnivoice-cpp"        # omnivoice.cpp's headerless bit-packed codes
FORMATS = (FORMAT_OMNIVOICE, FORMAT_CPP)


class RvqFormatError(ValueError):
    """A file that is not a valid .rvq container (the message names the file and the problem)."""


@dataclass(frozen=True)
class RvqFile:
    """The content of a .rvq file."""

    codes: np.ndarray            # int32 [n_codebooks, n_frames]
    sample_rate: int = 24000
    frame_rate: float = 25.0
    codebook_size: int = 1024
    ref_rms: float | None = None
    fmt: str = FORMAT_OMNIVOICE  # which layout the file had (FORMATS)

    @property
    def hop_length(self) -> int:
        """Audio samples per frame (sample_rate / frame_rate)."""
        return int(round(self.sample_rate / self.frame_rate))

    @property
    def duration(self) -> float:
        """Seconds of audio the codes stand for."""
        return self.codes.shape[1] / self.frame_rate


def _check_codes(codes, codebook_size: int, what: str) -> np.ndarray:
    a = np.asarray(codes)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{what}: codes must be integers, got dtype {a.dtype}")
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"{what}: codes must have shape [n_codebooks, T] with both >= 1, got {list(a.shape)}")
    if a.size and (a.min() < 0 or a.max() >= codebook_size):
        raise ValueError(f"{what}: codes must lie in [0, {codebook_size}); got min {a.min()}, max {a.max()}")
    return np.ascontiguousarray(a, dtype="<i4")


def save_rvq(path: PathLike, codes, *, sample_rate: int = 24000, frame_rate: float = 25.0,
             codebook_size: int = 1024, ref_rms: float | None = None, fmt: str = FORMAT_OMNIVOICE) -> None:
    """Write codes [n_codebooks, T] (integers in [0, codebook_size)) to `path` as a .rvq file, atomically.

    `fmt` FORMAT_CPP writes omnivoice.cpp's headerless layout, which keeps only the codes (no rates, no RMS).
    """
    target = Path(os.fspath(path))
    a = _check_codes(codes, codebook_size, str(target))
    if fmt not in FORMATS:
        raise ValueError(f"{target}: unknown .rvq format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if not (isinstance(sample_rate, (int, np.integer)) and 0 < sample_rate < 2**32):
        raise ValueError(f"{target}: sample_rate must be a positive integer, got {sample_rate!r}")
    if not (math.isfinite(frame_rate) and frame_rate > 0):
        raise ValueError(f"{target}: frame_rate must be a positive number, got {frame_rate!r}")
    if ref_rms is not None and not (math.isfinite(ref_rms) and ref_rms >= 0):
        raise ValueError(f"{target}: ref_rms must be a finite RMS >= 0 (or None), got {ref_rms!r}")
    if a.shape[1] > MAX_FRAMES:
        raise ValueError(f"{target}: {a.shape[1]} frames; a .rvq file holds at most {MAX_FRAMES}")
    if fmt == FORMAT_CPP:
        if codebook_size > 1 << rvq_packed.CODE_BITS:
            raise ValueError(f"{target}: omnivoice.cpp's .rvq stores {rvq_packed.CODE_BITS}-bit codes; a codebook "
                             f"of {codebook_size} entries does not fit")
        payload = rvq_packed.pack_codes(a)
    else:
        rms = float("nan") if ref_rms is None else float(ref_rms)
        payload = HEADER.pack(MAGIC, VERSION, HEADER_SIZE, a.shape[0], a.shape[1], int(sample_rate),
                              float(frame_rate), int(codebook_size), rms, 0) + a.tobytes()
    with atomic_write(target, "the .rvq output") as f:
        f.write(payload)


def read_rvq(path: PathLike, *, n_codebooks: int = 8, codebook_size: int = 1024) -> RvqFile:
    """Read and validate a .rvq file: codes plus its header fields.

    `n_codebooks` and `codebook_size` are the codec's; only a headerless omnivoice.cpp file needs them (ours
    carries both in its header).
    """
    p = Path(os.fspath(path))
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such .rvq file")
    with open(p, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(HEADER_SIZE)
        if head[:len(MAGIC)] != MAGIC:
            if size > rvq_packed.packed_size(n_codebooks * MAX_FRAMES):
                raise RvqFormatError(f"{p}: {size} bytes is too large for omnivoice.cpp's headerless .rvq of "
                                     f"{n_codebooks} codebooks (at most {MAX_FRAMES} frames, an hour at 25 frames/s)")
            f.seek(0)
            return _read_headerless(p, f.read(), n_codebooks, codebook_size)
        if len(head) < HEADER_SIZE:
            raise RvqFormatError(f"{p}: {size} bytes is too short for a .rvq header ({HEADER_SIZE} bytes)")
        magic, version, header_size, n_cb, n_frames, sr, fr, cb_size, rms, _ = HEADER.unpack(head)
        if magic != MAGIC:
            raise RvqFormatError(f"{p}: not a .rvq file (magic {magic!r}, expected {MAGIC!r})")
        if version < 1 or version > VERSION:
            raise RvqFormatError(f"{p}: .rvq version {version} is not supported (this reader knows 1..{VERSION})")
        if header_size < HEADER_SIZE:
            raise RvqFormatError(f"{p}: header size field is {header_size}, expected at least {HEADER_SIZE}")
        if n_cb < 1 or n_frames < 1:
            raise RvqFormatError(f"{p}: shape [{n_cb}, {n_frames}] is empty (n_codebooks and n_frames must be >= 1)")
        if n_cb > MAX_CODEBOOKS or n_frames > MAX_FRAMES:
            raise RvqFormatError(f"{p}: shape [{n_cb}, {n_frames}] is too large (at most {MAX_CODEBOOKS} codebooks "
                                 f"of {MAX_FRAMES} frames, an hour at 25 frames/s)")
        if sr == 0 or not (math.isfinite(fr) and fr > 0):
            raise RvqFormatError(f"{p}: sample_rate {sr} / frame_rate {fr} must be positive")
        if cb_size < 1:
            raise RvqFormatError(f"{p}: codebook_size field is {cb_size}, must be >= 1")
        unknown_rms = head[32:36] == _RMS_UNKNOWN
        if not unknown_rms and not (math.isfinite(rms) and rms >= 0):
            raise RvqFormatError(f"{p}: ref_rms field is {rms} (bytes {head[32:36].hex()}); expected a finite RMS "
                                 f">= 0, or NaN ({_RMS_UNKNOWN.hex()}) for unknown")
        expected = header_size + 4 * n_cb * n_frames
        if size != expected:
            raise RvqFormatError(f"{p}: file has {size} bytes; its header ([{n_cb}, {n_frames}] int32 codes "
                                 f"after {header_size} header bytes) needs exactly {expected}")
        f.seek(header_size)
        blob = f.read(4 * n_cb * n_frames)
    if len(blob) != 4 * n_cb * n_frames:
        raise RvqFormatError(f"{p}: file shrank while it was read")
    codes = np.frombuffer(blob, dtype="<i4").reshape(n_cb, n_frames).astype(np.int32)
    lo, hi = int(codes.min()), int(codes.max())
    if lo < 0 or hi >= cb_size:
        raise RvqFormatError(f"{p}: codes must lie in [0, {cb_size}) (codebook_size); found min {lo}, max {hi}")
    return RvqFile(codes=codes, sample_rate=int(sr), frame_rate=float(fr), codebook_size=int(cb_size),
                   ref_rms=None if unknown_rms else float(rms))


def check_rates(rvq: RvqFile, sample_rate: int, frame_rate: float, path: PathLike) -> None:
    """Refuse codes made for other rates than a codec's (`sample_rate` Hz, `frame_rate` frames/s), naming `path`:
    one check for decoding a .rvq and for taking it as a voice prompt (which took sample rate 1 or 2^32 - 1 and
    frame rate 1e-30 or 3.4e38 that decoding refused). omnivoice.cpp's headerless files state no rates: theirs
    are the codec's by definition."""
    if rvq.fmt == FORMAT_OMNIVOICE and (rvq.sample_rate != sample_rate or abs(rvq.frame_rate - frame_rate) > 1e-6):
        raise RvqFormatError(f"{path}: codes for {rvq.sample_rate} Hz at {rvq.frame_rate:g} frames/s, but the codec "
                             f"works at {sample_rate} Hz and {frame_rate:g} frames/s")


def _read_headerless(p: Path, blob: bytes, n_codebooks: int, codebook_size: int) -> RvqFile:
    what = (f"{p}: not a .rvq file (no {MAGIC!r} magic; read as omnivoice.cpp's headerless .rvq for "
            f"{n_codebooks} codebooks of {codebook_size})")
    try:
        codes = rvq_packed.unpack_codes(blob, n_codebooks, what)
    except ValueError as e:
        raise RvqFormatError(str(e)) from None
    hi = int(codes.max())
    if hi >= codebook_size:
        raise RvqFormatError(f"{what}: codes must lie in [0, {codebook_size}) (codebook_size); found max {hi}")
    return RvqFile(codes=codes, codebook_size=int(codebook_size), fmt=FORMAT_CPP)


def load_rvq(path: PathLike, *, n_codebooks: int = 8, codebook_size: int = 1024) -> np.ndarray:
    """The int32 codes [n_codebooks, T] of a .rvq file (see read_rvq for the header fields)."""
    return read_rvq(path, n_codebooks=n_codebooks, codebook_size=codebook_size).codes

