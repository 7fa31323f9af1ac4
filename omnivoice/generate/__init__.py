"""Generation: the MaskGIT decoder loop, its schedule and the Philox RNG (pure numpy).

The language model is reached only through the :class:`GuidedLM` protocol, so nothing here
imports ``omnivoice.ggml``.
"""

from .cuda_math import logf
from .maskgit import (
    GenerationConfig,
    GuidedLM,
    MaskGitState,
    StepCallback,
    StepChoice,
    filter_top_k,
    generate,
    gumbel_noise,
    gumbel_sample,
    sample_classes,
    teacher_force,
    top_k_positions,
)
from .philox import CudaPhiloxGenerator, curand_uniform, philox4x32, rand_like_many
from .schedule import linspace_f32, time_steps, unmask_schedule

__all__ = [
    "CudaPhiloxGenerator",
    "GenerationConfig",
    "GuidedLM",
    "MaskGitState",
    "StepCallback",
    "StepChoice",
    "curand_uniform",
    "filter_top_k",
    "generate",
    "gumbel_noise",
    "gumbel_sample",
    "linspace_f32",
    "logf",
    "philox4x32",
    "rand_like_many",
    "sample_classes",
    "teacher_force",
    "time_steps",
    "top_k_positions",
    "unmask_schedule",
]
