"""The audio codec (Higgs Audio v2 tokenizer): 24 kHz audio <-> int32 codes [8, T] at 25 frames per second.

    from omnivoice.codec import load_codec, load_rvq, save_rvq
    with load_codec("omnivoice-tokenizer-F32.gguf") as codec:
        codes = codec.encode(audio_24k)
        save_rvq("clip.rvq", codes)
        audio = codec.decode(load_rvq("clip.rvq"))

`python -m omnivoice.codec --model CODEC.gguf -i clip.wav` writes clip.rvq, and `-i clip.rvq` writes clip.wav.
The .rvq container is documented in omnivoice.codec.rvq_format, voice prompt files in omnivoice.codec.voice;
AudioCodec itself lives in omnivoice.runners.codec, and loads (and with it ggml) on first use, not on import.
"""

from .rvq_format import RvqFile, RvqFormatError, load_rvq, read_rvq, save_rvq
from .voice import VoicePrompt, transcript_path

__all__ = ["AudioCodec", "load_codec", "RvqFile", "RvqFormatError", "load_rvq", "read_rvq", "save_rvq",
           "VoicePrompt", "transcript_path"]


def __getattr__(name: str):
    if name in ("AudioCodec", "load_codec"):
        from ..runners import codec

        return getattr(codec, name)
    raise AttributeError(f"module 'omnivoice.codec' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
