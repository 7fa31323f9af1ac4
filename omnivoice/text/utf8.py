"""Text given as bytes (stdin, the --ref-text and --srt files, a voice's transcript, a manifest line): the one
UTF-8 check they all go through, so that each input says the same of the same problem, before any model loads."""

from __future__ import annotations

__all__ = ["decode_utf8"]


def decode_utf8(data: bytes, source: str, error: type = ValueError, first_line: int = 1) -> str:
    """`data` as text. Bytes that are not UTF-8 raise `error` (a ValueError) naming `source`, the line (counted
    from `first_line`) and the byte: 'notes.txt:3: not UTF-8 text (byte 41: invalid start byte); save it as
    UTF-8'. Python's surrogate escapes are never made, so no later step meets a lone surrogate."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data[:e.start].count(b"\n")
        raise error(f"{source}:{line}: not UTF-8 text (byte {e.start}: {e.reason}); save it as UTF-8") from None
