"""Tokenizer speed: our pure-Python Qwen2 BPE against Hugging Face `tokenizers` (Rust).

Run from the repository root (system python):

    python3 tools/bench_tokenizer.py

Builds the Qwen3/OmniVoice tokenizer files in a temp dir (tests/text/qwen_files.py), then times loading and
encoding 10,000 characters of mixed multilingual text and of English prose, cold (fresh tokenizer, empty
pre-token cache) and warm (same text again). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import os
import random
import runpy
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from omnivoice.text import Tokenizer  # noqa: E402


def best_of(fn, n=5):
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    from tokenizers import Tokenizer as HFTokenizer

    qf = runpy.run_path(os.path.join(ROOT, "tests", "text", "qwen_files.py"))
    corpus = runpy.run_path(os.path.join(ROOT, "tests", "text", "text_corpus.py"))
    rng = random.Random(0)
    mixed = "".join(corpus["random_texts"](1, 800, 40))[:10000]
    # Pseudo-English words from random syllables: few repeats, so the pre-token cache rarely helps.
    syl = ["th", "e", "qu", "ick", "br", "own", "f", "ox", "ju", "mps", "ov", "er", "la", "zy", "do", "g", "wh",
           "ile", "se", "ven", "wi", "zar", "ds", "qui", "et", "ly", "ju", "dge", "bo", "xing", "ma", "tch", "es"]
    english = " ".join("".join(rng.choice(syl) for _ in range(rng.randint(1, 4))) + ("." if rng.random() < 0.1
                       else "") for _ in range(3000))[:10000]
    with tempfile.TemporaryDirectory() as d:
        qf["write_tokenizer_files"](d)
        path = os.path.join(d, "tokenizer.json")
        t_load = best_of(lambda: Tokenizer.from_tokenizer_json(path), 3)
        hf = HFTokenizer.from_file(path)
        rows = []
        for name, text in (("mixed multilingual", mixed), ("pseudo-English words", english)):
            tk = Tokenizer.from_tokenizer_json(path)

            def cold_encode():
                tk._cache.clear()
                tk.encode(text)

            cold = best_of(cold_encode)
            tk.encode(text)
            warm = best_of(lambda: tk.encode(text))
            ref = best_of(lambda: hf.encode(text))
            n_ids = len(tk.encode(text))
            rows.append(f"| {name}, {len(text)} chars, {n_ids} ids | {cold * 1e3:.1f} ms | {warm * 1e3:.1f} ms | "
                        f"{ref * 1e3:.1f} ms |")
    print(f"tokenizer load (tokenizer.json, 151,676 tokens, 151,387 merges): {t_load * 1e3:.0f} ms\n")
    print("| text | ours, cold cache | ours, warm cache | HF tokenizers (Rust) |")
    print("|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
