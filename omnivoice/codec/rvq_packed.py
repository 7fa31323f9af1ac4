"""omnivoice.cpp's .rvq voice files: the codes with no header, bit-packed.

Layout (omnivoice.cpp's ``src/rvq-file.h``, written by its ``omnivoice-codec`` and read by ``omnivoice-tts
--ref-rvq``): the codes [K, T], row-major (codebook k's T codes, then codebook k + 1's), each stored in
CODE_BITS = 11 bits (their constant, enough for codebooks of up to 2048 entries), least significant bit first,
concatenated into one bit stream and padded with zero bits to a whole byte. Nothing else: K and the code
width come from the codec, T from the file size, so a file holds exactly ceil(K * T * 11 / 8) bytes (11 T
bytes for the 8 codebooks of OmniVoice). No loudness is stored, so a voice read from such a file is
post-processed like one without a reference clip (peak normalisation).

Told apart from our .rvq container (``rvq_format``) by the magic: ours starts with b"ORVQ"; this format has no
magic at all.
"""

from __future__ import annotations

import numpy as np

CODE_BITS = 11


def packed_size(n_codes: int, code_bits: int = CODE_BITS) -> int:
    """Bytes that `n_codes` codes take: ceil(n_codes * code_bits / 8)."""
    return -(-n_codes * code_bits // 8)


def pack_codes(codes: np.ndarray, code_bits: int = CODE_BITS) -> bytes:
    """codes [K, T] (integers in [0, 2**code_bits)) -> the packed bytes, LSB first, row-major."""
    flat = np.ascontiguousarray(codes, dtype=np.int64).reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= 1 << code_bits):
        raise ValueError(f"codes must lie in [0, {1 << code_bits}) to fit {code_bits} bits; "
                         f"got min {flat.min()}, max {flat.max()}")
    bits = ((flat[:, None] >> np.arange(code_bits)) & 1).astype(np.uint8).reshape(-1)   # bit j of code i
    return np.packbits(bits, bitorder="little").tobytes()


def unpack_codes(blob: bytes, n_codebooks: int, what: str, code_bits: int = CODE_BITS) -> np.ndarray:
    """The packed bytes of a whole file -> int32 codes [n_codebooks, T]; the size must fit exactly.

    Raises ValueError naming `what` when the size is not that of whole frames or the padding bits are set.
    """
    n_codes = len(blob) * 8 // code_bits
    T = n_codes // n_codebooks
    if T < 1 or len(blob) != packed_size(T * n_codebooks, code_bits):
        frame_bits = n_codebooks * code_bits
        raise ValueError(f"{what}: {len(blob)} bytes is not a whole number of frames of omnivoice.cpp's headerless "
                         f".rvq ({n_codebooks} codebooks x {code_bits} bits = {frame_bits} bits per frame, "
                         f"T >= 1): truncated, or not a .rvq file")
    bits = np.unpackbits(np.frombuffer(blob, np.uint8), bitorder="little")
    if bits[T * n_codebooks * code_bits:].any():
        raise ValueError(f"{what}: the padding bits after the last code are not zero: not an omnivoice.cpp .rvq "
                         f"file for {n_codebooks} codebooks")
    weights = (1 << np.arange(code_bits)).astype(np.int32)
    codes = bits[:T * n_codebooks * code_bits].reshape(-1, code_bits).astype(np.int32) @ weights
    return codes.reshape(n_codebooks, T)
