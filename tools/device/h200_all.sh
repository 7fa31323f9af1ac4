#!/usr/bin/env bash
# The H200 figures of BENCHMARKS.md in one device call (about 9 minutes): ggml's CUDA build carried in (or
# built) plus a Vulkan module, the LM step profile (lm_profile.sh), the side-by-side bench against the
# reference (device_bench.sh), and full-size LM parity on CUDA and Vulkan against the reference's dump
# (lm_parity_full.py). Carry .whl, vendor/ggml/cache, .gl, .vk and the folder holding REF_DUMP and
# CUDA_LIB_ARCHIVE (see lm_profile.sh; without an archive the CUDA build adds ~200 s and the budget is short).
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib REF_DUMP=.devcarry/ref_auto5.npz bash tools/device/h200_all.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
start=$(date +%s); left() { echo $(( ${BUDGET_S:-570} - ($(date +%s) - start) )); }
W=${BENCH_WORK:-/tmp/ovbench}

VULKAN=1 QUANTS=bf16,q8_0,f32,f16 SHAPES=auto5,clone5,auto20 REPEATS=${REPEATS:-3} TESTS= VARIANTS=0 \
  bash tools/device/lm_profile.sh || exit 1

echo "== side by side, $(left) s left"
BENCH_BUDGET_S=$(( $(left) - 90 )) QUANTS=bf16,q8_0,f32 REF_DTYPES=bfloat16,float32 REPEATS=3 WARMUP=1 \
  bash tools/device_bench.sh cuda

echo "== full-size LM parity against the reference's dump, $(left) s left"
export PYTHONPATH=$W/site PYTHONUNBUFFERED=1 NVIDIA_TF32_OVERRIDE=0
source tools/device/vulkan_env.sh
for be in cuda vulkan; do
  t=$(( $(left) / 2 )); (( t < 10 )) && t=10
  timeout $t python3 tools/lm_parity_full.py --checkpoint "$W/ckpt" --gguf-dir "$W/gguf" \
    --ref "$REF_DUMP" --backend $be --flash --quants f32,f16,bf16 --json "$OUT/lm_parity_$be.json" 2>&1 |
    grep -v '^{' | tail -6
done
echo "== done, $(left) s left"
