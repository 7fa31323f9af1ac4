"""Voices: the library folder of saved voice prompts, and OpenAI's built-in voice names.

The library is a folder of VoicePrompt files (NAME.rvq + NAME.rvq.txt), the same files
`python -m omnivoice.tts --save-voice NAME.rvq` writes, so such a folder serves as it is. A voice's name is
its file name without `.rvq`; names must match ^[A-Za-z0-9_-]{1,64}$ and are checked before any path is
built from them (a file whose name does not match is not served). Uploads are encoded once and saved
atomically; the folder is re-read on every call, so files added or removed by hand show up at once.

OpenAI's built-in voice names are mapped to fixed voice-design attributes (BUILTIN_VOICES). The attributes fix
the kind of voice, not the exact timbre: that also follows the seed, so pass `seed` for a repeatable voice.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..codec.voice import VoicePrompt, transcript_path

__all__ = ["BUILTIN_VOICES", "NAME_PATTERN", "VoiceNameError", "VoiceNotFound", "VoiceExists", "VoiceInfo",
           "VoiceLibrary", "check_name", "resolve_voice"]

NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
SUFFIX = ".rvq"

# OpenAI's built-in voice names -> voice-design attributes (omnivoice.text.voice_design's vocabulary).
BUILTIN_VOICES: dict[str, str] = {
    "alloy": "female, young adult, moderate pitch",
    "ash": "male, young adult, moderate pitch",
    "ballad": "male, young adult, high pitch, british accent",
    "coral": "female, middle-aged, moderate pitch, american accent",
    "echo": "male, young adult, low pitch",
    "fable": "male, middle-aged, moderate pitch, british accent",
    "onyx": "male, middle-aged, very low pitch",
    "nova": "female, young adult, high pitch",
    "sage": "female, middle-aged, low pitch",
    "shimmer": "female, teenager, high pitch",
    "verse": "male, middle-aged, moderate pitch, american accent",
    "marin": "female, young adult, moderate pitch, american accent",
    "cedar": "male, elderly, low pitch",
}


class VoiceNameError(ValueError):
    """A voice name that does not match NAME_PATTERN."""


class VoiceNotFound(LookupError):
    """No voice of that name in the library (nor among the built-in names)."""


class VoiceExists(FileExistsError):
    """An upload under a name the library already has."""


def check_name(name: object) -> str:
    """`name` if it is a valid voice name, else VoiceNameError saying what is allowed."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        shown = repr(name) if not isinstance(name, str) or len(name) <= 80 else repr(name[:80] + "...")
        raise VoiceNameError(f"invalid voice name {shown}: use 1 to 64 characters from A-Z, a-z, 0-9, _ and -")
    return name


@dataclass(frozen=True)
class VoiceInfo:
    """What the API shows of a library voice."""

    name: str
    transcript: str
    seconds: float
    created_at: int

    def as_json(self) -> dict:
        return {"id": self.name, "object": "audio.voice", "type": "audio_sample", "name": self.name,
                "created_at": self.created_at, "transcript": self.transcript, "duration": round(self.seconds, 3)}


class VoiceLibrary:
    """The voices folder. Thread-safe: uploads and deletions of one library are serialised."""

    def __init__(self, folder: Path, frame_rate: float = 25.0) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.frame_rate = frame_rate
        self._lock = threading.Lock()

    def _path(self, name: str) -> Path:
        return self.folder / (check_name(name) + SUFFIX)

    def names(self) -> list[str]:
        """Valid voice names with both files present, sorted."""
        out = []
        for p in self.folder.glob("*" + SUFFIX):
            name = p.name[:-len(SUFFIX)]
            if NAME_PATTERN.fullmatch(name) and p.is_file() and transcript_path(p).is_file():
                out.append(name)
        return sorted(out)

    def has(self, name: str) -> bool:
        p = self._path(name)
        return p.is_file() and transcript_path(p).is_file()

    def load(self, name: str) -> VoicePrompt:
        """The voice prompt saved under `name` (VoiceNotFound when there is none)."""
        p = self._path(name)
        if not (p.is_file() and transcript_path(p).is_file()):
            raise VoiceNotFound(f"voice {name!r} not found")
        return VoicePrompt.load(p)

    def info(self, name: str) -> VoiceInfo:
        voice = self.load(name)
        created = int(self._path(name).stat().st_mtime)
        return VoiceInfo(name, voice.text, voice.codes.shape[1] / self.frame_rate, created)

    def list(self) -> list[VoiceInfo]:
        out = []
        for name in self.names():
            try:
                out.append(self.info(name))
            except (VoiceNotFound, ValueError, OSError):  # removed meanwhile, or a damaged file: not served
                continue
        return out

    def save(self, name: str, voice: VoicePrompt) -> VoiceInfo:
        """Store a new voice; VoiceExists when the name is taken (delete it first to replace it)."""
        p = self._path(name)
        with self._lock:
            if p.exists() or transcript_path(p).exists():
                raise VoiceExists(f"voice {name!r} already exists; delete it first to replace it")
            voice.save(p)
        return self.info(name)

    def delete(self, name: str) -> None:
        p = self._path(name)
        with self._lock:
            if not (p.is_file() or transcript_path(p).is_file()):
                raise VoiceNotFound(f"voice {name!r} not found")
            for f in (p, transcript_path(p)):
                f.unlink(missing_ok=True)


def resolve_voice(library: Optional[VoiceLibrary], voice) -> tuple[Optional[VoicePrompt], Optional[str]]:
    """A request's `voice` (a name, {"id": name}, or None) -> (library voice prompt, design attributes).

    A plain name is a library voice when the library has it, else a built-in name; {"id": name} is always a
    library voice. VoiceNameError for an invalid name, VoiceNotFound for an unknown one."""
    if voice is None:
        return None, None
    by_id = not isinstance(voice, str)
    name = check_name(voice if isinstance(voice, str) else voice.id)
    if library is not None and library.has(name):
        return library.load(name), None
    if not by_id and name in BUILTIN_VOICES:
        return None, BUILTIN_VOICES[name]
    known = "" if by_id else f" (built-in voices: {', '.join(BUILTIN_VOICES)})"
    raise VoiceNotFound(f"voice {name!r} not found in the voice library{known}")
