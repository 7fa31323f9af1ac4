"""OmniVoice zero-shot text-to-speech (646 languages) on ggml.

    import omnivoice
    with omnivoice.OmniVoice(model="omnivoice-base-Q8_0.gguf") as ov:
        result = ov.synthesize("Hello world.", language="English")

The heavy parts (ggml, the models) load on first use of OmniVoice, not on import.
"""

__version__ = "0.1.0"

__all__ = ["OmniVoice", "SynthesisResult", "VoicePrompt", "Cancelled", "__version__"]


def __getattr__(name: str):
    if name in ("OmniVoice", "SynthesisResult", "VoicePrompt", "Cancelled"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'omnivoice' has no attribute {name!r}")
