#!/usr/bin/env bash
# Issue 17's K-quants on an H200 in one device call: the CUDA build of ggml (reused when an earlier call left it
# in omnivoice/ggml/_lib, unpacked from CUDA_LIB_ARCHIVE, else built: ~300 s), then
#   1. tests: every K-quant type's product and row gather through the binding, omnivoice.cpp's files (F32,
#      BF16, Q8_0, Q4_K_M) synthesizing as ours, on CUDA;
#   2. the full seed-0 checkpoint converted (F32) and requantized (python -m omnivoice.quantize) to $QUANTS;
#   3. full-size step-0 logits and teacher-forced choices of each scheme against the PyTorch reference's float32
#      dump (.devcarry/ref_auto5.npz, see prepare_carry.sh), with file sizes (TF32 off);
#   4. the LM step time of each scheme at auto5 / clone5.
# Every step checks the time left (BUDGET_S, default 560 s from the start) and is skipped, saying so, when it
# would not fit; $OUT gets kquant_gpu.log and results.tar.gz (refreshed after each step).
#
# Prepare the carried folders once on the CPU machine (bash tools/device/prepare_carry.sh), then
#     device run  carry=[".whl", ".devcarry"]  timeout_s=600  command="bash tools/device/kquant_gpu.sh"
# With the CUDA build already in place (an earlier h200_ggml.sh PART=cuda or kquant call on the same warm
# machine) the call takes about 6 minutes; with a fresh build, steps 3-4 may not fit: call again.
# CPU dry run of the whole script (no build; the checkpoint and GGUFs are made if absent, ~10 min on 2 cores):
#     BACKEND=cpu SKIP_BUILD=1 SKIP_DEPS=1 BENCH_WORK=/tmp/ovkq QUANTS=q4_k_m bash tools/device/kquant_gpu.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
W=${BENCH_WORK:-/tmp/ovkq}; R=$W/res; mkdir -p "$R"
exec > >(tee "$OUT/kquant_gpu.log" "$R/kquant_gpu.log") 2>&1
start=$(date +%s); BUDGET_S=${BUDGET_S:-560}
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }
stamp() { tar -czf "$OUT/results.tar.gz" -C "$W" res 2>/dev/null; echo "== $(( $(date +%s) - start ))s, $(left)s left: $*"; }
fits() { (( $(left) >= $1 )) && return 0; echo "== SKIPPED (needs ~$1 s, $(left) s left): $2"; return 1; }
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) NVIDIA_TF32_OVERRIDE=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BACKEND=${BACKEND:-cuda}; QUANTS=${QUANTS:-q8_0,q6_k,q5_k_m,q4_k_m}; REF_DUMP=${REF_DUMP:-.devcarry/ref_auto5.npz}
CKPT=${CKPT:-$W/ckpt}; GGUF=$W/gguf

stamp "python deps, ggml"
if [ "${SKIP_DEPS:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" .whl/*.whl || exit 1
  export PYTHONPATH=$W/site
fi
[ -f "$CKPT/audio_tokenizer/model.safetensors" ] ||
  python3 tools/make_checkpoint.py --preset full --seed 0 -o "$CKPT" > "$R/checkpoint.log" 2>&1 &
ckpt_pid=$!
if [ "${SKIP_BUILD:-0}" = 1 ] || [ -f omnivoice/ggml/_lib/libggml-cuda.so ]; then
  stamp "ggml build already here"
elif [ -n "${CUDA_LIB_ARCHIVE:-}" ]; then
  stamp "unpack the carried CUDA build"; cat "$CUDA_LIB_ARCHIVE"/*.tar.xz.* | xz -d | tar -C omnivoice/ggml -xf - || exit 1
else
  [ -f vendor/ggml/src/ggml/CMakeLists.txt ] || { mkdir -p vendor/ggml/src &&
    tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; } || exit 1
  stamp "build ggml (CUDA sm_90)"
  CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" python3 build_ext.py all > "$R/build.log" 2>&1 ||
    { tail -40 "$R/build.log"; stamp "build failed"; exit 1; }
fi

if fits 150 "K-quant tests"; then
  stamp "K-quant tests on $BACKEND"
  OMNIVOICE_TEST_BACKEND=$BACKEND timeout $(( $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider \
    tests/ggml/test_quants.py tests/interop/test_cpp_files.py --junitxml="$R/kquant-tests-$BACKEND.xml" 2>&1 | tail -15
fi

stamp "full checkpoint, F32 conversion, requantized to $QUANTS"
wait $ckpt_pid 2>/dev/null
[ -f "$GGUF/omnivoice-base-F32.gguf" ] || python3 -m omnivoice.convert "$CKPT" -o "$GGUF" --quant f32 -q || exit 1
for q in ${QUANTS//,/ }; do
  f=$GGUF/omnivoice-base-${q^^}.gguf
  [ -f "$f" ] || { fits 60 "quantize $q" && python3 -m omnivoice.quantize -q --type "$q" "$GGUF/omnivoice-base-F32.gguf" "$f"; }
done
done_quants=f32; for q in ${QUANTS//,/ }; do [ -f "$GGUF/omnivoice-base-${q^^}.gguf" ] && done_quants+=",$q"; done
ls -la "$GGUF/"

if [ -f "$REF_DUMP" ] && fits 90 "full-size parity"; then
  stamp "full-size parity of $done_quants on $BACKEND (TF32 off)"
  timeout $(( $(left) - 5 )) python3 tools/lm_parity_full.py --checkpoint "$CKPT" --ref "$REF_DUMP" \
    --gguf-dir "$GGUF" --backend "$BACKEND" --quants "$done_quants" --json "$R/lm_parity_kquant_$BACKEND.json" \
    2>&1 | grep -v '^{' | tail -9
fi
if fits 40 "LM step times"; then
  stamp "LM step time of $done_quants on $BACKEND"
  timeout $(( $(left) - 5 )) python3 tools/lm_step_time.py --gguf-dir "$GGUF" --quants "$done_quants" \
    --backend "$BACKEND" --shapes auto5,clone5 --json "$R/lm_step_kquant_$BACKEND.jsonl" 2>&1 | tail -12
fi
stamp "done"
