"""The audio layer: file I/O, resampling, the reference's pre/post-processing, and SRT timelines.

Pure Python + numpy (soundfile for reading); it never touches ggml. Modules:

- ``io``: ``load_audio``, ``write_wav`` (atomic), ``WavStreamWriter`` (``-o -``)
- ``resample``: numpy port of ``torchaudio.functional.resample``
- ``postprocess``: exact ports of the reference's silence removal, fades, loudness steps, and the
  ``preprocess_reference`` / ``postprocess_output`` compositions
- ``srt``: SRT parsing and ``place_cues``
"""

from .io import AudioFileError, WavStreamWriter, load_audio, write_wav
from .postprocess import (
    MAX_REFERENCE_SECONDS,
    cross_fade_chunks,
    fade_and_pad,
    postprocess_output,
    preprocess_reference,
    remove_silence,
)
from .resample import resample
from .srt import Cue, SrtError, load_srt, parse_srt, place_cues

__all__ = [
    "AudioFileError",
    "WavStreamWriter",
    "load_audio",
    "write_wav",
    "resample",
    "remove_silence",
    "cross_fade_chunks",
    "fade_and_pad",
    "preprocess_reference",
    "MAX_REFERENCE_SECONDS",
    "postprocess_output",
    "Cue",
    "SrtError",
    "load_srt",
    "parse_srt",
    "place_cues",
]
