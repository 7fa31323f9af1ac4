"""Clone references for the engine: each distinct (audio, transcript) is encoded once and kept.

Manifests often speak many lines in a few voices; the cache key is the file's path, size and modification
time (or the samples' hash for in-memory audio) with the transcript and the preprocessing flag, so an edited
file is encoded again. The clips of one admission round are encoded together (AudioCodec.encode_batch).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from typing import Optional

import numpy as np

from ..codec.voice import VoicePrompt

__all__ = ["VoiceCache"]


class VoiceCache:
    """VoicePrompts of clone references, by content key, the `capacity` most recent kept."""

    def __init__(self, ov, capacity: int = 256) -> None:
        self.ov = ov
        self.capacity = capacity
        self._cache: OrderedDict[tuple, VoicePrompt] = OrderedDict()

    @staticmethod
    def key(request) -> tuple:
        audio = request.ref_audio
        if isinstance(audio, (str, os.PathLike)):
            path = os.path.realpath(os.fspath(audio))
            st = os.stat(path)
            source: tuple = ("file", path, st.st_size, st.st_mtime_ns)
        else:
            samples, rate = audio
            a = np.ascontiguousarray(samples, dtype=np.float32)
            source = ("samples", hashlib.sha256(a.tobytes()).hexdigest(), a.shape, int(rate))
        return source + (request.ref_text, bool(request.preprocess_prompt))

    def get_many(self, requests: list) -> list[VoicePrompt | BaseException]:
        """The voice of each request (ref_audio + ref_text), or the exception that made it fail."""
        out: list[Optional[VoicePrompt | BaseException]] = [None] * len(requests)
        todo: OrderedDict[tuple, list[int]] = OrderedDict()
        for i, r in enumerate(requests):
            try:
                k = self.key(r)
            except (OSError, TypeError, ValueError) as e:
                out[i] = ValueError(f"ref_audio: cannot be read ({e})")
                continue
            if k in self._cache:
                self._cache.move_to_end(k)
                out[i] = self._cache[k]
            else:
                todo.setdefault(k, []).append(i)
        if todo:
            firsts = [requests[idx[0]] for idx in todo.values()]
            voices = self.ov.create_voices([(r.ref_audio, r.ref_text, r.preprocess_prompt) for r in firsts])
            for (k, idx), v in zip(todo.items(), voices):
                if not isinstance(v, BaseException):
                    self._cache[k] = v
                    while len(self._cache) > self.capacity:
                        self._cache.popitem(last=False)
                for i in idx:
                    out[i] = v
        return out
