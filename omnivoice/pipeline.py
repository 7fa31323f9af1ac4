"""Orchestration: text in, tokens and audio out, exactly in the order the reference works.

    estimate the target length -> single shot, or chunk the text by punctuation (long form)
    -> per chunk: build the prompt, run MaskGIT on the LM -> decode every chunk with the codec
    -> cross-fade the chunks -> post-process (silence, loudness, fade and pad)

In auto and design modes chunk 0 is generated without a voice prompt and its tokens (with its text) become
the voice prompt of every later chunk; in cloning every chunk uses the user's voice prompt. One random
generator is threaded through all chunks, as the reference's global generator is.
This module holds no model math and no file formats: it calls text/, generate/, audio/ and the runners.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .audio import postprocess as post
from .codec.voice import VoicePrompt
from .generate.maskgit import MaskGitState
from .generate.philox import CudaPhiloxGenerator
from .settings import Settings  # noqa: F401 (pipeline.Settings: the name callers have used)
from .text.chunking import ChunkPlan, needs_chunking, plan_chunks
from .text.request import prepare_request
from .text.prompt import build_prompt

log = logging.getLogger("omnivoice")

ProgressCallback = Callable[[int, int], None]
"""progress(done, total): MaskGIT steps done so far and in all, over every chunk."""
CancelCallback = Callable[[], bool]
"""cancel() -> True to stop; polled before every MaskGIT step."""


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
    """Runs synthesis on loaded parts: `lm` (runners.lm.LanguageModel), `codec` (codec.AudioCodec), `tokenizer`."""

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
            self._check_context(p.num_target_tokens, p.num_ref_audio_tokens or 0, 0, i if len(plans) > 1 else None)
        return plans

    def _check_context(self, n_target: int, n_ref: int, n_text: int, chunk: Optional[int]) -> None:
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

    # ------------------------------------------------------------------------------------------ generation
    def _prompt(self, chunk: Chunk, settings: Settings):
        """The chunk's step-0 prompt, as text/ builds it and as the LM runner takes it."""
        from .runners.lm import LMInput  # what the LM sees of the prompt; text/ stays free of ggml

        cfg = self.lm.cfg
        prompt = build_prompt(self.tokenizer, chunk.text, chunk.n_target, ref_text=chunk.ref_text,
                              ref_audio_tokens=chunk.ref_codes, lang=settings.language,
                              instruct=settings.instruct, denoise=settings.denoise,
                              num_codebooks=cfg.n_codebook, audio_mask_id=cfg.audio_mask_id)
        n_ref = 0 if chunk.ref_codes is None else int(chunk.ref_codes.shape[1])
        self._check_context(chunk.n_target, n_ref, prompt.cond_ids.shape[1] - chunk.n_target - n_ref, None)
        return prompt, LMInput(prompt.cond_ids, prompt.audio_mask, prompt.num_target_tokens)

    def generate_chunk(self, chunk: Chunk, settings: Settings, rng: Optional[CudaPhiloxGenerator],
                       on_step: Optional[Callable[[int], None]] = None,
                       dump: Optional[Path] = None, index: int = 0) -> np.ndarray:
        """MaskGIT for one chunk -> int32 [8, T]."""
        cfg = self.lm.cfg
        prompt, lm_prompt = self._prompt(chunk, settings)
        greedy = settings.sampler.class_temperature == 0
        want_logits = dump is not None and index == 0
        with self.lm.session([lm_prompt], settings.sampler.guidance_scale, greedy, with_logits=want_logits,
                             device_steps=True) as s:
            guided = _GuidedChunk(s, cfg.audio_mask_id)
            if want_logits:
                np.save(dump / "prompt_ids.npy", prompt.cond_ids.astype(np.int32))
                first = s.step([prompt.uncond_ids])[0]
                np.save(dump / "logits0.npy", first["cond_logits"].astype(np.float32))
            # On CUDA a lone greedy chunk runs every step on the device, queued back to back (no host work between
            # steps); the progress callbacks then come once its tokens are back.
            state = MaskGitState(chunk.n_target, settings.sampler, rng, cfg.n_codebook, cfg.audio_mask_id)
            steps = s.run_on_device(state)
            if steps is None:  # on the host, step by step (generate's loop)
                step_cb = (lambda step, *_: on_step(step)) if on_step else None
                while not state.done:
                    state.advance(guided, step_cb)
            else:
                for step in steps if on_step else ():
                    on_step(step)
            tokens = state.tokens
        if dump is not None:
            np.save(dump / f"tokens_{index}.npy", tokens.astype(np.int32))
        return tokens

    def llm_test(self, text: str, settings: Settings, voice: Optional[VoicePrompt],
                 dump: Optional[Path] = None) -> np.ndarray:
        """One full LM forward of the first chunk's step-0 prompt: the conditional row's raw audio logits over
        the target window, float32 [8, T, V]; with `dump`, also written there (llm_logits.npy, prompt_ids.npy)."""
        plans = self.plan(text, settings, voice)
        prompt, lm_prompt = self._prompt(_chunk(plans, 0, [], voice), settings)
        with self.lm.session([lm_prompt], settings.sampler.guidance_scale, greedy=True, with_logits=True) as s:
            logits = s.step([prompt.uncond_ids])[0]["cond_logits"].astype(np.float32)
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
            np.save(dump / "prompt_ids.npy", prompt.cond_ids.astype(np.int32))
            np.save(dump / "llm_logits.npy", logits)
        return logits

    def generate_tokens(self, text: str, settings: Settings, voice: Optional[VoicePrompt],
                        progress: Optional[ProgressCallback] = None, cancel: Optional[CancelCallback] = None,
                        dump: Optional[Path] = None, rng: Optional[CudaPhiloxGenerator] = None,
                        ) -> tuple[list[np.ndarray], list[str]]:
        """Every chunk's tokens for one text (and the chunk texts)."""
        plans = self.plan(text, settings, voice)
        if rng is None:
            rng = make_rng(settings.seed)
        total = len(plans) * settings.sampler.num_step
        done = [0]

        def on_step(_step: int) -> None:
            if cancel is not None and cancel():
                raise Cancelled("synthesis cancelled")
            done[0] += 1
            if progress is not None:
                progress(done[0], total)

        if cancel is not None and cancel():
            raise Cancelled("synthesis cancelled")
        if dump is not None:
            dump.mkdir(parents=True, exist_ok=True)
        tokens: list[np.ndarray] = []
        for i, plan in enumerate(plans):
            log.debug("chunk %d/%d: %d frames, %r", i + 1, len(plans), plan.num_target_tokens, plan.text[:60])
            tokens.append(self.generate_chunk(_chunk(plans, i, tokens, voice), settings, rng, on_step, dump, i))
            # steps a short chunk skips (nothing to unmask) still count toward the total
            if done[0] != (i + 1) * settings.sampler.num_step:
                done[0] = (i + 1) * settings.sampler.num_step
                if progress is not None:
                    progress(done[0], total)
        return tokens, [p.text for p in plans]

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

    def synthesize(self, text: str, settings: Settings, voice: Optional[VoicePrompt] = None,
                   progress: Optional[ProgressCallback] = None, cancel: Optional[CancelCallback] = None,
                   dump: Optional[Path] = None) -> SynthesisResult:
        """Text -> final audio, single shot or long form."""
        t0 = time.perf_counter()
        tokens, texts = self.generate_tokens(text, settings, voice, progress, cancel, dump)
        t1 = time.perf_counter()
        audio = self.decode(tokens)
        t2 = time.perf_counter()
        final = self.finish(audio, voice, settings)
        t3 = time.perf_counter()
        return SynthesisResult(final.astype(np.float32, copy=False), self.sample_rate, tokens, texts,
                               {"generate": t1 - t0, "decode": t2 - t1, "postprocess": t3 - t2})


class SentenceStream:
    """Synthesizes one sentence at a time with a steady voice: without a voice prompt, the first sentence's
    tokens and text become the voice of the rest, as chunk 0 does in long form. One generator is threaded
    through all sentences."""

    def __init__(self, pipeline: Pipeline, settings: Settings, voice: Optional[VoicePrompt] = None,
                 cancel: Optional[CancelCallback] = None) -> None:
        self.pipeline, self.voice, self.cancel = pipeline, voice, cancel
        self.settings = replace(settings, chunk_duration=0.0)
        self.post_settings = settings
        self.rng = make_rng(settings.seed)

    def check(self, sentence: str, duration: Optional[float] = None) -> None:
        """Raise ValueError now if `say(sentence, duration)` would be refused (e.g. a duration past the model's
        context), so a caller can check a whole script before synthesizing any of it."""
        settings = replace(self.settings, duration=duration) if duration is not None else self.settings
        self.pipeline.plan(sentence, settings, self.voice)

    def say(self, sentence: str, duration: Optional[float] = None, progress: Optional[ProgressCallback] = None
            ) -> tuple[np.ndarray, np.ndarray]:
        """Audio (post-processed) and tokens of one sentence, optionally of a fixed duration in seconds."""
        settings = replace(self.settings, duration=duration) if duration is not None else self.settings
        tokens, _ = self.pipeline.generate_tokens(sentence, settings, self.voice, progress, self.cancel,
                                                  rng=self.rng)
        audio = self.pipeline.finish(self.pipeline.decode(tokens), self.voice, self.post_settings)
        if self.voice is None:
            self.voice = VoicePrompt(tokens[0], sentence, None)
        return audio.astype(np.float32, copy=False), tokens[0]


def _chunk(plans: list[ChunkPlan], i: int, tokens: list[np.ndarray], voice: Optional[VoicePrompt]) -> Chunk:
    """Chunk i of a plan with its voice prompt: the user's, chunk 0's tokens and text, or none."""
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


class _GuidedChunk:
    """Adapts a one-prompt runner session to the MaskGIT loop's GuidedLM protocol."""

    def __init__(self, session, mask_id: int) -> None:
        self.session, self.mask_id = session, mask_id

    def guided_argmax(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.launch_guided_argmax(tokens)()

    def launch_guided_argmax(self, tokens: np.ndarray) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        self.session.launch([tokens])
        return self._argmax

    def _argmax(self) -> tuple[np.ndarray, np.ndarray]:
        r = self.session.finish()[0]
        if "pred" in r:
            return r["pred"], r["score"]
        lp = r["log_probs"]
        lp[..., self.mask_id] = -np.inf
        return lp.argmax(-1).astype(np.int32), lp.max(-1)

    def guided_log_probs(self, tokens: np.ndarray) -> np.ndarray:
        return self.session.step([tokens])[0]["log_probs"]
