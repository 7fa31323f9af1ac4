#!/usr/bin/env bash
# One engine (every synthesis through omnivoice/engine, the device MaskGIT its fast path) against the tree before it,
# in one device call: tools/device/h200_checks.sh's parts with these settings, then BASE's batch_bench.
#   tests   the CUDA suites (tests/nn tests/ggml tests/models tests/engine tests/test_api*.py)
#   bench   tools/bench.py auto5, clone5, auto20 in BF16: this tree against BASE, alternated (ROUNDS, 1)
#   batch   tools/batch_bench.py: 64 mixed five-second requests, batched against one by one (this tree)
#   server  tools/server_load.py at 1 and 4 clients (four: the device's MaskGIT for a packed group), then --direct:
#           OmniVoice.synthesize on the one-client requests in one process after the server (`direct.server_ratio`
#           in server_load.json: the server's audio s/s at one client over the library's; target >= 0.8)
#   base    BASE's tools/batch_bench.py on the same model: 64 mixed, batched only (batch-base.json)
# BASE: the earlier tree's omnivoice/ and tools/, e.g. `git archive 253b2af omnivoice tools | tar -x -C
# .devcarry/base` (it runs on this tree's CUDA build). Results as h200_checks.sh leaves them: $OUT/h200_checks.log
# (every table), tests-cuda.log, results.tar.gz (every JSON and log, batch-base.json included).
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib BASE=.devcarry/base bash tools/device/h200_one_engine.sh   # carry .whl .devcarry
set -uo pipefail
: "${BASE:?BASE=the earlier tree}"
t0=$(date +%s); TOTAL_S=${TOTAL_S:-575}; BASE_BATCH_S=${BASE_BATCH_S:-80}
export BASE ROUNDS=${ROUNDS:-1} CLIENTS=${CLIENTS:-1,4} REQUESTS=${REQUESTS:-6} TTFB_REPEATS=${TTFB_REPEATS:-5} \
  WS_REPEATS=${WS_REPEATS:-3} LOAD_ARGS="--direct ${LOAD_ARGS:-}" PARTS=${PARTS:-tests,bench,batch,server} \
  BUDGET_S=$(( TOTAL_S - BASE_BATCH_S ))
bash tools/device/h200_checks.sh
OUT=${OUT:-$PWD/gpu-out}; W=${BENCH_WORK:-/tmp/ovchecks}; BACKEND=${BACKEND:-cuda}
QUANT=bf16; [ "$BACKEND" = cuda ] || QUANT=${QUANT:-f32}
[ "$BACKEND" = cuda ] && export PYTHONPATH=$W/site${PYTHONPATH:+:$PYTHONPATH}
cp -r omnivoice/ggml/_lib omnivoice/ggml/_cdef.h omnivoice/ggml/_consts.json "$BASE/omnivoice/ggml/"
left=$(( TOTAL_S - ($(date +%s) - t0) ))
if (( left < 60 )); then
  echo "== base batch_bench skipped: ${left} s left" | tee -a "$OUT/h200_checks.log"
  exit 0
fi
echo "== base batch_bench ${BATCH_SIZES:-64} ${MIX:-mixed}, ${left} s left" | tee -a "$OUT/h200_checks.log"
(cd "$BASE" && PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} timeout $(( left - 5 )) python3 tools/batch_bench.py \
  --model "$W/gguf/omnivoice-base-${QUANT^^}.gguf" --codec "$W/gguf/omnivoice-tokenizer-F32.gguf" \
  --backend "$BACKEND" --steps 32 --sizes "${BATCH_SIZES:-64}" --mix "${MIX:-mixed}" --no-one-by-one-above 0 \
  --json "$W/res/batch-base.json" 2>&1) | grep -E "^\|" | tee -a "$OUT/h200_checks.log"
tar -czf "$OUT/results.tar.gz" -C "$W" res
