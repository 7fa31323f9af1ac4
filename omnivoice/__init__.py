"""OmniVoice zero-shot text-to-speech on ggml.

    import omnivoice
    with omnivoice.OmniVoice(model="omnivoice-base-Q8_0.gguf", codec="omnivoice-tokenizer-F32.gguf") as ov:
        result = ov.synthesize("Hello world.")
"""

__version__ = "0.1.0"
