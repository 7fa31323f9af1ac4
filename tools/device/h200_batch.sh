#!/usr/bin/env bash
# Issue 15's H200 figures in one device call (at most ~9 minutes; results in $OUT): the batched engine against
# one by one in one process (tools/batch_bench.py), BF16 on CUDA, the full random checkpoint:
#   1. N = 1, 4, 16, 64 five-second auto-voice requests: aggregate audio s/s, peak VRAM, ratio to one by one,
#      and the reference's omnivoice-infer-batch on the same requests (its own synthesis time) for 16 and 64;
#   2. 64 mixed requests (auto / design / clone, one third each): aggregate RTF (target <= 0.006), with the
#      reference beside it;
#   3. the same 64 mixed requests batched with padded attention off (one attention call per segment), to show
#      what the padded buckets give.
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200_batch.sh      # carry .whl, vendor/ggml/cache,
#                                                                              # .devcarry (see batch_setup.sh)
# On the CPU (to try it): BACKEND=cpu CKPT=/path/to/ckpt-tiny SIZES=1,4 STEPS=4 bash tools/device/h200_batch.sh
set -uo pipefail
t0=$(date +%s)
source tools/device/batch_setup.sh || exit 1
exec > >(tee -a "$OUT/h200_batch.log") 2>&1
SIZES=${SIZES:-1,4,16,64}; STEPS=${STEPS:-32}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
ref=()
if [ -n "${REF_SITE:-}" ]; then
  ref=(--checkpoint "$CKPT" --ref-python python3 --ref-pythonpath "$REF_SITE" --ref-timeout 150)
fi

run() {  # label, seconds allowed, batch_bench arguments...
  local label=$1 t=$2; shift 2
  (( t > $(left) - 10 )) && t=$(( $(left) - 10 ))
  (( t < 20 )) && { stamp "skip $label: no time left"; return; }
  stamp "$label (up to $t s)"
  timeout --signal=TERM --kill-after=10 "$t" python3 tools/batch_bench.py --model "$MODEL" --backend "$BACKEND" \
    --steps "$STEPS" --json "$OUT/batch-$label.json" --markdown "$OUT/batch-$label.md" "$@"
}

run auto 180 --sizes "$SIZES" --mix auto
if [ ${#ref[@]} -gt 0 ]; then  # the reference's batch CLI for the larger sizes (each run loads its model again)
  run auto-ref 150 --sizes "${REF_SIZES:-16,64}" --mix auto --no-one-by-one-above 0 "${ref[@]}"
fi
run mixed 150 --sizes "${SIZES##*,}" --mix mixed "${ref[@]}"
OMNIVOICE_PADDED_ATTENTION=0 run mixed-unpadded 60 --sizes "${SIZES##*,}" --mix mixed --no-one-by-one-above 0
stamp "done, $(left) s left"
cat "$OUT"/batch-*.md
