#!/usr/bin/env bash
# LM step times of one CUDA build under several environment settings, alternated, in one device call: for
# switches that a ggml build reads from the environment (an experiment's knobs, GGML_CUDA_DISABLE_GRAPHS, ...).
# The build: the carried archive (CUDA_LIB_ARCHIVE) or, with SRC_TAR=a ggml tree packed like
# prepare_carry.sh's ggml-src.tar.xz, a build of that tree (~4 minutes).
#
#     SRC_TAR=.devcarry/ggml-src-exp.tar.xz VARIANTS="base fa32:OV_FA_NCOLS_MAX=32" \
#         bash tools/device/env_variants.sh                      # carry .whl and the tar (or .devcarry/cudalib)
#
# VARIANTS: space-separated `label[:VAR=value[,VAR=value...]]`; each runs ROUNDS (2) times, alternated, on
# SHAPES (auto5,clone5,auto20 alone) and BATCH_SHAPES (auto5 packed 16 and 64). Results: $OUT/step_times.jsonl
# (one line per measurement, labelled) and $OUT/env_variants.log.
set -uo pipefail
t0=$(date +%s)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/env_variants.log") 2>&1
if [ -n "${SRC_TAR:-}" ]; then
  mkdir -p vendor/ggml/src && tar -C vendor/ggml/src -xJf "$SRC_TAR" || exit 1
  unset CUDA_LIB_ARCHIVE
fi
BUDGET_S=${BUDGET_S:-580} source tools/device/batch_setup.sh || exit 1
cat omnivoice/ggml/_lib/build.json; echo
steps() {  # label, env assignments (comma-separated), lm_step_time arguments
  local label=$1 envs=$2; shift 2
  stamp "$label ($envs) $*"
  env ${envs//,/ } timeout 120 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda \
    --repeats "${REPEATS:-3}" --json "$OUT/step_times.jsonl" --label "$label" "$@" 2>&1 | grep -v '^{' | grep ' ms/step'
}
for round in $(seq "${ROUNDS:-2}"); do
  for v in ${VARIANTS:?label[:VAR=value,...] ...}; do
    (( $(left) > 40 )) || { stamp "no time left"; break 2; }
    label=${v%%:*}; envs=$([[ $v == *:* ]] && echo "${v#*:}" || echo "OMNIVOICE_NOTHING=1")
    steps "$label" "$envs" --shapes "${SHAPES:-auto5,clone5,auto20}"
    steps "$label" "$envs" --shapes auto5 --batch "${BATCH_SHAPES:-16,64}"
  done
done
stamp "done"
