#!/usr/bin/env bash
# One engine (every synthesis through omnivoice/engine, the device MaskGIT its fast path) against the tree before it,
# in one device call: tools/device/h200_checks.sh with these settings.
#   tests   the CUDA suites (tests/nn tests/ggml tests/models tests/engine tests/test_api*.py)
#   bench   tools/bench.py auto5, clone5, auto20 in BF16: this tree against BASE, alternated (ROUNDS, 1)
#   batch   tools/batch_bench.py: 64 mixed five-second requests, this tree and BASE
#   server  tools/server_load.py at 1 and 4 clients (four: the device's MaskGIT for a packed group), then --direct:
#           OmniVoice.synthesize on the one-client requests in one process after the server (`direct.server_ratio`
#           in server_load.json: the server's audio s/s at one client over the library's; target >= 0.8)
# BASE: the earlier tree's omnivoice/ and tools/, e.g. `git archive 253b2af omnivoice tools | tar -x -C
# .devcarry/base` (it runs on this tree's CUDA build). Results as h200_checks.sh leaves them: $OUT/h200_checks.log
# (every table), tests-cuda.log, results.tar.gz (every JSON and log).
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib BASE=.devcarry/base bash tools/device/h200_one_engine.sh   # carry .whl .devcarry
set -uo pipefail
: "${BASE:?BASE=the earlier tree}"
export BASE ROUNDS=${ROUNDS:-1} CLIENTS=${CLIENTS:-1,4} REQUESTS=${REQUESTS:-6} TTFB_REPEATS=${TTFB_REPEATS:-5} \
  WS_REPEATS=${WS_REPEATS:-3} LOAD_ARGS="--direct ${LOAD_ARGS:-}" PARTS=${PARTS:-tests,bench,batch,server}
exec bash tools/device/h200_checks.sh
