#!/usr/bin/env bash
# K-quants on a GPU backend, one call after gpu_check.sh built (or unpacked) the backends in place:
#   1. tests: every K-quant type's product and row gather through the binding, omnivoice.cpp's files (F32, Q8_0,
#      Q4_K_M) synthesizing as ours, on $BACKEND;
#   2. with $REF_DUMP (the reference's float32 dump of one generate() call on the full seed-0 checkpoint, made
#      on a CPU machine: see tools/lm_parity_full.py): full-size step-0 logits and teacher-forced choices of each
#      scheme in $QUANTS against it, with file sizes, and the LM step time of each.
# Budget: tests about 3 min; full size about 2 min per scheme to convert on 16 cores, 1 min to measure.
# CPU path checked on the development machine: BACKEND=cpu bash tools/device/kquant_gpu.sh (tests only).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/kquant_gpu.log") 2>&1
export PYTHONPATH=${PYTHONPATH:-/tmp/site} PYTHONUNBUFFERED=1
BACKEND=${BACKEND:-cuda}
QUANTS=${QUANTS:-q8_0,q6_k,q5_k_m,q4_k_m}
t0=$(date +%s); stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }

stamp "K-quant tests on $BACKEND"
OMNIVOICE_TEST_BACKEND=$BACKEND timeout ${TEST_TIMEOUT:-900} python3 -m pytest -q -p no:cacheprovider \
  tests/ggml/test_quants.py tests/interop/test_cpp_files.py --junitxml="$OUT/kquant-tests-$BACKEND.xml" 2>&1 | tail -15

if [ -z "${REF_DUMP:-}" ]; then stamp "no REF_DUMP: full-size parity skipped"; exit 0; fi
CKPT=${CKPT:-/tmp/ckpt-full}
GGUF=${GGUF_DIR:-$CKPT-gguf}
[ -f "$CKPT/model.safetensors" ] || python3 tools/make_checkpoint.py --preset full --seed 0 -o "$CKPT" > /dev/null
stamp "full-size parity of $QUANTS on $BACKEND (TF32 off)"
NVIDIA_TF32_OVERRIDE=0 timeout ${PARITY_TIMEOUT:-1500} python3 tools/lm_parity_full.py --checkpoint "$CKPT" \
  --ref "$REF_DUMP" --gguf-dir "$GGUF" --backend "$BACKEND" --quants "f32,$QUANTS" \
  --json "$OUT/lm_parity_kquant_$BACKEND.json" 2>&1 | grep -v '^{' | grep -v '^lm \[\|^codec \[' | tail -9
stamp "LM step time of $QUANTS on $BACKEND"
timeout ${STEP_TIMEOUT:-600} python3 tools/lm_step_time.py --gguf-dir "$GGUF" --quants "f32,$QUANTS" \
  --backend "$BACKEND" --shapes auto5,clone5 --json "$OUT/lm_step_kquant_$BACKEND.jsonl" 2>&1 | tail -12
stamp "done"
