"""What 8-bit integer products do to the full LM's logits, simulated in numpy (outside CI): the int8 kernel's
quantization (omnivoice/csrc/int8.c: W to QW levels per row and block of 128 along K, x to QX levels per column and
block, rounded to nearest, exact integer sums) applied to every matrix product of the float forward, against
the float forward itself. Layouts the kernel does not have (other QW/QX, a Hadamard rotation of each block) can be
tried before writing them in C; the simulated layout of the kernel reproduced its measured step-0 logits cosine
(0.99806 against tools/lm_parity_full.py's 0.99809; 112/73 levels: 0.99906 against 0.99905).

    python3 tools/int8_sim.py --checkpoint /tmp/ckpt-full --ref ref_auto5.npz --layouts 63:127,112:73,h63:127 \
        --step 0

`--step S` feeds the reference's input of MaskGIT step S (its unmasked tokens in the target window). Reports,
per layout, the cosine and max |error| of the conditional logits on the target window, and how many of their
argmaxes equal the float forward's. The forward is tests/models/lm_reference.py's, on float32 weights, with its
products replaced; about 10 s a layout on two cores at 5 s of audio.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.models import lm_reference as ref_math  # noqa: E402

BLOCK = 128
MASK = 1024


def hadamard(n: int) -> np.ndarray:
    """The orthonormal Walsh-Hadamard matrix of order n (a power of two)."""
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(n)).astype(np.float32)


def quantized(a: np.ndarray, levels: float) -> np.ndarray:
    """a [..., n, BLOCK] rounded to `levels` steps each side of zero per block (scale = block max / levels)."""
    s = np.abs(a).max(-1, keepdims=True) / levels
    s[s == 0] = 1
    return np.clip(np.rint(a / s), -levels, levels) * s


class Products:
    """x @ W.T as the kernel computes it, W quantized once per matrix (its name) and x per call."""

    def __init__(self, qw: float, qx: float, rotate: bool, w: dict) -> None:
        self.qw, self.qx, self.rot, self.w = qw, qx, hadamard(BLOCK) if rotate else None, w
        self.weights: dict[str, np.ndarray] = {}

    def __call__(self, x: np.ndarray, name: str) -> np.ndarray:
        x, w = np.ascontiguousarray(x, np.float32), self.w[name]
        (L, K), M = x.shape, w.shape[0]
        xb = x.reshape(L, K // BLOCK, BLOCK)
        if name not in self.weights:
            wb = w.reshape(M, K // BLOCK, BLOCK)
            self.weights[name] = quantized(wb if self.rot is None else wb @ self.rot, self.qw).reshape(M, K)
        if self.rot is not None:
            xb = xb @ self.rot  # (x H)(W H)^T = x W^T: each block rotated on both sides
        return quantized(xb, self.qx).reshape(L, K) @ self.weights[name].T


def load(checkpoint: Path) -> tuple[dict, dict]:
    from safetensors.numpy import load_file

    config = json.loads((checkpoint / "config.json").read_text())
    lc = config.get("llm_config", config)
    cfg = dict(n_layer=lc["num_hidden_layers"], n_head=lc["num_attention_heads"],
               n_head_kv=lc["num_key_value_heads"], head_dim=lc.get("head_dim", 128), eps=lc["rms_norm_eps"],
               theta=lc.get("rope_theta", 1e6), audio_vocab=config.get("audio_vocab_size", 1025))
    tensors = load_file(str(checkpoint / "model.safetensors"))
    w = {k: v.astype(np.float32) for k, v in tensors.items() if k.startswith(("llm.", "audio_"))}
    return w, cfg


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--ref", type=Path, required=True, help="run_reference.py generate output (.npz)")
    p.add_argument("--layouts", default="63:127,h63:127",
                   help="comma list of QW:QX (the kernel's is 63:127), an h first rotates each block")
    p.add_argument("--step", type=int, default=0, help="the MaskGIT step whose input is fed")
    args = p.parse_args()
    w, cfg = load(args.checkpoint)
    dump = np.load(args.ref)
    ids = dump["call0_cond_ids"].astype(np.int64)
    mask = dump["call0_cond_audio_mask"].astype(bool)
    T = dump["call0_tokens"].shape[1]
    if args.step:
        ids[:, -T:] = dump["call0_step_tokens"][args.step]
    base = ref_math.forward(w, cfg, ids, mask)[:, -T:].astype(np.float64)
    print(f"step {args.step}: {100 * (ids[:, -T:] == MASK).mean():.1f} % of the target masked")
    print("| layout | logits cosine | max abs err | argmax equal |\n|---|---|---|---|")
    for layout in args.layouts.split(","):
        qw, qx = (float(v) for v in layout.lstrip("h").split(":"))
        got = ref_math.forward(w, cfg, ids, mask, Products(qw, qx, layout.startswith("h"), w))[:, -T:]
        got = got.astype(np.float64)
        cos = float((got * base).sum() / np.linalg.norm(got) / np.linalg.norm(base))
        same = float((got.argmax(-1) == base.argmax(-1)).mean())
        print(f"| {layout} | {cos:.7f} | {np.abs(got - base).max():.3e} | {100 * same:.1f} % |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
