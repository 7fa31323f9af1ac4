"""`python -m omnivoice.wyoming`: OmniVoice as a Wyoming text-to-speech service (Home Assistant), extra [wyoming].

    __main__.py     the command line: the model, the voice library, the engine, the listening URI
    handler.py      one client connection: describe -> info, synthesize and its streaming form -> audio

Every connection's sentences go into one batched engine (omnivoice.engine, through the speech server's
engine_adapter), and text is cut and spoken as on the speech server's WebSocket (omnivoice.server.textstream).
"""
