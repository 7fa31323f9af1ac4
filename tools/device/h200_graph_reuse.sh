#!/usr/bin/env bash
# LM graphs kept across requests (LanguageModel.max_graphs) on the H200, in one device call (~8 minutes on a
# bare machine): the carried CUDA build unpacked, the full random checkpoint made and converted to BF16
# (tools/device/batch_setup.sh), then
#   1. the CUDA tests (TESTS, default: the binding, the LM models and the engine),
#   2. tools/graph_reuse_ab.py: kept against built graphs in one process (auto5, clone5, auto20, a new shape
#      every round, the engine's first audio), alternating, tokens compared,
#   3. tools/lm_step_time.py: a step of each shape, a new session's build and first steps, and the same shape
#      again (a kept graph),
#   4. tools/bench.py side by side with the reference in bfloat16 (auto5, clone5, auto20; 3 repeats after a
#      warm-up: the repeats reuse the warm-up's graphs).
# STAGES (default "tests ab steps bench") picks among the four. Results in $OUT (few files: a device call
# brings back eight): tests-cuda.log, graph_reuse_ab.json, steps.jsonl, bench-cuda.json, bench-cuda.md,
# h200_graph_reuse.log.
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200_graph_reuse.sh    # carry .whl .devcarry
#
# On the CPU (to try it): BACKEND=cpu CKPT=/tmp/ckpt-tiny bash tools/device/h200_graph_reuse.sh
set -uo pipefail
LOG=h200_graph_reuse.log; BUDGET_S=${BUDGET_S:-570}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
GGUF=$W/gguf

STAGES=" ${STAGES:-tests ab steps bench} "
if [[ $STAGES == *" tests "* ]] && (( $(left) > 120 )); then
  stamp "tests on $BACKEND"
  OMNIVOICE_TEST_BACKEND=$BACKEND timeout $(( $(left) - 240 )) python3 -m pytest -q -p no:cacheprovider \
    ${TESTS:-tests/ggml/test_binding.py tests/models tests/engine} > "$OUT/tests-$BACKEND.log" 2>&1
  tail -12 "$OUT/tests-$BACKEND.log"
fi
if [[ $STAGES == *" ab "* ]] && (( $(left) > 90 )); then
  stamp "graph_reuse_ab"
  timeout $(( $(left) - 60 )) python3 tools/graph_reuse_ab.py --model "$GGUF" --backend "$BACKEND" \
    --rounds "${ROUNDS:-5}" --json "$OUT/graph_reuse_ab.json" 2>&1 | grep -v "^ggml_"
fi
if [[ $STAGES == *" steps "* ]] && (( $(left) > 60 )); then
  stamp "lm_step_time"
  timeout $(( $(left) - 45 )) python3 tools/lm_step_time.py --gguf-dir "$GGUF" --quants "$QUANT" \
    --backend "$BACKEND" --shapes auto5,clone5,auto20 --batch 1 --json "$OUT/steps.jsonl" 2>&1 | grep -v "^ggml_"
fi
if [[ $STAGES == *" bench "* ]] && (( $(left) > 60 )) && [ -n "${REF_SITE:-}" ]; then
  stamp "side by side with the reference"
  timeout $(( $(left) - 10 )) python3 tools/bench.py --checkpoint "$CKPT" --gguf-dir "$GGUF" --backend "$BACKEND" \
    --quant "$QUANT" --ref-python python3 --ref-pythonpath "$REF_SITE" --ref-dtype bfloat16 \
    --cases auto5,clone5,auto20 --repeats 3 --warmup 1 --json "$OUT/bench-$BACKEND.json" \
    --markdown "$OUT/bench-$BACKEND.md" 2>&1 | grep -v "^ggml_" | tail -20
fi
stamp "done, $(left) s left"
