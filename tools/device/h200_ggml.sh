#!/usr/bin/env bash
# Issue 18 on an H200 in one device call: ggml 0.25.3 built for CUDA (sm_90) and Vulkan, the test suite on both
# (Vulkan in float32), LM step times with the graph variants and kernel profiles, and full-size LM parity
# against the reference's dump (Vulkan F32 with and without its float32 shaders, CUDA F32). Every step checks
# the time left (BUDGET_S, default 530 s from the start) and is skipped, saying so, when it would not fit.
#
# Prepare the carried folders once on the CPU machine (bash tools/device/prepare_carry.sh), then
#     device run  carry=[".whl", ".gl", ".vk", ".devcarry"]  timeout_s=600  command="bash tools/device/h200_ggml.sh"
# PART=cuda or PART=vulkan builds and runs one backend only (a second call for what a first one skipped;
# a Vulkan-only build takes about 2 minutes, a CUDA one about 5). ARCHIVE=1 also leaves the CUDA build in
# $OUT/cudalib (*.tar.xz.* parts, lm_profile.sh's CUDA_LIB_ARCHIVE format) for later calls.
# $OUT gets h200_ggml.log (this log) and results.tar.gz (every log, JSON line and JUnit file, refreshed after
# each step, so a call cut short still returns what it measured). Knobs: REPEATS (3), SHAPES
# (auto5,clone5,auto20), VARIANTS, TESTS (the pytest paths). A dry run of the CUDA half on a CPU machine, with
# the libraries already built and the checkpoint, GGUFs and carried folders in place:
#     PART=cuda CUDA_BE=cpu SKIP_BUILD=1 SKIP_DEPS=1 BENCH_WORK=/tmp/ovggml bash tools/device/h200_ggml.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
W=${BENCH_WORK:-/tmp/ovggml}; R=$W/res; mkdir -p "$R"
exec > >(tee "$OUT/h200_ggml.log" "$R/h200_ggml.log") 2>&1
start=$(date +%s); BUDGET_S=${BUDGET_S:-530}; PART=${PART:-all}
left() { echo $(( BUDGET_S - ($(date +%s) - start) )); }
stamp() { tar -czf "$OUT/results.tar.gz" -C "$W" res 2>/dev/null; echo "== $(( $(date +%s) - start ))s, $(left)s left: $*"; }
fits() { (( $(left) >= $1 )) && return 0; echo "== SKIPPED (needs ~$1 s, $(left) s left): $2"; return 1; }
cuda() { [ "$PART" != vulkan ]; }
vulkan() { [ "$PART" != cuda ]; }
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVIDIA_TF32_OVERRIDE=0  # F32 products in F32 on CUDA, as in the recorded 0.20.2 figures
REPEATS=${REPEATS:-3}; SHAPES=${SHAPES:-auto5,clone5,auto20}; CUDA_BE=${CUDA_BE:-cuda}
TESTS=${TESTS:-tests/nn tests/ggml tests/models tests/parity tests/test_api.py}
VARIANTS=${VARIANTS:-qk_rope kv_rows one_attention typed_inputs qk_rope,kv_rows,one_attention}

stamp "python deps, ggml source ($PART)"
if [ "${SKIP_DEPS:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" .whl/*.whl || exit 1
  export PYTHONPATH=$W/site
fi
[ -f vendor/ggml/src/ggml/CMakeLists.txt ] || { mkdir -p vendor/ggml/src &&
  tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; } || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
vulkan && source tools/device/vulkan_env.sh > /dev/null

# The full seed-0 checkpoint needs no ggml: it is made beside the compile (~40 s).
[ -f "$W/ckpt/audio_tokenizer/model.safetensors" ] ||
  python3 tools/make_checkpoint.py --preset full --seed 0 -o "$W/ckpt" > "$R/checkpoint.log" 2>&1 &
ckpt_pid=$!

vk_pid=
if [ "$PART" = all ]; then
  # The Vulkan module alone, beside the CUDA build; it joins _lib as one more backend module.
  ( cmake -S . -B build/vk -G Ninja -DCMAKE_BUILD_TYPE=Release $VKARGS > "$R/build-vulkan.log" 2>&1 &&
    cmake --build build/vk --target ggml-vulkan >> "$R/build-vulkan.log" 2>&1 ) &
  vk_pid=$!
fi
case $PART in
  vulkan) args=$VKARGS ;;
  *) args="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" ;;
esac
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  stamp "build ggml ($args)"
  CMAKE_ARGS="$args" python3 build_ext.py all > "$R/build.log" 2>&1 || { tail -40 "$R/build.log"; stamp "build failed"; exit 1; }
fi
if [ -n "$vk_pid" ]; then
  stamp "waiting for the Vulkan module"
  wait $vk_pid && cp build/vk/lib/libggml-vulkan.so omnivoice/ggml/_lib/ || { echo "Vulkan build failed:"; tail -30 "$R/build-vulkan.log"; }
fi
cat omnivoice/ggml/_lib/build.json; echo; ls -la omnivoice/ggml/_lib
python3 -m omnivoice.tts --list-devices | tee "$R/devices.txt"
if [ "${ARCHIVE:-0}" = 1 ] && cuda; then
  stamp "archive the CUDA build into \$OUT/cudalib"
  mkdir -p "$OUT/cudalib"; mkdir -p "$W/lib" && cp -a omnivoice/ggml/_lib omnivoice/ggml/_cdef.h omnivoice/ggml/_consts.json "$W/lib/"
  rm -f "$W/lib/_lib/libggml-vulkan.so"
  tar -C "$W/lib" -cf - _lib _cdef.h _consts.json | xz -T0 -6 | split -b 15M - "$OUT/cudalib/ggml_cuda_lib.tar.xz."
  du -sh "$OUT/cudalib"
fi

stamp "conversions (bf16, f32) in the background"
( wait $ckpt_pid 2>/dev/null; python3 -c "import sys; sys.path.insert(0, 'tools'); import bench, pathlib;
bench.convert(pathlib.Path('$W/ckpt'), pathlib.Path('$W/gguf'), ['bf16', 'f32'])" >> "$R/checkpoint.log" 2>&1 ) &
conv_pid=$!

tests() {  # backend: the graph suites (conftest: OMNIVOICE_EXACT_F32=1 and NVIDIA_TF32_OVERRIDE=0)
  OMNIVOICE_TEST_BACKEND=$1 timeout $(( $(left) - 10 )) python3 -m pytest -q -p no:cacheprovider \
    $TESTS --junitxml="$R/tests-$1.xml" 2>&1 | tail -15
}
step() {  # backend label [lm_step_time arguments]
  local be=$1 label=$2; shift 2
  timeout $(( $(left) - 5 )) python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --backend "$be" \
    --repeats "$REPEATS" --shapes "$SHAPES" --json "$R/step_times.jsonl" --label "$label" "$@"
}
parity() {  # backend label EXACT: full-size LM parity of F32 weights, flash attention where the backend has it
  OMNIVOICE_EXACT_F32=$3 timeout $(( $(left) - 5 )) python3 tools/lm_parity_full.py \
    --checkpoint "$W/ckpt" --gguf-dir "$W/gguf" --ref .devcarry/ref_auto5.npz --backend "$1" --flash \
    --quants f32 --json "$R/lm_parity_$2.json" 2>&1 | grep -v '^{' | tail -4
}
have_vulkan() { [ -f omnivoice/ggml/_lib/libggml-vulkan.so ] || { echo "== no Vulkan module: skipped"; return 1; }; }

if cuda && fits 60 "CUDA tests"; then stamp "tests on $CUDA_BE"; tests $CUDA_BE; fi
if vulkan && have_vulkan && fits 90 "Vulkan tests"; then stamp "tests on Vulkan, float32 shaders"; tests vulkan; fi
stamp "waiting for the conversions"
wait $conv_pid || tail -20 "$R/checkpoint.log"
if cuda; then
  if fits 40 "CUDA step times"; then
    stamp "CUDA step times and kernel profile, default graph"; step $CUDA_BE "default" --quants bf16,f32 --profile 3
  fi
  for v in $VARIANTS; do
    fits 12 "variant $v" || break
    stamp "CUDA variant $v"; step $CUDA_BE "variant $v" --quants bf16 --variant "$v"
  done
  if fits 15 "profile of three variants"; then
    stamp "CUDA kernel profile, qk_rope,kv_rows,one_attention"
    SHAPES=clone5 step $CUDA_BE "profile qk_rope,kv_rows,one_attention" --quants bf16 --variant qk_rope,kv_rows,one_attention --profile 3
  fi
fi
if vulkan && have_vulkan; then
  fits 50 "Vulkan parity, float32 shaders" && { stamp "Vulkan F32 parity, float32 shaders"; parity vulkan vulkan_f32 1; }
  fits 50 "Vulkan parity, default shaders" && { stamp "Vulkan F32 parity, default shaders (before)"; parity vulkan vulkan_default 0; }
  if fits 40 "Vulkan step times"; then
    stamp "Vulkan step times: BF16 default shaders, F32 float32 shaders"
    OMNIVOICE_EXACT_F32=0 step vulkan "vulkan default shaders" --quants bf16
    OMNIVOICE_EXACT_F32=1 step vulkan "vulkan float32 shaders" --quants f32
  fi
fi
if cuda && fits 45 "CUDA parity"; then stamp "CUDA F32 parity (TF32 off)"; parity $CUDA_BE cuda_f32 1; fi
stamp "done"
