#!/usr/bin/env bash
# A change of the package's graphs (Python only) against the tree before it, in one device call on one CUDA build:
#   1. the CUDA tests of this tree (tests/nn/test_ops.py, tests/ggml/test_binding.py, tests/models, tests/engine);
#      a failure stops the script,
#   2. LM step times, base and new alternated over two rounds (tools/lm_step_time.py, BF16, each tree's own tool):
#      auto5, clone5, auto20 alone, and 16 / 64 packed auto5 prompts (the batched engine's padded attention);
#      round 1 profiled (GPU time and kernels a step, the kernel table),
#   3. tools/batch_bench.py of this tree: 16 and 64 five-second auto requests, then 64 mixed, batched against one
#      by one (tokens of each request compared), and base's 64 mixed batched only, for the end-to-end A/B.
# BASE: a folder with the earlier tree's omnivoice/ and tools/ (`git archive COMMIT omnivoice tools | tar -x -C
# ab-base`); it runs on this tree's CUDA build. Results in $OUT: h200_tree_ab.log, tests-cuda.log, steps.jsonl,
# batch-auto.json, batch-mixed.json, batch-base-mixed.json.
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib BASE=ab-base bash tools/device/h200_tree_ab.sh  # carry .whl .devcarry/cudalib
#                                                                                         # .devcarry/ggml-src.tar.xz ab-base
set -uo pipefail
LOG=h200_tree_ab.log; BUDGET_S=${BUDGET_S:-570}  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
rm -f "$OUT/checkpoint.log" "$OUT/ops-build.log"  # (a device call brings back eight files)
: "${BASE:?BASE=the earlier tree}"
base_tree lm_step_time.py || exit 1

if [[ " ${SKIP:-} " != *" tests "* ]]; then
  stamp "tests on CUDA"
  OMNIVOICE_TEST_BACKEND=cuda timeout 240 python3 -m pytest -q -p no:cacheprovider -rs tests/nn/test_ops.py \
    tests/ggml/test_binding.py tests/models tests/engine ${PYTEST_ARGS:-} > "$OUT/tests-cuda.log" 2>&1
  tail -12 "$OUT/tests-cuda.log"
  grep -qE "[0-9]+ (failed|error)" "$OUT/tests-cuda.log" && { stamp "tests failed: stop"; exit 1; }
fi

for r in 1 2; do
  for arm in base new; do
    (( $(left) < 200 )) && break 2
    tree=.; [ "$arm" = base ] && tree=$BASE
    prof=$([ "$r" = 1 ] && echo 1 || echo 0)
    stamp "$arm, round $r"
    (cd "$tree" && timeout 120 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda \
      --repeats 5 --shapes auto5,clone5,auto20 --profile "$prof" --json "$OUT/steps.jsonl" --label "$arm-$r" 2>&1 |
      grep -E "ms/step")
    (cd "$tree" && timeout 120 python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --quants bf16 --backend cuda \
      --repeats 3 --shapes auto5 --batch 16,64 --profile "$prof" --json "$OUT/steps.jsonl" --label "$arm-$r" 2>&1 |
      grep -E "ms/step")
  done
done

for spec in "auto:1,16,64:." "mixed:64:." "base-mixed:64:$BASE"; do
  IFS=: read -r name sizes tree <<< "$spec"
  (( $(left) < 90 )) && { stamp "skip batch $name: $(left) s left"; continue; }
  mix=${name#base-}; extra=(); [ "$tree" != . ] && extra=(--no-one-by-one-above 0)
  stamp "batch_bench $name"
  (cd "$tree" && timeout $(( $(left) - 20 )) python3 tools/batch_bench.py --model "$MODEL" --backend cuda --steps 32 \
    --sizes "$sizes" --mix "$mix" --json "$OUT/batch-$name.json" "${extra[@]}" 2>&1 | grep -E "^\|")
done
stamp "done, $(left) s left"
