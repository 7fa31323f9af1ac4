"""The public face: `OmniVoice` loads the model and codec once, then synthesizes.

    import omnivoice
    with omnivoice.OmniVoice() as ov:                      # OMNIVOICE_MODEL, else k2-fsa/OmniVoice
        result = ov.synthesize("Hello world.", language="English")
        soundfile.write("hello.wav", result.audio, result.sample_rate)
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Iterator, Optional, Union

import numpy as np

from . import gguf_keys as K
from .generate.maskgit import GenerationConfig
from .pipeline import (CancelCallback, Cancelled, Pipeline, ProgressCallback, Settings, SynthesisResult,
                       VoicePrompt)

log = logging.getLogger("omnivoice")

DEFAULT_REPO = "k2-fsa/OmniVoice"
AudioInput = Union[str, os.PathLike, tuple]  # a path, or (samples, sample_rate)

__all__ = ["OmniVoice", "SynthesisResult", "VoicePrompt", "Cancelled", "ModelNotAvailable", "resolve_model",
           "DEFAULT_REPO"]


def cache_dir() -> Path:
    """Where converted checkpoints live: OMNIVOICE_CACHE, else ~/.cache/omnivoice."""
    return Path(os.environ.get("OMNIVOICE_CACHE", Path.home() / ".cache" / "omnivoice"))


def _checkpoint_id(path: Path) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "audio_tokenizer/config.json",
                 "audio_tokenizer/model.safetensors"):
        f = path / name
        st = f.stat()
        h.update(f"{name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


def default_quant(backend_name: str) -> str:
    """The LM weight type a checkpoint is converted to when none is named, by backend (measured on an H200 and
    a 2-core Zen 4, BENCHMARKS.md): BF16 on CUDA (cuBLAS accumulates it in F32; LM step 4.0 ms against 4.7 for
    F32 with TF32 and 5.0 for F16, whose products cuBLAS accumulates in F16), F16 on other GPUs (Vulkan's BF16
    products are 4x slower than its F16 ones), F32 on the CPU (the reference's own precision: same tokens)."""
    name = backend_name.lower()
    return "bf16" if name == "cuda" else "f32" if name == "cpu" else "f16"


def resolve_model(model: Optional[str], codec: Optional[str] = None, quant: str = "f32") -> tuple[Path, Path]:
    """Turn the user's model argument into (LM GGUF, codec GGUF) paths.

    `model` may be an LM GGUF file (the codec is then `codec`, or omnivoice-tokenizer-F32.gguf beside it), an
    OmniVoice checkpoint directory in the Hugging Face layout (converted once into the cache and reused), or a
    Hugging Face repo id (downloaded with huggingface_hub when online). None means OMNIVOICE_MODEL, else
    k2-fsa/OmniVoice.
    """
    model = model or os.environ.get("OMNIVOICE_MODEL") or DEFAULT_REPO
    path = Path(model).expanduser()
    if path.is_file():
        lm = path
        codec_path = Path(codec) if codec else path.with_name("omnivoice-tokenizer-F32.gguf")
        if not codec_path.is_file():
            raise FileNotFoundError(f"codec GGUF not found: {codec_path} (pass codec=... / --codec)")
        return lm, codec_path
    if not path.exists():
        if path.is_absolute() or str(model).startswith((".", "~")) or str(model).count("/") != 1:
            raise FileNotFoundError(f"model not found: {model} (expected a GGUF file, a checkpoint directory "
                                    f"or a Hugging Face repo id such as {DEFAULT_REPO})")
        path = _download(str(model))
    if not path.is_dir():
        raise FileNotFoundError(f"model not found: {model}")
    from .convert import convert_checkpoint

    out = cache_dir() / f"{path.name}-{_checkpoint_id(path)}"
    lm = out / f"omnivoice-base-{quant.upper()}.gguf"
    codec_path = Path(codec) if codec else out / "omnivoice-tokenizer-F32.gguf"
    if not lm.is_file() or not (out / "omnivoice-tokenizer-F32.gguf").is_file():
        log.info("converting %s into %s (once)", path, out)
        convert_checkpoint(path, out, quant=quant)
    return lm, codec_path


class ModelNotAvailable(FileNotFoundError):
    """The model named by a repo id cannot be had here (no huggingface_hub, no network, no such repo)."""


def _download(repo_id: str) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelNotAvailable(f"{repo_id!r} looks like a Hugging Face repo id, but huggingface_hub is not "
                                f"installed: pip install huggingface_hub, or pass a local checkpoint or GGUF") from None
    try:
        return Path(snapshot_download(repo_id))
    except Exception as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelNotAvailable(f"could not download {repo_id} from the Hugging Face Hub ({first_line}); "
                                f"offline, pass --model with a local checkpoint directory or GGUF file") from e


class OmniVoice:
    """OmniVoice text-to-speech on ggml: load once, synthesize many times. Frees its memory on close()."""

    def __init__(self, model: Optional[str] = None, codec: Optional[str] = None, backend: str = "auto",
                 n_threads: Optional[int] = None, quant: str = "auto", flash_attn: Optional[bool] = None,
                 clamp_fp16: bool = False) -> None:
        """Load the LM, the codec and the tokenizer onto `backend` (auto, cpu, cuda, vulkan, metal[:N]).

        `quant` is the LM weight type a checkpoint directory or repo id is converted to (f32, f16, bf16, q8_0;
        `auto`: by backend, see default_quant); a GGUF file is used as it is.
        """
        from .codec import load_codec
        from .ggml import Runtime
        from .runners.lm import LanguageModel
        from .text import Tokenizer

        self.runtime = Runtime(backend, n_threads)
        try:
            if quant == "auto":
                quant = default_quant(self.runtime.device.backend)
            lm_path, codec_path = resolve_model(model, codec, quant)
            self.lm = LanguageModel(self.runtime, lm_path, flash_attn=flash_attn, clamp_fp16=clamp_fp16)
            self.codec = load_codec(codec_path, runtime=self.runtime)
            _check_pair(self.lm.metadata, self.codec.weights.metadata, lm_path, codec_path)
            self.tokenizer = Tokenizer.from_gguf(str(lm_path))
        except BaseException:
            self.close()
            raise
        self.pipeline = Pipeline(self.lm, self.codec, self.tokenizer)
        self.sample_rate = self.pipeline.sample_rate
        self.model_path, self.codec_path = lm_path, codec_path

    # ------------------------------------------------------------------------------------------ voices
    def create_voice(self, ref_audio: AudioInput, ref_text: str, preprocess_prompt: bool = True) -> VoicePrompt:
        """Encode a reference clip (path or (samples, rate)) and its transcript into a reusable voice prompt."""
        from .audio.io import load_audio
        from .audio.postprocess import preprocess_reference
        from .text.chunking import add_punctuation

        if ref_text is None or not str(ref_text).strip():
            raise ValueError("ref_text (the transcript of the reference audio) is required for voice cloning")
        if isinstance(ref_audio, (str, os.PathLike)):
            samples, rate = load_audio(ref_audio)
        else:
            try:
                samples, rate = ref_audio
            except (TypeError, ValueError):
                raise TypeError("ref_audio must be a path or a (samples, sample_rate) tuple") from None
            samples = np.asarray(samples, dtype=np.float32)
        source = os.fspath(ref_audio) if isinstance(ref_audio, (str, os.PathLike)) else "ref_audio"
        try:
            clip, rms = preprocess_reference(samples, int(rate), preprocess=preprocess_prompt,
                                             target_rate=self.sample_rate, hop_length=self.codec.hop_length)
        except ValueError as e:
            raise ValueError(f"{source}: {e}") from None
        codes = self.codec.encode(clip)
        text = add_punctuation(ref_text) if preprocess_prompt else ref_text
        return VoicePrompt(codes, text, rms)

    # ------------------------------------------------------------------------------------------ synthesis
    def settings(self, language: Optional[str] = None, instruct: Optional[str] = None, text: str = "",
                 duration: Optional[float] = None, speed: float = 1.0, num_step: int = 32,
                 guidance_scale: float = 2.0, t_shift: float = 0.1, layer_penalty_factor: float = 5.0,
                 position_temperature: float = 5.0, class_temperature: float = 0.0, seed: Optional[int] = None,
                 denoise: bool = True, postprocess_output: bool = True, chunk_duration: float = 15.0,
                 chunk_threshold: float = 30.0) -> Settings:
        """Validate and resolve user options (language names, instruct attributes) into pipeline Settings."""
        from .text.languages import resolve_language
        from .text.voice_design import instruct_uses_zh, resolve_instruct

        lang = resolve_language(language)
        inst = resolve_instruct(instruct, use_zh=instruct_uses_zh(text)) if instruct else None
        if speed <= 0:
            raise ValueError(f"speed must be > 0, got {speed}")
        sampler = GenerationConfig(num_step=num_step, guidance_scale=guidance_scale, t_shift=t_shift,
                                   layer_penalty_factor=layer_penalty_factor,
                                   position_temperature=position_temperature, class_temperature=class_temperature)
        return Settings(language=lang, instruct=inst, duration=duration, speed=speed, denoise=denoise,
                        sampler=sampler, seed=seed, postprocess_output=postprocess_output,
                        chunk_duration=chunk_duration, chunk_threshold=chunk_threshold)

    def synthesize(self, text: str, *, language: Optional[str] = None, instruct: Optional[str] = None,
                   ref_audio: Optional[AudioInput] = None, ref_text: Optional[str] = None,
                   voice: Optional[VoicePrompt] = None, preprocess_prompt: bool = True,
                   progress: Optional[ProgressCallback] = None, cancel: Optional[CancelCallback] = None,
                   dump: Optional[str] = None, **options) -> SynthesisResult:
        """Synthesize `text` to speech.

        Voice: `voice` (from create_voice / VoicePrompt files), or `ref_audio` + `ref_text` (cloning), or
        `instruct` (design: e.g. "female, low pitch, british accent"), or nothing (auto).
        Options: duration, speed, num_step, guidance_scale, t_shift, layer_penalty_factor,
        position_temperature, class_temperature, seed, denoise, postprocess_output, chunk_duration,
        chunk_threshold. `progress(done, total)` is called after each MaskGIT step; `cancel()` returning
        True stops with Cancelled. Returns audio (float32 mono), sample_rate and per-chunk tokens.
        """
        voice = self._voice(voice, ref_audio, ref_text, preprocess_prompt)
        settings = self.settings(language, instruct, text, **options)
        return self.pipeline.synthesize(text, settings, voice, progress, cancel,
                                        Path(dump) if dump else None)

    def stream(self, text: str, *, language: Optional[str] = None, instruct: Optional[str] = None,
               ref_audio: Optional[AudioInput] = None, ref_text: Optional[str] = None,
               voice: Optional[VoicePrompt] = None, preprocess_prompt: bool = True,
               cancel: Optional[CancelCallback] = None, **options) -> Iterator[np.ndarray]:
        """Yield audio (float32 mono at sample_rate) sentence by sentence; same options as synthesize."""
        voice = self._voice(voice, ref_audio, ref_text, preprocess_prompt)
        settings = self.settings(language, instruct, text, **options)
        yield from self.pipeline.stream(text, settings, voice, cancel)

    def _voice(self, voice, ref_audio, ref_text, preprocess_prompt) -> Optional[VoicePrompt]:
        if voice is not None:
            if ref_audio is not None:
                raise ValueError("give either voice or ref_audio, not both")
            return voice
        if ref_audio is not None:
            return self.create_voice(ref_audio, ref_text, preprocess_prompt)
        if ref_text is not None:
            raise ValueError("ref_text was given without ref_audio: cloning needs the reference audio too")
        return None

    # ------------------------------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Free the models' backend memory."""
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


def _check_pair(lm_meta: dict, codec_meta: dict, lm_path: Path, codec_path: Path) -> None:
    """A model and a codec belong together when their codebooks agree (count and size + the mask id)."""
    n_lm, n_codec = lm_meta.get(K.NUM_AUDIO_CODEBOOK), codec_meta.get(K.N_CODEBOOKS)
    vocab, size = lm_meta.get(K.AUDIO_VOCAB_SIZE), codec_meta.get(K.CODEBOOK_SIZE)
    if n_lm != n_codec or vocab is None or size is None or vocab != size + 1:
        raise ValueError(f"model {lm_path.name} ({n_lm} codebooks of {vocab} ids) and codec {codec_path.name} "
                         f"({n_codec} codebooks of {size} entries) do not belong together")
    src_lm, src_codec = lm_meta.get("omnivoice.source_id"), codec_meta.get("omnivoice.source_id")
    if src_lm and src_codec and src_lm != src_codec:
        raise ValueError(f"model {lm_path.name} and codec {codec_path.name} were converted from different "
                         f"checkpoints ({src_lm} vs {src_codec})")
