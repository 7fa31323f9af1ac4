#!/usr/bin/env bash
# CUDA graphs on and off (GGML_CUDA_DISABLE_GRAPHS=1), alternated twice in one device call (~3 minutes with the
# carried CUDA build): LM step times of one request (auto5, clone5, auto20) and of packed batches, with what a
# new request shape pays first (the session build and its first two steps: tools/lm_step_time.py's build_ms,
# first_step_ms, second_step_ms), BF16, the full random checkpoint.
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/cuda_graphs_ab.sh    # carry .whl .devcarry/cudalib
# Results: $OUT/graphs.jsonl (label graphs-on / graphs-off), $OUT/cuda_graphs_ab.log.
set -uo pipefail
LOG=cuda_graphs_ab.log; BUDGET_S=${BUDGET_S:-300}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
for round in 1 2; do
  for g in on off; do
    (( $(left) > 40 )) || { stamp "no time left for round $round, graphs $g"; break 2; }
    stamp "round $round, CUDA graphs $g"
    for args in "--shapes auto5,clone5,auto20" "--shapes auto5 --batch 16,64"; do
      env $([ $g = off ] && echo GGML_CUDA_DISABLE_GRAPHS=1) timeout $(( $(left) - 5 )) python3 tools/lm_step_time.py \
        --gguf-dir "$W/gguf" --quants bf16 --backend cuda --repeats 5 --json "$OUT/graphs.jsonl" \
        --label "graphs-$g" $args 2>&1 | grep -v '^Runtime'
    done
  done
done
stamp done
