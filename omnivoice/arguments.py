"""The command-line flags that the commands loading a model share (tts, batch, server, wyoming): which model,
which weights, which CPU kernels and how many threads. The synthesis options' flags are made by
omnivoice.options.add_arguments."""

from __future__ import annotations

import argparse

__all__ = ["add_model_options", "add_quant_option", "add_threads_option", "thread_count"]


def thread_count(value: str) -> int:
    """`--threads` as every command line takes it (an argparse type): a whole number from 1 to the bound of
    ggml.threads.check_threads, so that a count the process cannot start is refused before a model loads."""
    from .ggml.threads import check_threads

    try:
        return check_threads(value, "")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_threads_option(group, note: str = "") -> None:
    """`--threads` as every command that loads a model names it, its default in the words of ggml.threads."""
    from .ggml.threads import SAMPLE_S

    group.add_argument("--threads", type=thread_count,
                       help="CPU threads (default: $OMNIVOICE_THREADS, else the cores this process may use less "
                            f"those busy with other work now, from a {SAMPLE_S:g} s sample of the CPUs' time, or "
                            "the load average where that cannot be read: a thread sharing a busy core slows all"
                            f"{note})")


def add_model_options(group) -> None:
    """`--model` and `--codec` as every command that loads a model names them (what resolve.resolve_model takes)."""
    group.add_argument("--model", help="LM GGUF, folder of converted GGUFs (as omnivoice.convert writes it), "
                                       "OmniVoice checkpoint directory or Hugging Face repo id (default: "
                                       "$OMNIVOICE_MODEL, else k2-fsa/OmniVoice; checkpoints are converted once into "
                                       "$OMNIVOICE_CACHE, else ~/.cache/omnivoice)")
    group.add_argument("--codec", help="codec GGUF (default: omnivoice-tokenizer-F32.gguf beside the model)")


def add_quant_option(group) -> None:
    """`--quant` as every command that loads a model names it: what a checkpoint is converted to, or which file
    of a folder or a repo of GGUFs is used (resolve.resolve_model; auto: resolve.default_quant)."""
    from .resolve import AUTO_QUANT_HELP, REPO_QUANT_ORDER

    group.add_argument("--quant", default="auto", choices=("auto",) + REPO_QUANT_ORDER, metavar="QUANT",
                       help="LM weight type: what a checkpoint is converted to, or which file of a folder or a "
                            f"repo of GGUFs is used: auto, {', '.join(REPO_QUANT_ORDER)} (default auto: "
                            f"{AUTO_QUANT_HELP})")
    from .runners.lm import CPU_PRODUCTS

    group.add_argument("--cpu-products", choices=CPU_PRODUCTS, default=None,
                       help="the LM's matrix products on the CPU: ggml's, or one of the package's kernels: i16, "
                            "13-bit integers for x86 with AVX2 (F16's rounding, 1.4-1.8x ggml's products on AVX2 "
                            "CPUs; 2 bytes a weight in memory), i8, 8-bit activations and 7-bit weights for x86 "
                            "with AVX2 (the precision class of ggml's Q8_0 and K-quant products, 1.3-1.4x i16's "
                            "speed; 1 byte a weight), amx, BF16 on Intel's AMX tiles (BF16's rounding, "
                            "1.5-2.1x ggml's Q8_0 on AMX; 2 bytes a weight), fma, float32 with AVX2 or AVX-512 (4 "
                            "bytes a weight); default OMNIVOICE_CPU_PRODUCTS, else auto: fma for f32 weights; for "
                            "the others amx on CPUs with AMX-BF16, else i8 on AVX2 CPUs (i16 for F16's precision "
                            "there) but ggml's for bf16 weights with AVX-512 BF16, ggml's otherwise. "
                            "ggml also keeps ggml's products in the codec, whose convolutions run on fma otherwise")
