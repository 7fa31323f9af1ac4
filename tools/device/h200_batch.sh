#!/usr/bin/env bash
# Issue 15's H200 figures in one device call (at most ~9 minutes; results in $OUT): the batched engine against
# one by one in one process (tools/batch_bench.py), BF16 on CUDA, the full random checkpoint:
#   1. N = 1, 4, 16, 64 five-second auto-voice requests: aggregate audio s/s, peak VRAM, ratio to one by one,
#      and the reference's omnivoice-infer-batch on the same requests (its own synthesis time) for 16 and 64;
#   2. 64 mixed requests (auto / design / clone, one third each): aggregate RTF (target <= 0.006), with the
#      reference beside it;
#   3. the same 64 mixed requests batched without the engine's pipeline (OMNIVOICE_PIPELINE=0: one graph for all,
#      then the host's work) and with padded attention off (one attention call per segment), to show what
#      each gives. PROFILE=1 adds the engine's time by phase and a host profile to the mixed run.
#
# Carry .whl and .devcarry (tools/device/prepare_carry.sh makes them here: our wheels and the reference's,
# the pinned ggml source; see batch_setup.sh). On a bare machine ggml's CUDA build takes ~5 of the ~9.5
# minutes; every step gets what is left (BUDGET_S, default 560 s from the start) and is skipped, saying so,
# when it would not fit, in the order: ours at every size, the 64 mixed (ours and the reference), the
# reference at 16 and 64 auto, the mixed unpipelined and unpadded. ARCHIVE=1 leaves the CUDA build in $OUT/cudalib, which a
# later call takes as CUDA_LIB_ARCHIVE=.devcarry/cudalib (copied there) and then skips the build.
#     bash tools/device/h200_batch.sh
# On the CPU (to try it): BACKEND=cpu CKPT=/path/to/ckpt-tiny SIZES=1,4 STEPS=4 bash tools/device/h200_batch.sh
set -uo pipefail
LOG=h200_batch.log  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
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

prof=(); [ "${PROFILE:-0}" = 1 ] && prof=(--profile)
run auto 150 --sizes "$SIZES" --mix auto
run mixed 150 --sizes "${SIZES##*,}" --mix mixed "${prof[@]}" "${ref[@]}"
if [ ${#ref[@]} -gt 0 ] && [ "${REF_SIZES:-}" != none ]; then  # the reference's batch CLI for the larger sizes (each run loads its model again)
  run auto-ref 150 --sizes "${REF_SIZES:-16,64}" --mix auto --no-one-by-one-above 0 "${ref[@]}"
fi
OMNIVOICE_PIPELINE=0 run mixed-unpipelined 60 --sizes "${SIZES##*,}" --mix mixed --no-one-by-one-above 0
OMNIVOICE_PADDED_ATTENTION=0 run mixed-unpadded 60 --sizes "${SIZES##*,}" --mix mixed --no-one-by-one-above 0
stamp "done, $(left) s left"
cat "$OUT"/batch-*.md
