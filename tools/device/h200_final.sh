#!/usr/bin/env bash
# A session's closing H200 figures on the carried CUDA build, in one device call (~8 minutes): the CUDA tests,
# then the three tables that BENCHMARKS.md keeps current:
#   1. tools/bench.py side by side with the reference (ours BF16 and F32 against the reference in bfloat16 and
#      float32; auto5, clone5, auto20; 3 repeats after a warm-up),
#   2. tools/batch_bench.py: 1, 16, 64 five-second auto-voice requests batched against one by one, then 64 mixed
#      (auto / design / clone) batched,
#   3. tools/server_load.py through tools/device/h200_server.sh: time to first audio and 1 / 8 / 32 clients.
# Every step gets what is left of BUDGET_S (default 570 s) and is skipped, saying so, when it would not fit.
# Results in $OUT (a device call brings back eight files): h200_final.log (every table), tests-cuda.log,
# bench-cuda.json, batch-auto.json, batch-mixed.json, server_load.json.
#
# SKIP lists parts not to run (tests, bench, batch, server); MIXED_ARGS adds tools/batch_bench.py flags to the 64
# mixed run (e.g. --profile: the engine's phases); TF32=default leaves ggml's TF32 for the F32 products
# (the codec's) after the tests instead of batch_setup.sh's NVIDIA_TF32_OVERRIDE=0, as a user's process has it.
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200_final.sh          # carry .whl .devcarry
set -uo pipefail
LOG=h200_final.log; BUDGET_S=${BUDGET_S:-570}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
rm -f "$OUT/checkpoint.log"  # (a device call brings back eight files)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
runs() { [[ ",${SKIP:-}," != *",$1,"* ]]; }  # whether SKIP leaves part $1 to run

if runs tests; then
  stamp "tests on CUDA"
  OMNIVOICE_TEST_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -rs tests/nn tests/ggml \
    tests/models tests/engine ${PYTEST_ARGS:-} > "$OUT/tests-cuda.log" 2>&1
  tail -14 "$OUT/tests-cuda.log"
fi
[ "${TF32:-off}" = default ] && unset NVIDIA_TF32_OVERRIDE

if runs bench && (( $(left) > 300 )) && [ -n "${REF_SITE:-}" ]; then
  stamp "side by side with the reference"
  timeout 200 python3 tools/bench.py --checkpoint "$CKPT" --gguf-dir "$W/gguf" --backend cuda --quant bf16,f32 \
    --ref-python python3 --ref-pythonpath "$REF_SITE" --ref-dtype bfloat16,float32 --cases auto5,clone5,auto20 \
    --repeats 3 --warmup 1 --json "$OUT/bench-cuda.json" 2>&1 | grep -E "^(\||Machine)"
fi
for mix in auto mixed; do
  runs batch || break
  sizes=1,16,64; [ "$mix" = mixed ] && sizes=64
  (( $(left) < 150 )) && { stamp "skip batch $mix: $(left) s left"; continue; }
  stamp "batch_bench --mix $mix"
  timeout 120 python3 tools/batch_bench.py --model "$MODEL" --backend cuda --steps 32 --sizes $sizes --mix $mix \
    --json "$OUT/batch-$mix.json" $([ "$mix" = mixed ] && echo "${MIXED_ARGS:-}") 2>&1 | grep -E "^\||by phase"
done
if runs server && (( $(left) > 100 )); then
  stamp "server"
  BUDGET_S=$(( $(left) - 10 )) TTFB_REPEATS=10 OUT=/tmp/final-server bash tools/device/h200_server.sh > /dev/null 2>&1
  cat /tmp/final-server/server_load.md; cp /tmp/final-server/server_load.json "$OUT/" 2>/dev/null
fi
stamp "done, $(left) s left"
