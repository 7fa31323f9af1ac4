#!/usr/bin/env bash
# Patch 0005 (RMSNorm x weight and SwiGLU written straight as the BF16 input of the next product) on the H200, in
# one device call: the CUDA build with the patch carried in (CUDA_LIB_ARCHIVE), the LM step times of the graph
# whose products convert their inputs themselves (`kv_rows`, where the patch has nothing to fuse: the build
# before it) against the graph with the fusable casts as nodes (`kv_rows,fused_casts`; VARIANTS overrides),
# alternated, two rounds: auto5, clone5, auto20 and 16 / 64 packed auto5 prompts (tools/lm_step_time.py, BF16);
# then the variant, LM and engine tests on CUDA. Results in $OUT: steps.jsonl, fused_cast_ab.log, tests-cuda.log.
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/fused_cast_ab.sh      # carry .whl .devcarry/cudalib
set -uo pipefail
t0=$(date +%s)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/fused_cast_ab.log") 2>&1
source tools/device/batch_setup.sh > "$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }
cat omnivoice/ggml/_lib/build.json; echo
# AB_ENV="NAME=1" compares the runtime's default graph with that environment setting (e.g. one fusion switched
# off: GGML_CUDA_DISABLE_ADD_RMS_NORM_FUSION=1, patch 0006) against without it, instead of two variants.
if [ -n "${AB_ENV:-}" ]; then arms=("env:$AB_ENV" "default"); else arms=(${VARIANTS:-kv_rows kv_rows,fused_casts}); fi
for r in 1 2; do
  for v in "${arms[@]}"; do
    prof=$([ "$r" = 1 ] && echo "${PROFILE:-2}" || echo 0)
    stamp "$v, round $r"
    envs=(); args=()
    case "$v" in env:*) envs=("${v#env:}");; default) ;; *) args=(--variant "$v");; esac
    env "${envs[@]}" timeout 150 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda \
      --repeats 5 --shapes auto5,clone5,auto20 "${args[@]}" --profile "$prof" --json "$OUT/steps.jsonl" \
      --label "$v-$r" 2>&1 | grep -v '^{' | tail -30
    env "${envs[@]}" timeout 150 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda \
      --repeats 3 --shapes auto5 --batch 16,64 "${args[@]}" --profile "$prof" --json "$OUT/steps.jsonl" \
      --label "$v-$r" 2>&1 | grep -v '^{' | tail -30
  done
done
stamp "tests on CUDA, $(left) s left"
OMNIVOICE_TEST_BACKEND=cuda timeout $(( $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider -rs \
  tests/models/test_lm_variants.py tests/models/test_lm.py tests/engine > "$OUT/tests-cuda.log" 2>&1
tail -12 "$OUT/tests-cuda.log"
stamp "done"
