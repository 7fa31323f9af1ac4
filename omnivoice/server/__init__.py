"""`python -m omnivoice.server`: an OpenAI-compatible speech server (FastAPI on uvicorn, extra [server]).

    app.py          configuration, background model loading, the gates (auth, body limit, request counts)
    routes.py       the endpoints: speech (whole, streamed, SSE), cloning, the voice library, models, health
    ws.py           WS /v1/audio/speech/stream: text in pieces in, audio out sentence by sentence
    textstream.py   text that arrives in pieces -> sentences -> engine requests (ws.py's and omnivoice.wyoming's)
    schema.py       the speech request and its mapping onto the engine's SynthesisRequest
    voices.py       the voices folder (VoicePrompt files) and OpenAI's built-in voice names
    encoding.py     response audio: OpenAI's formats onto omnivoice.audio.io's encoders
    metrics.py      Prometheus counters
    errors.py       OpenAI's error JSON for every failure
    engine_adapter.py   the only module that touches the model (over the batched engine, omnivoice.engine)
    ray.py          the same app on Ray Serve: model replicas behind one endpoint (extra [ray], docs/SERVING.md)
    ray_router.py   its Serve request router: each synthesis to the replica with the least queued audio
"""

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str):
    # The app needs FastAPI (the extra [server]); the voice library, the engine adapter and textstream do not,
    # and python -m omnivoice.wyoming uses them without it.
    if name in __all__:
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
