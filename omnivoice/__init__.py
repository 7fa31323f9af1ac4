"""OmniVoice zero-shot text-to-speech (646 languages) on ggml.

    import omnivoice
    with omnivoice.OmniVoice(model="omnivoice-base-Q8_0.gguf") as ov:
        result = ov.synthesize("Hello world.", language="English")

The heavy parts (ggml, the models) load on first use of OmniVoice, not on import.
"""

__version__ = "0.1.0"

_API = ("OmniVoice", "Speaker", "SynthesisResult", "VoicePrompt", "Cancelled", "OptionError", "check_options")
_RESOLVE = ("ModelNotAvailable", "DownloadError")
_ENGINE = ("SynthesisRequest", "InvalidRequests")

__all__ = [*_API, *_RESOLVE, *_ENGINE, "__version__"]


def __getattr__(name: str):
    if name in _API:
        from . import api

        return getattr(api, name)
    if name in _RESOLVE:
        from . import resolve

        return getattr(resolve, name)
    if name in _ENGINE:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'omnivoice' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
