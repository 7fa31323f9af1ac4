#!/usr/bin/env bash
# Where a batched step's time goes on the H200 (issue 15), in one device call: the LM step of N packed five-second
# auto prompts (N = 1, 4, 16, 64) with a kernel profile, default graph and kv_rows; then the batched engine on
# 16 and 64 requests with its wall time by phase (device runs against the host's MaskGIT and decode) and the
# host functions that cost most (tools/batch_bench.py --profile).
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200_profile.sh     # carry .whl .devcarry
set -uo pipefail
LOG=h200_profile.log  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
BATCHES=${BATCHES:-1,4,16,64}
for variant in ${VARIANTS:-none kv_rows}; do
  stamp "LM step, packed x$BATCHES, variant $variant"
  v=(--variant "$variant")
  timeout 200 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda --shapes auto5 \
    --batch "$BATCHES" --repeats 3 --profile "${PROFILE:-2}" --json "$OUT/step_times.jsonl" --label "$variant" "${v[@]}"
done
stamp "engine by phase"
timeout "${ENGINE_S:-240}" python3 tools/batch_bench.py --model "$MODEL" --backend cuda --steps 32 --mix "${MIX:-auto}" \
  --sizes "${SIZES:-16,64}" --no-one-by-one-above 0 --profile --json "$OUT/batch-profile.json"
stamp "done, $(left) s left"
