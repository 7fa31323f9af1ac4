#!/usr/bin/env bash
# A patched ggml against the unpatched one on the H200, in one device call (~8 minutes on a bare machine): the
# CUDA build of this tree (vendor/ggml/patches applied by build_ext.py fetch), archived into $OUT/cudalib, then
# the CUDA tests and the full-size F32 and BF16 parity runs on it, then LM step times and kernel profiles
# alternately on the previous build (CUDA_LIB_ARCHIVE, the archive of an earlier build) and this one: one
# prompt (auto5, clone5, auto20) and packed batches of 16 and 64 auto5 prompts, the batches once per graph
# variant of BATCH_VARIANTS (default: the runtime's own; e.g. "default qk_rope,kv_rows").
#
#     ARCHIVE=1 CUDA_LIB_ARCHIVE_BEFORE=.devcarry/cudalib bash tools/device/h200_patch_ab.sh
#         # carry .whl .devcarry/cudalib .devcarry/ggml-src.tar.xz (made from the patched tree:
#         # tools/device/prepare_carry.sh) .devcarry/ref_auto5.npz
# Results: $OUT/results.tgz (step_times.jsonl with labels before/after, logs, JUnit, parity JSON).
set -uo pipefail
t0=$(date +%s)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
R=/tmp/ab; mkdir -p $R
exec > >(tee -a "$R/h200_patch_ab.log") 2>&1
BEFORE=/tmp/lib-before; mkdir -p $BEFORE
cat "${CUDA_LIB_ARCHIVE_BEFORE:?the archive of the build to compare against}"/*.tar.xz.* | xz -d |
  tar -C $BEFORE -xf - || exit 1
cat $BEFORE/_lib/build.json; echo
BUDGET_S=${BUDGET_S:-580} source tools/device/batch_setup.sh || exit 1   # builds this tree (no CUDA_LIB_ARCHIVE)
cat omnivoice/ggml/_lib/build.json; echo
save() { tar -czf "$OUT/results.tgz" -C /tmp ab; }
stamp "tests on CUDA, $(left) s left"
OMNIVOICE_TEST_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider -rs \
  --junitxml $R/tests-cuda.xml tests/nn tests/ggml tests/models tests/parity tests/test_api.py \
  tests/engine/test_batch_equals_solo.py 2>&1 | tail -15
save
for q in f32 bf16; do
  stamp "parity $q"
  env $([ $q = f32 ] && echo OMNIVOICE_EXACT_F32=1) timeout 120 python3 tools/lm_parity_full.py --checkpoint "$CKPT" \
    --gguf-dir "$W/gguf" --ref .devcarry/ref_auto5.npz --backend cuda --flash --quants $q \
    --json $R/parity_$q.json 2>&1 | grep -v '^{' | tail -3
done
save
steps() {  # label, lib dir, extra args
  local label=$1 dir=$2; shift 2
  stamp "step times: $label"
  OMNIVOICE_GGML_LIB_DIR=$dir timeout 150 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 \
    --backend cuda --repeats 3 --json $R/step_times.jsonl --label "$label" "$@" 2>&1 | grep -v '^{' | tail -40
}
round=0
for label in before after before after; do  # alternated, so that a drift of the machine shows
  dir=$([ $label = before ] && echo $BEFORE/_lib || echo $PWD/omnivoice/ggml/_lib)
  (( $(left) > 60 )) || { stamp "no time left for $label"; break; }
  prof=$(( round < 2 ? ${PROFILE:-2} : 0 )); round=$(( round + 1 ))
  steps $label $dir --shapes auto5,clone5,auto20 --profile $prof
  for v in ${BATCH_VARIANTS:-default}; do
    steps $label $dir --shapes auto5 --batch 16,64 --profile $prof $([ $v = default ] || echo --variant $v)
  done
  save
done
stamp "done"; save
