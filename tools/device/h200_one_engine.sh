#!/usr/bin/env bash
# One engine (every synthesis through omnivoice/engine, the device MaskGIT its fast path) against the tree before
# it, in one device call on one CUDA build, BF16 on the full-size random checkpoint:
#   1. tools/bench.py, ours only: auto5, clone5, auto20, base then new (each tree's own tool),
#   2. tools/batch_bench.py: 64 mixed five-second requests, batched only, base then new,
#   3. tools/server_load.py at one client: new with --direct (the server against OmniVoice.synthesize on the same
#      requests, in one process after the server: `direct.server_ratio`), then base's server at one client,
#   4. the CUDA tests of this tree (tests/nn tests/ggml tests/models tests/engine tests/test_api*.py) in the time
#      left; if they do not finish, run the script again on the warm machine with SKIP="bench batch server".
# BASE: the earlier tree's omnivoice/ and tools/ (`git archive 253b2af omnivoice tools | tar -x -C ab-base`), run
# on this tree's CUDA build. Results in $OUT: h200_one_engine.log, bench-{base,new}.json,
# batch-{base,new}.json, server-{new,base}.json, tests-cuda.log.
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib BASE=ab-base bash tools/device/h200_one_engine.sh
#         # carry .whl (h200_server.sh's wheels too) .devcarry/cudalib .devcarry/ggml-src.tar.xz ab-base
set -uo pipefail
LOG=h200_one_engine.log; BUDGET_S=${BUDGET_S:-585}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
rm -f "$OUT/checkpoint.log" "$OUT/ops-build.log"
: "${BASE:?BASE=the earlier tree}"
base_tree bench.py || exit 1
skip() { [[ " ${SKIP:-} " == *" $1 "* ]]; }
python3 -c "import fastapi, uvicorn, multipart, prometheus_client, httpx" 2>/dev/null ||
  python3 -m pip install -q --no-index --find-links .whl --no-compile --target "$W/site" \
    fastapi uvicorn python-multipart prometheus-client httpx || echo "no server wheels in .whl: no server runs"
CODEC=$W/gguf/omnivoice-tokenizer-F32.gguf

skip bench || for arm in base new; do
  tree=.; [ "$arm" = base ] && tree=$BASE
  stamp "bench.py $arm"
  (cd "$tree" && timeout 150 python3 tools/bench.py --checkpoint "$CKPT" --gguf-dir "$W/gguf" --backend cuda \
    --quant bf16 --no-reference --cases auto5,clone5,auto20 --repeats 5 --warmup 1 --pause 0 \
    --json "$OUT/bench-$arm.json" 2>&1 | grep -E "^\| (auto|clone)")
done

skip batch || for arm in base new; do
  tree=.; [ "$arm" = base ] && tree=$BASE
  (( $(left) < 150 )) && { stamp "skip batch $arm: $(left) s left"; continue; }
  stamp "batch_bench 64 mixed $arm"
  (cd "$tree" && timeout 120 python3 tools/batch_bench.py --model "$MODEL" --backend cuda --steps 32 --sizes 64 \
    --mix mixed --no-one-by-one-above 0 --json "$OUT/batch-$arm.json" 2>&1 | grep -E "^\|")
done

skip server || for arm in new base; do
  tree=.; direct=--direct; [ "$arm" = base ] && { tree=$BASE; direct=; }
  (( $(left) < 120 )) && { stamp "skip server $arm: $(left) s left"; continue; }
  stamp "server at one client, $arm"
  (cd "$tree" && timeout 150 python3 tools/server_load.py --backend cuda --model "$MODEL" --codec "$CODEC" \
    --clients 1 --requests 8 --ttfb-repeats 3 $direct --json "$OUT/server-$arm.json" \
    --server-log "/tmp/server-$arm.log" 2>&1 | grep -E "^\| 1 |first audio|in process")
done

skip tests || {
  stamp "tests on CUDA, $(left) s left"
  OMNIVOICE_TEST_BACKEND=cuda timeout $(( $(left) - 5 )) python3 -m pytest -q -p no:cacheprovider -rs tests/nn \
    tests/ggml tests/models tests/engine tests/test_api*.py ${PYTEST_ARGS:-} > "$OUT/tests-cuda.log" 2>&1
  echo "pytest exit $?"; tail -12 "$OUT/tests-cuda.log"
}
stamp "done, $(left) s left"
