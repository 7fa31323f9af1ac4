"""The engine: the one place that runs MaskGIT over the LM, for one request or many, one packed LM graph per step
(a few greedy requests' steps on the device's MaskGIT on CUDA).

    results = ov.synthesize_batch([{"text": "Hello."}, SynthesisRequest("Bonjour.", language="fr")])
    engine = ov.engine(max_batch="auto", max_wait_ms=20, max_queue=256)   # continuous batching, a thread
    job = engine.submit({"text": "Hi there."}, stream=True)

request   SynthesisRequest (the fields of synthesize), validation without the model, InvalidRequests
core      BatchEngine and Task: admission, one LM step for every active chunk (or a run of steps on the device),
          batched decode
solo      one request on the caller's thread (synthesize, stream, Speaker, dub, generate_tokens): a batch of one
memory    batch size "auto": requests per step and packed positions from measured buffer sizes and free memory
voices    clone references encoded together and cached by content
offline   synthesize_batch and run_batch (results as they finish)
service   Engine, Job, EngineFull: the background thread for servers
"""

from .core import BatchEngine, Task
from .memory import Limits
from .offline import BatchFailed, prepare, run_batch, synthesize_batch
from .request import InvalidRequests, SynthesisRequest, as_request
from .service import Engine, EngineFull, Job, stream_sentences

__all__ = ["BatchEngine", "Task", "Limits", "BatchFailed", "prepare", "run_batch", "synthesize_batch",
           "InvalidRequests", "SynthesisRequest", "as_request", "Engine", "EngineFull", "Job", "stream_sentences"]
