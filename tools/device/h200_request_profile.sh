#!/usr/bin/env bash
# Where one request's time goes on the H200, in one device call: with TESTS=1 first the CUDA tests (the ops
# against numpy, the models, the engine; a failure stops the script), then tools/request_profile.py (phases of
# clone5, auto5, auto20; the kernels of the codec's encode and decode), the LM step of each shape with its kernel
# table (tools/lm_step_time.py --profile), and with BENCH=1 tools/bench.py side by side with the reference in
# bfloat16. Results in $OUT: request_profile.log, request_profile.json, steps.jsonl (tests-cuda.log,
# bench-cuda.json/.md).
# batch_setup.sh sets NVIDIA_TF32_OVERRIDE=0 (F32 products in F32: the parity runs' setting); a user's process has
# ggml's default, TF32 for the codec's F32 products on CUDA. TF32_AB=1 runs the request phases twice, TF32 off then
# the default, and leaves the default for the rest (the LM steps and the bench, whose BF16 LM has no F32 product).
# BASE=DIR (an earlier tree's omnivoice/ and tools/: `git archive COMMIT omnivoice tools | tar -x -C ab-base`) also
# profiles that tree's requests on this build, before this tree's (request_profile_base.json): a graph change's A/B.
# TEST_PATHS replaces TESTS=1's test paths, SHAPES=none skips the LM steps, BENCH_CASES the bench's cases;
# TF32=default runs everything after the tests with ggml's TF32 (TF32_AB=1 sets it itself). BUSY=N profiles N whole
# requests of each case (GPU busy against wall time), QUEUED=N times N LM steps launched back to back beside the
# synced ones (the host's share of a step), MASKGIT=N times whole N-step chunks stepped on the host and on the device
# (lm_step_time.py --maskgit), STEP_REPEATS the synced steps timed (default 3).
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib TESTS=1 BENCH=1 bash tools/device/h200_request_profile.sh  # carry .whl .devcarry
set -uo pipefail
LOG=request_profile.log; BUDGET_S=${BUDGET_S:-560}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
rm -f "$OUT/checkpoint.log"
if [ "${TESTS:-0}" = 1 ]; then
  stamp "tests on CUDA"
  OMNIVOICE_TEST_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -rs \
    ${TEST_PATHS:-tests/nn tests/ggml tests/models tests/engine} ${PYTEST_ARGS:-} > "$OUT/tests-cuda.log" 2>&1
  tail -12 "$OUT/tests-cuda.log"
  grep -qE "[0-9]+ (failed|error)" "$OUT/tests-cuda.log" && { stamp "tests failed: stop"; exit 1; }
fi
# TF32=default: ggml's TF32 for the codec's F32 products from here on, as a user's process has it (not the tests')
[ "${TF32:-off}" = default ] && [ "${TF32_AB:-0}" != 1 ] && unset NVIDIA_TF32_OVERRIDE
profile() {  # $1: the JSON's name ($2: the tree, default this one; BUSY applies to this one only)
  local busy=; [ -z "${2:-}" ] && [ -n "${BUSY:-}" ] && busy="--busy $BUSY"
  (cd "${2:-.}" && timeout 240 python3 tools/request_profile.py --model "$W/gguf" --backend cuda \
    --cases "${CASES:-clone5,auto5,auto20}" --rounds "${ROUNDS:-5}" $busy --json "$OUT/$1.json" 2>&1 |
    grep -vE "UserWarning|_warn_once")
}
if [ -n "${BASE:-}" ]; then
  base_tree request_profile.py || exit 1
  stamp "request phases and codec kernels of BASE ($BASE)"
  profile request_profile_base "$BASE"
fi
if [ "${TF32_AB:-0}" = 1 ]; then
  stamp "request phases and codec kernels, TF32 off (NVIDIA_TF32_OVERRIDE=0)"
  profile request_profile_tf32_off
  unset NVIDIA_TF32_OVERRIDE
  stamp "request phases and codec kernels, ggml's default (TF32 for F32 products)"
  profile request_profile
else
  stamp "request phases and codec kernels"
  profile request_profile
fi
if [ "${SHAPES:-}" != none ] && (( $(left) > 60 )); then
  stamp "LM steps with kernel tables"
  timeout $(( $(left) - 10 )) python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda \
    --shapes "${SHAPES:-clone5,auto20}" --repeats "${STEP_REPEATS:-3}" ${QUEUED:+--queued "$QUEUED"} \
    ${MASKGIT:+--maskgit "$MASKGIT"} --profile 3 --json "$OUT/steps.jsonl" --label profile 2>&1 |
    grep -vE "UserWarning|_warn_once"
fi
if [ "${BENCH:-0}" = 1 ] && (( $(left) > 70 )) && [ -n "${REF_SITE:-}" ]; then
  stamp "side by side with the reference"
  timeout $(( $(left) - 10 )) python3 tools/bench.py --checkpoint "$CKPT" --gguf-dir "$W/gguf" --backend cuda \
    --quant bf16 --ref-python python3 --ref-pythonpath "$REF_SITE" --ref-dtype bfloat16 \
    --cases "${BENCH_CASES:-auto5,clone5,auto20}" --repeats 3 --warmup 1 --json "$OUT/bench-cuda.json" \
    --markdown "$OUT/bench-cuda.md" 2>&1 | grep -E "^\| (auto|clone)"
fi
stamp "done, $(left) s left"
