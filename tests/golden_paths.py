"""Where the committed golden files live."""

from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden"
