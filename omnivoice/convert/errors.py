"""Errors raised by the converter (each message names the file, tensor or field at fault)."""


class CheckpointError(ValueError):
    """The input directory is not a usable OmniVoice checkpoint (missing file, bad config, damaged tensor)."""


class ConversionError(ValueError):
    """The checkpoint is readable but cannot be written as GGUF (bad quantization type, name too long, ...)."""


def raise_problems(problems: list[str], what: str) -> None:
    """Raise one CheckpointError listing the first ten `problems` (if any), prefixed by `what`."""
    if problems:
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise CheckpointError(f"{what}: " + "; ".join(problems[:10]) + more)
