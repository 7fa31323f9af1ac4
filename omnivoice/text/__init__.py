"""The text front end, pure Python: everything between the user's text and the LM's input ids.

tokenizer     Qwen2 byte-level BPE (Tokenizer.from_gguf / from_tokenizer_json), id-exact with HF tokenizers
languages     646 language names and ids, resolved like the reference
voice_design  voice-design instruct vocabulary, validation, English/Chinese resolution
sentences     the sentence splitter: long-form chunking's pieces and streaming's sentences
streaming     the streaming rule: sentences, the first piece kept short (every streamed path)
chunking      long-form chunking at sentence punctuation, add_punctuation
duration      rule-based duration / target token estimate
request       one item's language, instruct, target length and speed, as the reference's _preprocess_all
prompt        the LM prompt: cond ids [8, L], audio mask [L], uncond ids
"""

from .chunking import ChunkPlan, add_punctuation, chunk_len_for, chunk_text_punctuation, needs_chunking, plan_chunks
from .duration import estimate_duration, estimate_target_tokens
from .languages import UnknownLanguageError, resolve_language
from .prompt import Prompt, build_prompt, combine_text, tokenize_with_nonverbal_tags
from .request import TextRequest, prepare_request
from .sentences import complete_sentences, split_sentences
from .streaming import StreamFeed, stream_arriving_sentences, stream_sentences
from .tokenizer import Tokenizer
from .voice_design import InstructError, instruct_uses_zh, resolve_instruct

__all__ = [
    "Tokenizer",
    "resolve_language",
    "UnknownLanguageError",
    "resolve_instruct",
    "instruct_uses_zh",
    "InstructError",
    "split_sentences",
    "complete_sentences",
    "stream_sentences",
    "stream_arriving_sentences",
    "StreamFeed",
    "chunk_text_punctuation",
    "chunk_len_for",
    "needs_chunking",
    "plan_chunks",
    "ChunkPlan",
    "add_punctuation",
    "estimate_duration",
    "estimate_target_tokens",
    "prepare_request",
    "TextRequest",
    "Prompt",
    "build_prompt",
    "combine_text",
    "tokenize_with_nonverbal_tags",
]
