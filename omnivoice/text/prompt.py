"""The LM prompt: conditional input ids [8, L], audio mask [L], and the unconditional ids.

A port of OmniVoice._prepare_inference_inputs, _combine_text and _tokenize_with_nonverbal_tags. Layout of the
conditional row (each text id repeated on all 8 codebook rows):

    [<|denoise|>]              only when cloning (a voice prompt is given) and denoise is on
    <|lang_start|>{lang or None}<|lang_end|><|instruct_start|>{instruct or None}<|instruct_end|>
    <|text_start|>{ref_text + " " + text, cleaned}<|text_end|>   non-verbal tags tokenized on their own
    [ref audio codes]          [8, T_ref], cloning only
    MASK x T                   the target, audio_mask_id on every row

The audio mask is True from the first reference audio position (or the first target position) to the end.
The unconditional row is the trailing T positions of the conditional row (all MASK, all audio).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from .tokenizer import Tokenizer

NUM_CODEBOOKS = 8
AUDIO_MASK_ID = 1024

NONVERBAL_TAGS = (
    "laughter", "sigh", "confirmation-en", "question-en", "question-ah", "question-oh", "question-ei",
    "question-yi", "surprise-ah", "surprise-oh", "surprise-wa", "surprise-yo", "dissatisfaction-hnn",
)
_NONVERBAL_PATTERN = re.compile(r"\[(" + "|".join(re.escape(t) for t in NONVERBAL_TAGS) + r")\]")
_CJK = r"[\u4e00-\u9fff]"
_SPACES_AROUND_CJK = re.compile(rf"(?<={_CJK})\s+|\s+(?={_CJK})")


def combine_text(text: str, ref_text: Optional[str] = None) -> str:
    """ref_text + " " + text (both stripped), with newlines removed, full-width parentheses made ASCII, space
    and tab runs collapsed, and whitespace next to CJK ideographs removed (the reference's _combine_text)."""
    full = ref_text.strip() + " " + text.strip() if ref_text else text.strip()
    full = re.sub(r"[\r\n]+", "", full)
    full = full.replace("\uff08", "(").replace("\uff09", ")")
    full = re.sub(r"[ \t]+", " ", full)
    return _SPACES_AROUND_CJK.sub("", full)


def tokenize_with_nonverbal_tags(text: str, tokenizer: Tokenizer) -> List[int]:
    """Token ids of `text` where every non-verbal tag ("[laughter]", "[sigh]", ...) is tokenized on its own, so
    its ids do not depend on the neighbouring characters."""
    ids: List[int] = []
    last = 0
    for m in _NONVERBAL_PATTERN.finditer(text):
        if m.start() > last:
            ids.extend(tokenizer.encode(text[last : m.start()]))
        ids.extend(tokenizer.encode(m.group()))
        last = m.end()
    if last < len(text):
        ids.extend(tokenizer.encode(text[last:]))
    return ids


@dataclass
class Prompt:
    """One item's LM input: cond_ids int32 [C, L], audio_mask bool [L], and the target length T."""

    cond_ids: np.ndarray
    audio_mask: np.ndarray
    num_target_tokens: int
    num_ref_audio_tokens: int = 0

    @property
    def length(self) -> int:
        """L, the conditional sequence length."""
        return int(self.cond_ids.shape[1])

    @property
    def target_start(self) -> int:
        """Index of the first target (MASK) position in the conditional row."""
        return self.length - self.num_target_tokens

    @property
    def uncond_ids(self) -> np.ndarray:
        """The unconditional row: the trailing T positions of the conditional row, int32 [C, T]."""
        return self.cond_ids[:, self.target_start :]

    @property
    def uncond_audio_mask(self) -> np.ndarray:
        """Audio mask of the unconditional row (all True), bool [T]."""
        return self.audio_mask[self.target_start :]


def style_text(lang: Optional[str], instruct: Optional[str], denoise: bool, has_ref_audio: bool) -> str:
    """The style prefix string: [<|denoise|>] + language + instruct markers ("None" when empty)."""
    s = "<|denoise|>" if denoise and has_ref_audio else ""
    s += f"<|lang_start|>{lang if lang else 'None'}<|lang_end|>"
    s += f"<|instruct_start|>{instruct if instruct else 'None'}<|instruct_end|>"
    return s


def build_prompt(
    tokenizer: Tokenizer,
    text: str,
    num_target_tokens: int,
    ref_text: Optional[str] = None,
    ref_audio_tokens: Optional[np.ndarray] = None,
    lang: Optional[str] = None,
    instruct: Optional[str] = None,
    denoise: bool = True,
    num_codebooks: int = NUM_CODEBOOKS,
    audio_mask_id: int = AUDIO_MASK_ID,
) -> Prompt:
    """Build the conditional prompt for one item, exactly as the reference's _prepare_inference_inputs.

    `lang` is a resolved language id (or None) and `instruct` a resolved instruct (or None); `ref_audio_tokens`
    are the voice prompt's codes [num_codebooks, T_ref] (cloning) or None (auto / design). <|denoise|> is only
    emitted when cloning with denoise on, as in the reference.
    """
    if int(num_target_tokens) != num_target_tokens or num_target_tokens < 1:
        raise ValueError(f"num_target_tokens must be a positive integer, got {num_target_tokens!r}")
    num_target_tokens = int(num_target_tokens)
    ref = None
    if ref_audio_tokens is not None:
        ref = np.asarray(ref_audio_tokens)
        if ref.ndim != 2 or ref.shape[0] != num_codebooks:
            raise ValueError(f"ref_audio_tokens must have shape [{num_codebooks}, T], got {list(ref.shape)}")
        if ref.size and (not np.issubdtype(ref.dtype, np.integer) or ref.min() < 0 or ref.max() >= audio_mask_id):
            raise ValueError(f"ref_audio_tokens must be integer codes in [0, {audio_mask_id}), "
                             f"got dtype {ref.dtype} range [{ref.min()}, {ref.max()}]")

    style_ids = tokenizer.encode(style_text(lang, instruct, denoise, ref is not None))
    wrapped = f"<|text_start|>{combine_text(text, ref_text)}<|text_end|>"
    text_ids = tokenize_with_nonverbal_tags(wrapped, tokenizer)

    n_text = len(style_ids) + len(text_ids)
    n_ref = 0 if ref is None else ref.shape[1]
    length = n_text + n_ref + num_target_tokens
    cond = np.empty((num_codebooks, length), dtype=np.int32)
    cond[:, :n_text] = np.asarray(style_ids + text_ids, dtype=np.int32)[None, :]
    if ref is not None:
        cond[:, n_text : n_text + n_ref] = ref
    cond[:, n_text + n_ref :] = audio_mask_id
    mask = np.zeros(length, dtype=bool)
    mask[n_text:] = True
    return Prompt(cond_ids=cond, audio_mask=mask, num_target_tokens=num_target_tokens, num_ref_audio_tokens=n_ref)
