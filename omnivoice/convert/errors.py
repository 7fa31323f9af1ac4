"""Errors raised by the converter (each message names the file, tensor or field at fault)."""


class CheckpointError(ValueError):
    """The input directory is not a usable OmniVoice checkpoint (missing file, bad config, damaged tensor)."""


class ConversionError(ValueError):
    """The checkpoint is readable but cannot be written as GGUF (bad quantization type, name too long, ...)."""
