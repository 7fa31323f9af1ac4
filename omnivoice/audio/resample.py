"""Band-limited resampling: a numpy port of ``torchaudio.functional.resample``.

The reference resamples every reference clip to 24 kHz and every codec input to 16 kHz with
``torchaudio.functional.resample`` at its defaults (``sinc_interp_hann``, ``lowpass_filter_width=6``,
``rolloff=0.99``). A different filter (Kaiser polyphase, scipy's ``resample_poly``) changes the
HuBERT input and with it the encoded codes, so this module re-creates torchaudio's filter and its
exact framing (padding, stride, output length) rather than using another resampler.

The kernel is built in float32 with the same operation order as torchaudio (which computes it in the
waveform's dtype), so the result agrees with torchaudio to about 1e-7 relative; the remaining
difference comes from the summation order of the convolution.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .io import check_rate

__all__ = ["resample", "sinc_resample_kernel"]

# A kernel of this many float32 values (256 MiB) means two nearly coprime rates; torchaudio would
# build it too, but failing loudly beats swapping the machine to death.
_MAX_KERNEL_ELEMENTS = 64 * 1024 * 1024


@lru_cache(maxsize=16)
def sinc_resample_kernel(
    orig_freq: int, new_freq: int, lowpass_filter_width: int = 6, rolloff: float = 0.99
) -> tuple[np.ndarray, int]:
    """Return torchaudio's Hann-windowed sinc kernel for ``orig_freq -> new_freq``.

    Returns ``(kernel, width)`` where ``kernel`` is float32 of shape ``[new, 2 * width + orig]``
    (``new`` and ``orig`` are the rates divided by their gcd), row ``j`` being the filter for
    output phase ``j``, and ``width`` the zero padding torchaudio puts on the left of the input.
    The array is cached and read-only.
    """
    orig_freq = check_rate(orig_freq, "orig_freq")
    new_freq = check_rate(new_freq, "new_freq")
    if lowpass_filter_width <= 0:
        raise ValueError(f"lowpass_filter_width must be positive, got {lowpass_filter_width}")
    gcd = math.gcd(orig_freq, new_freq)
    orig = orig_freq // gcd
    new = new_freq // gcd
    # torchaudio scales by a Python float; the kernel itself is float32 throughout.
    base_freq = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base_freq)
    if new * (2 * width + orig) > _MAX_KERNEL_ELEMENTS:
        raise ValueError(
            f"resampling {orig_freq} Hz -> {new_freq} Hz needs a {new} x {2 * width + orig} kernel "
            "(the rates share too small a common divisor); resample in two steps or round a rate"
        )
    f32 = np.float32
    idx = np.arange(-width, width + orig, dtype=f32)[None, :] / f32(orig)
    t = np.arange(0, -new, -1, dtype=f32)[:, None] / f32(new) + idx
    t = t * f32(base_freq)
    t = np.clip(t, f32(-lowpass_filter_width), f32(lowpass_filter_width))
    window = np.cos(t * f32(math.pi) / f32(lowpass_filter_width) / f32(2)) ** 2
    t = t * f32(math.pi)
    scale = base_freq / orig
    with np.errstate(invalid="ignore", divide="ignore"):
        kernels = np.where(t == 0, f32(1.0), np.sin(t) / t).astype(f32)
    kernels = kernels * (window * f32(scale))
    kernels = np.ascontiguousarray(kernels, dtype=f32)
    kernels.setflags(write=False)
    return kernels, width


def resample(
    waveform: np.ndarray,
    orig_freq: int,
    new_freq: int,
    lowpass_filter_width: int = 6,
    rolloff: float = 0.99,
) -> np.ndarray:
    """Resample ``waveform`` (``[..., time]``, float) from ``orig_freq`` to ``new_freq`` Hz.

    Same filter, padding and output length as ``torchaudio.functional.resample`` with the
    ``sinc_interp_hann`` method: the output has ``ceil(new * time / orig)`` samples (ratio reduced
    by the gcd). Equal rates return the input unchanged, as torchaudio does. float32 input gives
    float32 output; other float dtypes are computed in float32 and returned as float32 too.
    """
    x = np.asarray(waveform)
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"resample expects a floating point waveform, got dtype {x.dtype}")
    if x.ndim == 0:
        raise ValueError("resample expects a waveform of shape [..., time], got a scalar")
    orig_freq = check_rate(orig_freq, "orig_freq")
    new_freq = check_rate(new_freq, "new_freq")
    if orig_freq == new_freq:
        return waveform
    kernel, width = sinc_resample_kernel(orig_freq, new_freq, int(lowpass_filter_width), float(rolloff))
    gcd = math.gcd(orig_freq, new_freq)
    orig = orig_freq // gcd
    new = new_freq // gcd

    lead_shape = x.shape[:-1]
    length = x.shape[-1]
    # torchaudio computes the length through a default-dtype (float32) tensor; keep that rounding.
    target_length = int(np.ceil(np.float32(new * length / orig)))
    if x.size == 0:
        # torchaudio cannot reshape an empty waveform; the only sensible answer is empty.
        return np.zeros(lead_shape + (target_length,), dtype=np.float32)
    rows = x.reshape(-1, length).astype(np.float32, copy=False)
    padded = np.pad(rows, ((0, 0), (width, width + orig)))
    taps = kernel.shape[1]
    # conv1d with stride `orig`: frame i sees padded[i*orig : i*orig + taps].
    frames = np.lib.stride_tricks.sliding_window_view(padded, taps, axis=-1)[:, ::orig, :]
    out = np.matmul(frames, kernel.T)  # [rows, n_frames, new]
    out = out.reshape(rows.shape[0], -1)
    out = np.ascontiguousarray(out[:, :target_length], dtype=np.float32)
    return out.reshape(lead_shape + (out.shape[-1],))
