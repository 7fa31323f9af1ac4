#!/usr/bin/env bash
# ggml patch 0007 (flash attention for short sequences, fattn.cu) on the H200, in one device call: the CUDA
# build with the patch carried in (CUDA_LIB_ARCHIVE), then
#   1. the CUDA tests (the ops against numpy, flash attention at head size 128 included; the LM and the engine);
#      a failure stops the script,
#   2. full-size step-0 logits of three arms, alone and 16 packed (tools/lm_logits_ab.py): off (ggml's kernels,
#      GGML_CUDA_DISABLE_FATTN_SHORT=1), on (the kernel per segment) and one (the kernel over one call with a
#      block-diagonal mask, the one_attention graph variant), each against off,
#   3. LM step times of the three arms, two alternated rounds: auto5, clone5, auto20 (with BATCH=1 also 16 / 64
#      packed auto5 prompts, which the kernel leaves to ggml's) (tools/lm_step_time.py, BF16; round 1 profiled),
#   4. tools/bench.py side by side with the reference in bfloat16 (auto5, clone5, auto20), arm BENCH_ARM.
# ARMS (default "off on one", off first) picks the arms; OFF (default GGML_CUDA_DISABLE_FATTN_SHORT=1) is the
# off arm's environment, so that the script A/Bs a later patch's switch too (0009:
# OFF=GGML_CUDA_DISABLE_FATTN_CONCAT=1); ARM_<name> is another arm's environment (0013: ARMS="off scratch on"
# OFF=OMNIVOICE_LM_VARIANT=kv_rows,fused_casts ARM_scratch=OMNIVOICE_LM_VARIANT=kv_rows,fused_casts,cast_scratch);
# TESTS replaces step 1's test paths (PYTEST_ARGS adds to them; TESTS=none skips step 1), LOGIT_SHAPES step 2's,
# SHAPES step 3's and BENCH_CASES step 4's; BENCH=0 skips step 4; REQUEST_PROFILE=1 adds tools/request_profile.py
# (a request's phases, the codec's kernels) before it; TF32=default runs step 4 with ggml's TF32 (a user's setting).
# Results in $OUT: h200_fattn_short.log, tests-cuda.log, logits_ab.md, steps.jsonl, bench-cuda.json/.md
# (request_profile.json).
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib7 bash tools/device/h200_fattn_short.sh   # carry .whl .devcarry/cudalib7
set -uo pipefail
LOG=h200_fattn_short.log; BUDGET_S=${BUDGET_S:-570}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
rm -f "$OUT/checkpoint.log"  # (a device call brings back eight files)
OFF=${OFF:-GGML_CUDA_DISABLE_FATTN_SHORT=1}

if [ "${TESTS:-}" != none ]; then
  stamp "tests on CUDA"
  OMNIVOICE_TEST_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -rs \
    ${TESTS:-tests/nn/test_ops.py tests/ggml/test_binding.py tests/models tests/engine} ${PYTEST_ARGS:-} \
    > "$OUT/tests-cuda.log" 2>&1
  tail -12 "$OUT/tests-cuda.log"
  grep -qE "[0-9]+ (failed|error)" "$OUT/tests-cuda.log" && { stamp "tests failed: stop"; exit 1; }
fi

# arms: off (ggml's kernels), on (the kernel; per-segment calls and a concat), one (the kernel over one call
# with a block-diagonal mask: the one_attention graph variant)
ONE="OMNIVOICE_LM_VARIANT=kv_rows,fused_casts,one_attention"
declare -A ENVS=([off]="$OFF" [on]="" [one]="$ONE")
ARMS=${ARMS:-off on one}
for arm in $ARMS; do  # another arm's environment: ARM_<name>
  v=ARM_$arm; [ -n "${!v:-}" ] && ENVS[$arm]=${!v}
done
stamp "logits of each arm against off"
for arm in $ARMS; do
  env ${ENVS[$arm]} python3 tools/lm_logits_ab.py dump --gguf "$MODEL" --backend cuda --out /tmp/fattn-$arm.npz \
    --shapes "${LOGIT_SHAPES:-auto5,clone5,auto20}" |
    tail -1
done
for arm in ${ARMS#off }; do
  echo "$arm against off:"; python3 tools/lm_logits_ab.py compare /tmp/fattn-off.npz /tmp/fattn-$arm.npz
done | tee "$OUT/logits_ab.md"

for r in 1 2; do
  for arm in $ARMS; do
    (( $(left) < 150 )) && break 2
    prof=$([ "$r" = 1 ] && echo "${PROFILE:-1}" || echo 0)
    stamp "$arm, round $r"
    env ${ENVS[$arm]} timeout 120 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda \
      --repeats 5 --shapes "${SHAPES:-auto5,clone5,auto20}" --profile "$prof" --json "$OUT/steps.jsonl" --label "$arm-$r" 2>&1 |
      grep -E "ms/step|same shape|profile"
    [ "${BATCH:-0}" = 1 ] && env ${ENVS[$arm]} timeout 120 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" \
      --quants bf16 --backend cuda --repeats 3 --shapes auto5 --batch 16,64 --profile "$prof" \
      --json "$OUT/steps.jsonl" --label "$arm-$r" 2>&1 | grep -E "ms/step"
  done
done

if [ "${REQUEST_PROFILE:-0}" = 1 ] && (( $(left) > 100 )); then
  stamp "a request's phases and the codec's kernels (arm BENCH_ARM)"
  env ${ENVS[${BENCH_ARM:-one}]} timeout 120 python3 tools/request_profile.py --model "$W/gguf" --backend cuda \
    --json "$OUT/request_profile.json" 2>&1 | grep -vE "^ {6}|UserWarning|_warn_once"
fi
if [ "${BENCH:-1}" = 1 ] && (( $(left) > 70 )) && [ -n "${REF_SITE:-}" ]; then
  # TF32=default: ggml's TF32 for the codec's F32 products, as a user's process has it (batch_setup.sh's
  # NVIDIA_TF32_OVERRIDE=0 is the parity runs' setting)
  [ "${TF32:-off}" = default ] && unset NVIDIA_TF32_OVERRIDE
  stamp "side by side with the reference (BENCH_ARM, default one; TF32 ${TF32:-off})"
  env ${ENVS[${BENCH_ARM:-one}]} timeout $(( $(left) - 10 )) python3 tools/bench.py --checkpoint "$CKPT" --gguf-dir "$W/gguf" --backend cuda \
    --quant bf16 --ref-python python3 --ref-pythonpath "$REF_SITE" --ref-dtype bfloat16 \
    --cases "${BENCH_CASES:-auto5,clone5,auto20}" --repeats 3 --warmup 1 --json "$OUT/bench-cuda.json" \
    --markdown "$OUT/bench-cuda.md" 2>&1 | grep -E "^\| (auto|clone)"
fi
stamp "done, $(left) s left"
