#!/usr/bin/env bash
# Full-size LM parity on the GPU (after gpu_check.sh built/unpacked the backends in place).
# Needs the reference's dump of one generate() call on the full seed-0 checkpoint, made on a CPU machine with
# tools/reference/run_reference.py (see tools/lm_parity_full.py), at $REF_DUMP.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
CKPT=${CKPT:-/tmp/ckpt-full}
[ -f "$CKPT/model.safetensors" ] || python3 tools/make_checkpoint.py --preset full --seed 0 -o "$CKPT" > /dev/null
echo "== exact F32 products (TF32 off), plain attention"
NVIDIA_TF32_OVERRIDE=0 python3 tools/lm_parity_full.py --checkpoint "$CKPT" --ref "$REF_DUMP" --backend cuda \
  --quants f32,f16,bf16,q8_0 --json "$OUT/lm_parity_cuda.json" 2>&1 | grep -v '^{' | tail -8
echo "== ggml defaults (TF32 for F32 products), flash attention"
python3 tools/lm_parity_full.py --checkpoint "$CKPT" --ref "$REF_DUMP" --backend cuda --flash \
  --quants f32,bf16 --json "$OUT/lm_parity_cuda_fa.json" 2>&1 | grep -v '^{' | tail -6
