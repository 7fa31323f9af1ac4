"""Planning and finishing one request, in the order the reference works; the engine (omnivoice.engine) runs
MaskGIT on the LM between the two, for one request or many.

    plan: estimate the target length -> single shot, or chunk the text by punctuation (long form)
    -> per chunk: its voice prompt (`chunk_at`) and its LM prompt (`Pipeline.prompt`)
    ... the engine runs MaskGIT for each chunk, in order ...
    finish: decode every chunk with the codec -> cross-fade the chunks -> post-process (silence, loudness,
    fade and pad)

In auto and design modes chunk 0 is generated without a voice prompt and its tokens (with its text) become
the voice prompt of every later chunk; in cloning every chunk uses the user's voice prompt. One random
generator (`make_rng`) is threaded through all chunks, as the reference's global generator is.
This module holds no model math, no MaskGIT loop and no file formats: it calls text/, audio/ and the codec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .audio import postprocess as post
from .codec.voice import VoicePrompt
from .generate.philox import CudaPhiloxGenerator
from .settings import Settings  # noqa: F401 (pipeline.Settings: the name callers have used)
from .text.chunking import ChunkPlan, needs_chunking, plan_chunks
from .text.request import prepare_request
from .text.prompt import build_prompt

ProgressCallback = Callable[[int, int], None]
"""progress(done, total): MaskGIT steps done so far and in all, over every chunk."""
CancelCallback = Callable[[], bool]
"""cancel() -> True to stop; polled before every MaskGIT step (on CUDA's device path, before and after each run of
steps queued on the device)."""


class Cancelled(RuntimeError):
    """Synthesis was stopped by the cancel callback."""


@dataclass
class SynthesisResult:
    """Audio (float32 mono in [-1, 1]), its sample rate, and the int32 [8, T] tokens of every chunk."""

    audio: np.ndarray
    sample_rate: int
    tokens: list[np.ndarray]
    texts: list[str]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return len(self.audio) / self.sample_rate


@dataclass
class Chunk:
    """One MaskGIT call: its text, target length, and voice prompt (None, or codes with their text)."""

    text: str
    n_target: int
    ref_codes: Optional[np.ndarray]
    ref_text: Optional[str]


class Pipeline:
    """Plans and finishes requests on loaded parts: `lm` (runners.lm.LanguageModel: its config and context
    length), `codec` (codec.AudioCodec), `tokenizer`. Runs no MaskGIT: the engine does (omnivoice.engine)."""

    def __init__(self, lm, codec, tokenizer) -> None:
        self.lm, self.codec, self.tokenizer = lm, codec, tokenizer
        self.frame_rate = int(codec.frame_rate)
        self.sample_rate = int(codec.sample_rate)

    # ------------------------------------------------------------------------------------------ planning
    def plan(self, text: str, settings: Settings, voice: Optional[VoicePrompt]) -> list[ChunkPlan]:
        """The chunks of one text, as the reference's _preprocess_all and _generate_chunked decide them."""
        if not text or not text.strip():
            raise ValueError("text is empty: nothing to synthesize")
        ref_text = voice.text if voice else None
        n_ref = int(voice.codes.shape[1]) if voice else None
        if voice is not None:  # a .rvq's codes index the LM's embeddings: out of range they would read past them
            self.codec.check_codes(voice.codes, "voice prompt codes")
        if settings.duration is not None and not settings.duration > 0:
            raise ValueError(f"duration must be > 0 seconds, got {settings.duration}")
        # language and instruct are already resolved in `settings`; this settles length and speed
        req = prepare_request(text, ref_text=ref_text, num_ref_audio_tokens=n_ref, duration=settings.duration,
                              speed=settings.speed, frame_rate=self.frame_rate)
        est, speed = req.num_target_tokens, req.speed
        if settings.chunk_duration <= 0 or not needs_chunking(est, settings.chunk_threshold, self.frame_rate):
            plans = [ChunkPlan(text, est, "prompt" if voice else None, ref_text, n_ref)]
        else:
            plans = plan_chunks(text, est, settings.chunk_duration, self.frame_rate, ref_text=ref_text,
                                num_ref_audio_tokens=n_ref, speed=speed)
        for i, p in enumerate(plans):
            self.check_context(p.num_target_tokens, p.num_ref_audio_tokens or 0, 0, i if len(plans) > 1 else None)
        return plans

    def check_context(self, n_target: int, n_ref: int, n_text: int, chunk: Optional[int]) -> None:
        """Refuse a chunk whose prompt (text, voice prompt and target) would not fit the model's context: the
        graph of such a prompt grows with its square (--duration 2000 asks for 50 000 frames)."""
        limit = getattr(self.lm, "context_length", None)
        if limit is None or n_target + n_ref + n_text <= limit:
            return
        fr = self.frame_rate
        parts = [f"{n_target} target frames ({n_target / fr:.1f} s)"]
        if n_ref:
            parts.append(f"a voice prompt of {n_ref} frames ({n_ref / fr:.1f} s)")
        if n_text:
            parts.append(f"{n_text} text tokens")
        where = f"chunk {chunk}: " if chunk is not None else ""
        raise ValueError(f"{where}{' + '.join(parts)} do not fit the model's context of {limit} positions; "
                         "ask for a shorter duration or use a shorter voice prompt")

    # ------------------------------------------------------------------------------------------ prompts
    def prompt(self, chunk: Chunk, settings: Settings):
        """The chunk's step-0 prompt, as text/ builds it (text.prompt.Prompt) and as the LM runner takes it
        (runners.lm.LMInput); ValueError where it would not fit the model's context."""
        from .runners.lm import LMInput  # what the LM sees of the prompt; text/ stays free of ggml

        cfg = self.lm.cfg
        prompt = build_prompt(self.tokenizer, chunk.text, chunk.n_target, ref_text=chunk.ref_text,
                              ref_audio_tokens=chunk.ref_codes, lang=settings.language,
                              instruct=settings.instruct, denoise=settings.denoise,
                              num_codebooks=cfg.n_codebook, audio_mask_id=cfg.audio_mask_id)
        n_ref = 0 if chunk.ref_codes is None else int(chunk.ref_codes.shape[1])
        self.check_context(chunk.n_target, n_ref, prompt.cond_ids.shape[1] - chunk.n_target - n_ref, None)
        return prompt, LMInput(prompt.cond_ids, prompt.audio_mask, prompt.num_target_tokens)

    # ------------------------------------------------------------------------------------------ audio
    def decode(self, tokens: list[np.ndarray]) -> list[np.ndarray]:
        """Decode every chunk's codes to audio (before post-processing)."""
        return self.codec.decode_batch(tokens)

    def finish(self, chunks_audio: list[np.ndarray], voice: Optional[VoicePrompt], settings: Settings
               ) -> np.ndarray:
        """Cross-fade and post-process decoded chunks into the final waveform."""
        return post.postprocess_output(chunks_audio if len(chunks_audio) > 1 else chunks_audio[0],
                                       self.sample_rate, voice.rms if voice else None,
                                       postprocess=settings.postprocess_output,
                                       pad_duration=settings.pad_duration, fade_duration=settings.fade_duration)


def chunk_at(plans: list[ChunkPlan], i: int, tokens: list[np.ndarray], voice: Optional[VoicePrompt]) -> Chunk:
    """Chunk i of a plan with its voice prompt: the user's, chunk 0's tokens and text (`tokens`: the chunks done
    so far), or none."""
    plan = plans[i]
    if plan.ref == "prompt":
        return Chunk(plan.text, plan.num_target_tokens, voice.codes, voice.text)
    if plan.ref == "chunk0":
        return Chunk(plan.text, plan.num_target_tokens, tokens[0], plans[0].text)
    return Chunk(plan.text, plan.num_target_tokens, None, None)


def make_rng(seed: Optional[int]) -> CudaPhiloxGenerator:
    """The Philox generator for one synthesis; a random seed when none is given."""
    if seed is None or seed < 0:
        seed = int.from_bytes(os.urandom(8), "little") >> 1
    return CudaPhiloxGenerator(seed)
