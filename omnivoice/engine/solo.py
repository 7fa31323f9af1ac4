"""One request on the caller's thread: a batch of one, on a BatchEngine of its own, stepped here to its end.

`OmniVoice.synthesize`, `generate_tokens`, `stream`, `Speaker` and `dub` come here, so every synthesis runs the
one MaskGIT orchestration there is (engine.core); their tokens are those of the same request in any batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..codec.voice import VoicePrompt
from ..pipeline import SynthesisResult, chunk_at
from ..settings import Settings
from .core import BatchEngine, Task, step0_logits

__all__ = ["run_alone", "llm_logits"]


def run_alone(ov, task: Task) -> SynthesisResult:
    """Run `task` to its end on this thread and return its result, or raise its error (Cancelled when its cancel
    callback stopped it). The caller holds `ov`'s lock when the call must not interleave with other threads'."""
    engine = BatchEngine(ov, max_batch=1)
    try:
        engine.add(task)
        while engine.busy:
            engine.step()
    finally:
        engine.close()  # after a Ctrl-C mid-step: waits for a run in flight, frees the graph
    if task.error is not None:
        raise task.error
    return task.result


def llm_logits(ov, text: str, settings: Settings, voice: Optional[VoicePrompt],
               dump: Optional[Path] = None) -> np.ndarray:
    """One full LM forward of the first chunk's step-0 prompt: the conditional row's raw audio logits over the
    target window, float32 [C, T, V]; with `dump`, also written there (llm_logits.npy, prompt_ids.npy)."""
    pipeline = ov.pipeline
    plans = pipeline.plan(text, settings, voice)
    prompt, lm_prompt = pipeline.prompt(chunk_at(plans, 0, [], voice), settings)
    logits = step0_logits(ov.lm, prompt, lm_prompt, settings.sampler.guidance_scale)
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        np.save(dump / "prompt_ids.npy", prompt.cond_ids.astype(np.int32))
        np.save(dump / "llm_logits.npy", logits)
    return logits
