#!/usr/bin/env bash
# docs/GPU.md's open device work 1 and 4 in one call (~8 minutes on a bare machine; results in $OUT):
#  1. the CUDA defaults (kv_rows, padded attention with K/V scattered by set_rows) against the plain graph at full
#     size: tools/lm_packed_check.py with the plain graph for each prompt alone, then tools/lm_parity_full.py
#     (teacher-forced agreement with the reference's float32 dump) with and without OMNIVOICE_LM_VARIANT=none;
#  2. the server's time to first audio, TTFB_REPEATS (10) runs, and CLIENTS (1,32) concurrent clients.
# Carry .whl and .devcarry (cudalib/ from h200_ggml.sh ARCHIVE=1, ggml-src.tar.xz, and ref_auto5.npz from
# tools/device/prepare_carry.sh):
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200_checks.sh
set -uo pipefail
LOG=h200_checks.log; BUDGET_S=${BUDGET_S:-560}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

stamp "packed (padded, scattered K/V, kv_rows) against each prompt alone on the plain graph"
for b in 16 64; do
  OMNIVOICE_LM_VARIANT=none timeout 90 python3 tools/lm_packed_check.py --gguf "$MODEL" --backend cuda --batch $b \
    | tee "$OUT/packed_check_$b.txt"
done
for variant in default none; do
  stamp "teacher-forced parity, BF16, variant $variant"
  env $([ $variant = none ] && echo OMNIVOICE_LM_VARIANT=none) timeout 150 python3 tools/lm_parity_full.py \
    --checkpoint "$CKPT" --gguf-dir "$W/gguf" --ref .devcarry/ref_auto5.npz --backend cuda --flash --quants bf16 \
    --json "$OUT/parity_$variant.json" | tee "$OUT/parity_$variant.md"
done

stamp "server, $(left) s left"
(( $(left) > 120 )) && BUDGET_S=$(( $(left) - 5 )) OUT=$OUT/server TTFB_REPEATS=${TTFB_REPEATS:-10} \
  CLIENTS=${CLIENTS:-1,32} bash tools/device/h200_server.sh
stamp "done, $(left) s left"
