"""How many requests the engine packs into one LM step: a count, and a budget of packed positions that memory
decides when the batch size is "auto".

The LM graph's compute buffer grows with the packed length L (activations [n_embd, L], [n_ff, L], and the
audio heads of each chunk's targets). It is measured, not guessed: two graphs of the loaded model are built
(one prompt, then four of the same shape) and the scheduler's buffer sizes give the bytes per packed position
and the fixed part. The budget is a share of the memory free now: the GPU's free memory (after the weights),
or on the CPU the kernel's MemAvailable.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..runners.lm import MAX_GPU_POSITIONS

log = logging.getLogger("omnivoice")

# Share of the free memory the LM's compute buffer may take: the codec's graphs, the host's copies of the
# outputs and other processes need the rest.
MEMORY_SHARE = 0.5
# Requests per step when the batch size is "auto". On a GPU a step is bound by kernel launches, not arithmetic,
# up to many requests. On the CPU a packed step costs what its requests cost one after the other (BENCHMARKS.md:
# the 2-core Zen 3 and the 16-thread Xeon), so batching there adds no throughput; it is kept for what it does to
# latency under mixed lengths: a short request joins the running batch instead of waiting for a long one to end
# (for similar requests one at a time is better: `max_batch=1`, measured in BENCHMARKS.md's server section).
AUTO_MAX_REQUESTS_GPU = 128
AUTO_MAX_REQUESTS_CPU = 8


@dataclass(frozen=True)
class Limits:
    """At most `max_requests` requests per step, and (when set) at most `max_positions` packed positions
    (a request that alone exceeds it still runs, alone)."""

    max_requests: int
    max_positions: Optional[int] = None


def free_memory(runtime) -> int:
    """Bytes free now on the runtime's device: the GPU's free memory, or the CPU's MemAvailable."""
    if runtime.is_gpu:
        from ..ggml.backend import find_device

        return int(find_device(runtime.device.spec)[0].memory_free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def measure_lm(lm, n_text: int = 64, n_target: int = 128) -> tuple[float, float]:
    """(bytes per packed position, fixed bytes) of the LM's compute buffer, from two graphs of the loaded model
    (one prompt of n_text + n_target positions, then four of them)."""
    from ..runners.lm import LMInput

    cfg = lm.cfg
    L = n_text + n_target
    ids = np.zeros((cfg.n_codebook, L), np.int32)
    ids[:, n_text:] = cfg.audio_mask_id
    mask = np.zeros(L, bool)
    mask[n_text:] = True
    prompt = LMInput(ids, mask, n_target)
    sizes = []
    for n in (1, 4):
        with lm.session([prompt] * n, 2.0, True) as s:
            sizes.append(s.graph.buffer_size())
    lm.clear_graphs()  # the measuring shapes' graphs, kept by the sessions' close, would only hold memory
    per_prompt_positions = L + n_target
    per_position = max(0.0, (sizes[1] - sizes[0]) / (3 * per_prompt_positions))
    fixed = max(0.0, sizes[0] - per_position * per_prompt_positions)
    return per_position, fixed


def is_count(value) -> bool:
    """Whether `value` is a whole number of at least 1 (a Python or numpy integer; not a bool)."""
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= 1


def resolve_limits(ov, max_batch="auto", max_positions: Optional[int] = None) -> Limits:
    """Limits for an engine on `ov`: an int `max_batch` is the request count (positions unlimited unless
    `max_positions` is given); "auto" takes the count by device kind and the positions from free memory. On a
    GPU the positions never exceed what one graph may hold (runners.lm.MAX_GPU_POSITIONS)."""
    runtime = ov.lm.runtime
    if max_batch != "auto":
        if not is_count(max_batch):
            raise ValueError(f"batch size must be a positive integer or 'auto', got {max_batch!r}")
        count = int(max_batch)
    else:
        count = AUTO_MAX_REQUESTS_GPU if runtime.is_gpu else AUTO_MAX_REQUESTS_CPU
        if max_positions is None:
            per_position, fixed = measure_lm(ov.lm)
            budget = MEMORY_SHARE * free_memory(runtime) - fixed
            max_positions = max(1, int(budget / per_position)) if per_position > 0 else None
            log.info("batch size auto: up to %d requests, %s packed positions (%.0f KiB per position)", count,
                     max_positions, per_position / 1024)
    if runtime.is_gpu:
        max_positions = min(max_positions or MAX_GPU_POSITIONS, MAX_GPU_POSITIONS)
    return Limits(count, max_positions)
