"""The public face: `OmniVoice` loads the model and codec once, then synthesizes.

    import omnivoice
    with omnivoice.OmniVoice() as ov:                      # OMNIVOICE_MODEL, else k2-fsa/OmniVoice
        result = ov.synthesize("Hello world.", language="English")
        soundfile.write("hello.wav", result.audio, result.sample_rate)

Which files a model argument names is omnivoice.resolve's business; the work itself is the engine's
(omnivoice.engine: one request runs as a batch of one on the caller's thread), on omnivoice.pipeline's plans.
Options (omnivoice.options) are checked by `check_options` before anything is loaded, and the command line does
just that.
"""

from __future__ import annotations

import logging
import numbers
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from .codec.voice import VoicePrompt
from .gguf import keys as K
from .options import DEFAULTS, MAX_DURATION, OptionError  # noqa: F401 (api's names for them)
from .pipeline import CancelCallback, Cancelled, Pipeline, ProgressCallback, SynthesisResult
from .settings import Settings, check_options, make_settings

log = logging.getLogger("omnivoice")

AudioInput = Union[str, os.PathLike, tuple]  # a path, or (samples, sample_rate)

__all__ = ["OmniVoice", "Speaker", "SynthesisResult", "VoicePrompt", "Cancelled", "OptionError", "OPTIONS",
           "check_options", "make_settings"]

OPTIONS = DEFAULTS
"""Every synthesis option and its default (the reference's); omnivoice.options has their bounds and help."""


class OmniVoice:
    """OmniVoice text-to-speech on ggml: load once, synthesize many times. Frees its memory on close().

    One object may be shared by threads: its calls are serialised by a lock, one synthesis (or voice encoding)
    at a time, since the models' graphs and buffers are reused from call to call. stream() and Speaker take
    the lock per sentence, so several streams interleave sentence by sentence. For parallel work, use one
    object per device (each holds its own copy of the weights).
    """

    def __init__(self, model: Optional[str] = None, codec: Optional[str] = None, backend: str = "auto",
                 n_threads: Optional[int] = None, quant: str = "auto", flash_attn: Optional[bool] = None,
                 clamp_fp16: bool = False, exact_f32: Optional[bool] = None,
                 cpu_products: Optional[str] = None, device_maskgit: Optional[bool] = None) -> None:
        """Load the LM, the codec and the tokenizer onto `backend` (auto, cpu, cuda, vulkan, metal[:N]).

        `model`: an LM GGUF, a folder of converted GGUFs, a checkpoint directory or a Hugging Face repo id (see
        omnivoice.resolve). `quant` is the LM weight type to convert a checkpoint to or to pick from a folder or a
        repo of GGUFs (f32, f16, bf16, q8_0, q4_k_m, ...; `auto`: by backend, see resolve.default_quant).
        `n_threads`: CPU threads (default: the cores free for this process, see ggml.threads). `exact_f32`:
        float32 arithmetic where a GPU backend would round (Vulkan's float32 shaders, F32 K/V in attention);
        default: on when the LM's matrices are F32 (an F32 file, however `model` names it, or `quant` "f32":
        F32 weights ask for F32 results), else OMNIVOICE_EXACT_F32=1.
        Vulkan takes it once per process (see ggml.Runtime). `cpu_products`: the LM's matrix products on the CPU,
        "ggml", "i16" (the package's int16 kernel for x86 with AVX2: F16's rounding, faster than ggml's F16,
        Q8_0 and Q4_K_M products there), "i8" (its int8 kernel, AVX2: 8-bit activations and 7-bit weights, the
        precision class of ggml's Q8_0 products, faster than i16), "amx" (its BF16 kernel on Intel's AMX tiles:
        BF16's rounding, faster than ggml's AMX Q8_0 products) or "fma"
        (its float32 kernel); default OMNIVOICE_CPU_PRODUCTS, else "auto": fma for F32 weights (on AVX-512 CPUs
        up to 4 threads), and for the other types amx on CPUs with AMX-BF16, else i8 on AVX2 CPUs but for BF16
        weights where ggml has AVX-512 BF16 dot products (runners.lm.products_kernel). The codec's convolutions on
        the CPU run on the fma kernel unless it is "ggml" (runners.codec.fma_convs). `device_maskgit`: MaskGIT's
        choices made on the device where the build has the kernel (CUDA; default OMNIVOICE_DEVICE_MASKGIT, else on).
        The environment's settings are omnivoice.config's (docs/CONFIG.md); an argument given here wins.
        """
        from .codec import load_codec
        from .ggml import Runtime, types
        from .ggml.backend import find_device
        from .loaders.lm import matrix_type
        from .resolve import REPO_QUANT_ORDER, default_quant, resolve_model
        from .runners.lm import LanguageModel
        from .text import Tokenizer

        if n_threads is not None and (not isinstance(n_threads, numbers.Integral) or isinstance(n_threads, bool)
                                      or n_threads < 1):
            raise ValueError(f"n_threads must be an integer >= 1 or None, got {n_threads!r}")
        if quant not in ("auto",) + REPO_QUANT_ORDER:
            raise ValueError(f"quant must be auto or one of {', '.join(REPO_QUANT_ORDER)}, got {quant!r}")
        self._lock = threading.RLock()
        self.pipeline: Optional[Pipeline] = None
        # the device first (a bad backend is reported before any conversion), then the files for it, then the
        # runtime: an F32 LM file asks for F32 arithmetic however it was named (file, folder, checkpoint)
        device, _ = find_device(backend)
        lm_path, codec_path = resolve_model(model, codec, quant, prefer=default_quant(device.backend))
        if exact_f32 is None and (quant == "f32" or matrix_type(lm_path) == types.F32):
            exact_f32 = True
        self.runtime = Runtime(backend, n_threads, exact_f32=exact_f32)
        try:
            self.lm = LanguageModel(self.runtime, lm_path, flash_attn=flash_attn, clamp_fp16=clamp_fp16,
                                    cpu_products=cpu_products, device_maskgit=device_maskgit)
            self.codec = load_codec(codec_path, runtime=self.runtime, cpu_products=cpu_products)
            _check_pair(self.lm.metadata, self.codec.metadata, lm_path, codec_path)
            self.tokenizer = Tokenizer.from_gguf(str(lm_path))
        except BaseException:
            self.close()
            raise
        self.pipeline = Pipeline(self.lm, self.codec, self.tokenizer)
        self.sample_rate = self.pipeline.sample_rate
        self.model_path, self.codec_path = lm_path, codec_path

    def _ready(self) -> Pipeline:
        if self.pipeline is None:
            raise RuntimeError("this OmniVoice is closed")
        return self.pipeline

    # ------------------------------------------------------------------------------------------ voices
    def create_voice(self, ref_audio: AudioInput, ref_text: str, preprocess_prompt: bool = True) -> VoicePrompt:
        """Encode a reference clip (path or (samples, rate)) and its transcript into a reusable voice prompt."""
        voice = self.create_voices([(ref_audio, ref_text, preprocess_prompt)])[0]
        if isinstance(voice, BaseException):
            raise voice
        return voice

    def create_voices(self, items: Sequence[tuple]) -> list[Union[VoicePrompt, Exception]]:
        """Voice prompts for several (ref_audio, ref_text, preprocess_prompt) items, their clips encoded together
        (AudioCodec.encode_batch: the codes create_voice gives for each). A bad item gets its exception in its
        place; the others are encoded."""
        clips: list = []
        for ref_audio, ref_text, preprocess_prompt in items:
            try:
                clips.append(self._reference_clip(ref_audio, ref_text, preprocess_prompt))
            except (ValueError, TypeError, OSError) as e:
                clips.append(e)
        good = [c for c in clips if not isinstance(c, Exception)]
        with self._lock:
            codec = self._ready().codec
            try:
                codes = codec.encode_batch([clip for clip, _, _ in good])
            except (ValueError, TypeError):  # one clip the encoder refuses: each alone, so that only it fails
                codes = []
                for clip, _, _ in good:
                    try:
                        codes.append(codec.encode(clip))
                    except (ValueError, TypeError) as e:
                        codes.append(e)
        it = iter(codes)
        out: list[Union[VoicePrompt, Exception]] = []
        for c in clips:
            code = c if isinstance(c, Exception) else next(it)
            out.append(code if isinstance(code, Exception) else VoicePrompt(code, c[1], c[2]))
        return out

    def _reference_clip(self, ref_audio: AudioInput, ref_text: str, preprocess_prompt: bool):
        """(clip ready for the encoder, the transcript as the prompt uses it, loudness) of one reference."""
        from .audio.io import load_audio
        from .audio.postprocess import MAX_REFERENCE_SECONDS, preprocess_reference
        from .text.chunking import add_punctuation

        if ref_text is None or not str(ref_text).strip():
            raise ValueError("ref_text (the transcript of the reference audio) is required for voice cloning")
        if isinstance(ref_audio, (str, os.PathLike)):
            samples, rate = load_audio(ref_audio, max_seconds=MAX_REFERENCE_SECONDS)
        else:
            try:
                samples, rate = ref_audio
            except (TypeError, ValueError):
                raise TypeError("ref_audio must be a path or a (samples, sample_rate) tuple") from None
            samples = np.asarray(samples, dtype=np.float32)
        source = os.fspath(ref_audio) if isinstance(ref_audio, (str, os.PathLike)) else "ref_audio"
        try:
            clip, rms = preprocess_reference(samples, int(rate), preprocess=preprocess_prompt,
                                             target_rate=self.sample_rate, hop_length=self._ready().codec.hop_length)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
        text = add_punctuation(ref_text) if preprocess_prompt else ref_text
        return clip, text, rms

    def _voice(self, voice: Optional[VoicePrompt], ref_audio: Optional[AudioInput], ref_text: Optional[str],
               preprocess_prompt: bool) -> Optional[VoicePrompt]:
        if voice is not None:
            if ref_audio is not None:
                raise ValueError("give either voice or ref_audio, not both")
            if not isinstance(voice, VoicePrompt):
                raise TypeError(f"voice must be a VoicePrompt, got {type(voice).__name__}")
            return voice
        if ref_audio is not None:
            return self.create_voice(ref_audio, ref_text, preprocess_prompt)
        if ref_text is not None:
            raise ValueError("ref_text was given without ref_audio: cloning needs the reference audio too")
        return None

    # ------------------------------------------------------------------------------------------ synthesis
    def settings(self, language: Optional[str] = None, instruct: Optional[str] = None, text: str = "",
                 **options) -> Settings:
        """Checked options as pipeline Settings (see make_settings)."""
        return make_settings(text, language, instruct, **options)

    def synthesize(self, text: str, *, language: Optional[str] = None, instruct: Optional[str] = None,
                   ref_audio: Optional[AudioInput] = None, ref_text: Optional[str] = None,
                   voice: Optional[VoicePrompt] = None, preprocess_prompt: bool = True,
                   progress: Optional[ProgressCallback] = None, cancel: Optional[CancelCallback] = None,
                   dump: Optional[Union[str, os.PathLike]] = None, **options) -> SynthesisResult:
        """Synthesize `text` to speech.

        Voice: `voice` (from create_voice / VoicePrompt files), or `ref_audio` + `ref_text` (cloning), or
        `instruct` (design: e.g. "female, low pitch, british accent"), or nothing (auto).
        Options (OPTIONS has the defaults): duration (seconds of generated speech, before padding),
        speed, num_step, guidance_scale, t_shift, layer_penalty_factor, position_temperature,
        class_temperature, seed (None or negative: random), denoise, postprocess_output (False keeps long
        silences, as in the reference), pad_duration and fade_duration (the silence added at each end and the
        fades, 0.1 s each; 0 for none), chunk_duration (<= 0: no chunking), chunk_threshold.
        `progress(done, total)` is called after each MaskGIT step (on CUDA, where a chunk's steps run queued
        on the device, once for each of them when the chunk's tokens are back); `cancel()` returning True stops
        with Cancelled (checked at those calls). `dump` names a folder for prompt_ids.npy, logits0.npy and
        tokens_N.npy.
        Returns audio (float32 mono), sample_rate and per-chunk tokens.
        """
        settings = make_settings(text, language, instruct, **options)
        with self._lock:
            voice = self._voice(voice, ref_audio, ref_text, preprocess_prompt)
            return self._alone(text, settings, voice, progress=progress, cancel=cancel,
                               dump=Path(dump) if dump else None)

    def _alone(self, text: str, settings: Settings, voice: Optional[VoicePrompt], **task):
        """One request run to its end on this thread by the engine (a batch of one: engine.solo); `task`: Task's
        keyword arguments. The caller holds the lock."""
        from .engine.core import Task
        from .engine.request import SynthesisRequest
        from .engine.solo import run_alone

        self._ready()
        return run_alone(self, Task(SynthesisRequest(text, voice=voice), settings, **task))

    def generate_tokens(self, text: str, *, language: Optional[str] = None, instruct: Optional[str] = None,
                        voice: Optional[VoicePrompt] = None, progress: Optional[ProgressCallback] = None,
                        cancel: Optional[CancelCallback] = None, dump: Optional[Union[str, os.PathLike]] = None,
                        **options) -> list[np.ndarray]:
        """MaskGIT only, no audio: the int32 [8, T] tokens of every chunk (a debugging and timing aid).
        Arguments as for synthesize."""
        settings = make_settings(text, language, instruct, **options)
        with self._lock:
            return self._alone(text, settings, self._voice(voice, None, None, True), progress=progress,
                               cancel=cancel, dump=Path(dump) if dump else None, decode=False).tokens

    def llm_logits(self, text: str, *, language: Optional[str] = None, instruct: Optional[str] = None,
                   voice: Optional[VoicePrompt] = None, dump: Optional[Union[str, os.PathLike]] = None,
                   **options) -> np.ndarray:
        """One full LM forward of the first chunk's step-0 prompt: the conditional row's raw audio logits over
        the target window, float32 [8, T, V] (a check against other implementations). With `dump`, also
        writes prompt_ids.npy and llm_logits.npy there."""
        from .engine.solo import llm_logits

        settings = make_settings(text, language, instruct, **options)
        with self._lock:
            self._ready()
            return llm_logits(self, text, settings, self._voice(voice, None, None, True), Path(dump) if dump else None)

    def speaker(self, *, language: Optional[str] = None, instruct: Optional[str] = None,
                ref_audio: Optional[AudioInput] = None, ref_text: Optional[str] = None,
                voice: Optional[VoicePrompt] = None, preprocess_prompt: bool = True,
                cancel: Optional[CancelCallback] = None, **options) -> "Speaker":
        """A Speaker: one voice kept across many calls, one sentence (or short text) at a time."""
        make_settings("", language, instruct, **options)  # bad options fail here, not at the first sentence
        with self._lock:
            voice = self._voice(voice, ref_audio, ref_text, preprocess_prompt)
        return Speaker(self, voice, language, instruct, cancel, options)

    def stream(self, text: Union[str, Iterable[str]], *, language: Optional[str] = None,
               instruct: Optional[str] = None, ref_audio: Optional[AudioInput] = None,
               ref_text: Optional[str] = None, voice: Optional[VoicePrompt] = None, preprocess_prompt: bool = True,
               cancel: Optional[CancelCallback] = None, **options) -> Iterator[np.ndarray]:
        """Yield audio (float32 mono at sample_rate) sentence by sentence, each post-processed.

        `text` is a string, or an iterable of pieces as they arrive (lines of a pipe, a chat model's output):
        each sentence is synthesized as soon as the text after it shows it is complete. Both are cut by the
        streaming rule of every streamed path (text.streaming: a long first sentence is split at a clause, so the
        first audio comes early). Without a voice, the first piece's voice is kept for the rest. Same options as synthesize; ValueError if no text comes.
        """
        from .text.streaming import stream_arriving_sentences, stream_sentences

        speaker = self.speaker(language=language, instruct=instruct, ref_audio=ref_audio, ref_text=ref_text,
                               voice=voice, preprocess_prompt=preprocess_prompt, cancel=cancel, **options)
        spoken = 0
        for sentence in stream_sentences(text) if isinstance(text, str) else stream_arriving_sentences(text):
            yield speaker.say(sentence)
            spoken += 1
        if not spoken:
            raise ValueError("text is empty: nothing to synthesize")

    def dub(self, subtitles: Union[str, os.PathLike, Sequence], *, language: Optional[str] = None,
            instruct: Optional[str] = None, ref_audio: Optional[AudioInput] = None, ref_text: Optional[str] = None,
            voice: Optional[VoicePrompt] = None, preprocess_prompt: bool = True,
            progress: Optional[ProgressCallback] = None, cancel: Optional[CancelCallback] = None,
            **options) -> SynthesisResult:
        """Speak subtitles on their timeline: `subtitles` is an SRT file or a list of audio.srt.Cue. Each cue is
        synthesized to fill its slot (duration = the cue's length) in one voice and placed at its start time;
        a cue without text stays silent. Same options as synthesize except duration."""
        from .audio.srt import load_srt, place_cues

        if "duration" in options:
            raise TypeError("dub() takes each cue's duration from its times, not a duration option")
        cues = load_srt(subtitles) if isinstance(subtitles, (str, os.PathLike)) else list(subtitles)
        speaker = self.speaker(language=language, instruct=instruct, ref_audio=ref_audio, ref_text=ref_text,
                               voice=voice, preprocess_prompt=preprocess_prompt, cancel=cancel, **options)
        speaker._wording_text = " ".join(c.text for c in cues)  # Chinese or English instruct: from all cues
        spoken = [c for c in cues if c.text.strip()]
        self._check_timeline(cues)
        for cue in spoken:  # every cue must fit the model before the first one is synthesized
            try:
                speaker._check(cue.text, max(cue.end - cue.start, 0.04))
            except ValueError as e:
                raise ValueError(f"cue {cue.index} ({cue.end - cue.start:.3f} s): {e}") from None
        steps = int(options.get("num_step", OPTIONS["num_step"]))
        clips, tokens = [], []
        for cue in cues:
            if not cue.text.strip():
                clips.append(np.zeros(0, np.float32))
                continue
            base = len(tokens) * steps
            on_step = (lambda d, t, base=base: progress(base + d, len(spoken) * steps)) if progress else None
            audio, toks = speaker._say(cue.text, max(cue.end - cue.start, 0.04), on_step)
            clips.append(audio)
            tokens.append(toks)
        return SynthesisResult(place_cues(cues, clips, self.sample_rate), self.sample_rate, tokens,
                               [c.text for c in spoken])

    def _check_timeline(self, cues: Sequence) -> None:
        """The dubbed timeline (float32, up to the last cue's end) must fit in memory: said before any cue is
        synthesized, not after hours of work."""
        from .audio.srt import timeline_samples
        from .ggml.memory import describe, host_available

        n_bytes = 4 * timeline_samples(cues, self.sample_rate)
        free = host_available()
        if free is not None and n_bytes > free:
            raise MemoryError(f"the timeline up to {max(c.end for c in cues) / 3600:.1f} h needs "
                              f"{describe(n_bytes)}; {describe(free)} is available")

    def synthesize_batch(self, requests: Sequence, batch_size: Union[int, str] = "auto",
                         progress: Optional[ProgressCallback] = None) -> list[SynthesisResult]:
        """Synthesize many requests at once: one SynthesisResult per request, in order, each with the tokens
        its own synthesize() call would give.

        A request is a dict or an omnivoice.SynthesisRequest with synthesize's fields (text, language,
        instruct, ref_audio, ref_text, voice, duration, speed, num_step, ...). Every request is checked before
        any work starts; InvalidRequests lists each invalid one. Requests run side by side in one LM graph
        per MaskGIT step, `batch_size` at a time ("auto": by device and free memory); the calls of other
        threads run between steps. `progress(done, total)` counts finished requests.
        """
        from .engine import synthesize_batch

        return synthesize_batch(self, requests, batch_size, progress)

    def engine(self, max_batch: Union[int, str] = "auto", max_wait_ms: float = 20.0, max_queue: int = 256,
               first_audio_ms: float = 300.0, max_step_positions: Optional[int] = None):
        """A background engine for servers (continuous batching): engine.submit(request, stream=False) -> Job.
        Close it (or use it as a context manager) before closing this object. See omnivoice.engine.service
        (the schedule's knobs: a new stream's first-audio deadline, the packed positions a step may hold)."""
        from .engine import Engine

        return Engine(self, max_batch=max_batch, max_wait_ms=max_wait_ms, max_queue=max_queue,
                      first_audio_ms=first_audio_ms, max_step_positions=max_step_positions)

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Free the models' backend memory (waits for a call in progress)."""
        with self.__dict__.get("_lock") or threading.RLock():
            self.pipeline = None
            for part in ("lm", "codec"):
                obj = self.__dict__.pop(part, None)
                if obj is not None:
                    obj.close()
            rt = self.__dict__.pop("runtime", None)
            if rt is not None:
                rt.close()

    def __enter__(self) -> "OmniVoice":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Speaker:
    """One voice across many calls, made by OmniVoice.speaker(): say(text) synthesizes one sentence (or a short
    text) and returns its post-processed audio. Without a voice prompt, the first sentence's tokens and text
    become the voice of the rest, as chunk 0 does in long form; one random generator runs through all calls.

    Each say() holds the OmniVoice's lock; calls on one Speaker must not overlap (each continues the last),
    while Speakers of one OmniVoice may be used from different threads.
    """

    def __init__(self, ov: OmniVoice, voice: Optional[VoicePrompt], language: Optional[str],
                 instruct: Optional[str], cancel: Optional[CancelCallback], options: dict) -> None:
        self._ov, self._voice, self._cancel = ov, voice, cancel
        self._language, self._instruct, self._options = language, instruct, options
        self._settings: Optional[Settings] = None  # made from the first text (it decides the instruct wording)
        self._rng = None  # one generator through all calls, made with the settings
        self._wording_text: Optional[str] = None  # the text that decides Chinese or English instruct wording

    @property
    def voice(self) -> Optional[VoicePrompt]:
        """The voice in use: the given one, or the first sentence's once it is spoken."""
        return self._voice

    def say(self, text: str, duration: Optional[float] = None,
            progress: Optional[ProgressCallback] = None) -> np.ndarray:
        """Audio of `text` in this voice, float32 mono; `duration` fixes its length in seconds."""
        return self._say(text, duration, progress)[0]

    def _say(self, text: str, duration: Optional[float], progress: Optional[ProgressCallback]
             ) -> tuple[np.ndarray, np.ndarray]:
        """(post-processed audio, tokens) of one sentence: a one-sentence stream task on the engine, in this
        speaker's voice and generator; without a voice yet, the sentence's tokens and text voice the rest."""
        if duration is not None:
            make_settings(duration=duration)
        with self._ov._lock:
            settings = self._settings_for(text, duration)
            result = self._ov._alone(text, settings, self._voice, sentences=[text], rng=self._rng,
                                     progress=progress, cancel=self._cancel)
            tokens = result.tokens[0]
            if self._voice is None:
                self._voice = VoicePrompt(tokens, text, None)
            return result.audio, tokens

    def _check(self, text: str, duration: Optional[float]) -> None:
        """Raise ValueError now if saying `text` for `duration` seconds would be refused (past the model's context)."""
        with self._ov._lock:
            settings = replace(self._settings_for(text, duration), chunk_duration=0.0)
            self._ov._ready().plan(text, settings, self._voice)

    def _settings_for(self, text: str, duration: Optional[float]) -> Settings:  # the caller holds the lock
        if self._settings is None:  # the first text decides the instruct wording (Chinese or English)
            from .pipeline import make_rng

            self._settings = make_settings(self._wording_text or text, self._language, self._instruct,
                                           **self._options)
            self._rng = make_rng(self._settings.seed)
        return replace(self._settings, duration=duration) if duration is not None else self._settings


def _check_pair(lm_meta: dict, codec_meta: dict, lm_path: Path, codec_path: Path) -> None:
    """A model and a codec belong together when their codebooks agree (count and size + the mask id)."""
    n_lm, n_codec = lm_meta.get(K.NUM_AUDIO_CODEBOOK), codec_meta.get(K.N_CODEBOOKS)
    vocab, size = lm_meta.get(K.AUDIO_VOCAB_SIZE), codec_meta.get(K.CODEBOOK_SIZE)
    if n_lm != n_codec or vocab is None or size is None or vocab != size + 1:
        raise ValueError(f"model {lm_path.name} ({n_lm} codebooks of {vocab} ids) and codec {codec_path.name} "
                         f"({n_codec} codebooks of {size} entries) do not belong together")
