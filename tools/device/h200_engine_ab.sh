#!/usr/bin/env bash
# The batched engine against an earlier version of itself, in one device call: 64 mixed five-second requests
# (tools/batch_bench.py --mix mixed, BF16 on CUDA, 32 steps), batched only, one process per run, alternating
# runs so that a drift of the machine falls on both sides:
#   base      the package in $BASE (an earlier commit's tree: omnivoice/ and tools/, e.g.
#             `git archive COMMIT omnivoice tools | tar -x -C ab-base`), pipelined (the GPU default)
#   new       this tree, pipelined
#   new-one   this tree, not pipelined (OMNIVOICE_PIPELINE=0: one graph for all, then the host's work)
# ROUNDS rounds (default 2); PROFILE=1 adds the engine's time by phase to the first round's `new` run; SINGLE=1
# adds lone auto5 / clone5 requests, base and new (tools/bench.py, ours only). Then
# TESTS (default: the binding, LM session and engine tests) run on CUDA. Results in $OUT, few files (a device
# call brings back eight): engine_ab.json (every run's batch_bench report), engine_ab.md, h200_engine_ab.log,
# tests-cuda.log; each run's own files stay in $RUNS (default /tmp/engine_ab).
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib BASE=ab-base bash tools/device/h200_engine_ab.sh   # carry .whl .devcarry
#
# On the CPU (to try it):
#     BACKEND=cpu CKPT=/path/to/ckpt-tiny N=8 STEPS=4 BASE=ab-base bash tools/device/h200_engine_ab.sh
set -uo pipefail
LOG=h200_engine_ab.log  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1
N=${N:-64}; STEPS=${STEPS:-32}; ROUNDS=${ROUNDS:-2}; RUNS=${RUNS:-/tmp/engine_ab}; mkdir -p "$RUNS"
if [ -n "${BASE:-}" ]; then
  base_tree batch_bench.py || exit 1
fi

run() {  # label, tree, extra batch_bench arguments...
  local label=$1 tree=$2; shift 2
  (( $(left) < 60 )) && { stamp "skip $label: $(left) s left"; return; }
  stamp "$label"
  timeout --signal=TERM --kill-after=10 $(( $(left) - 30 )) python3 "$tree/tools/batch_bench.py" --model "$MODEL" \
    --backend "$BACKEND" --steps "$STEPS" --sizes "$N" --mix mixed --no-one-by-one-above 0 \
    --json "$RUNS/batch-$label.json" --markdown "$RUNS/batch-$label.md" "$@" 2>&1 | grep -v "^machine:"
}

for r in $(seq 1 "$ROUNDS"); do
  prof=(); [ "${PROFILE:-0}" = 1 ] && [ "$r" = 1 ] && prof=(--profile)
  [ -n "${BASE:-}" ] && run "base-$r" "$BASE"
  run "new-$r" . "${prof[@]}"
  OMNIVOICE_PIPELINE=0 run "new-one-$r" .
done
# SINGLE=1: lone requests too, base and new alternating (tools/bench.py, ours only, auto5 and clone5, 3 repeats):
# what the host's per-step work costs a request the GPU runs alone.
if [ "${SINGLE:-0}" = 1 ] && [ -n "${BASE:-}" ]; then
  for r in 1 2; do
    for side in base new; do
      tree=.; [ "$side" = base ] && tree=$BASE
      (( $(left) < 60 )) && { stamp "skip single-$side-$r: $(left) s left"; continue; }
      stamp "single-$side-$r"
      timeout --signal=TERM --kill-after=10 $(( $(left) - 30 )) python3 "$tree/tools/bench.py" --checkpoint "$CKPT" \
        --gguf-dir "$W/gguf" --backend "$BACKEND" --quant "$QUANT" --no-reference --cases auto5,clone5 \
        --repeats 3 --warmup 1 --pause 0 --json "$RUNS/single-$side-$r.json" 2>&1 | grep -E "^(auto|clone)"
    done
  done
fi
python3 - "$RUNS" "$OUT/engine_ab.json" <<'EOF' | tee "$OUT/engine_ab.md"
import json, sys
from pathlib import Path
rows, reports = [], {}
for f in sorted(Path(sys.argv[1]).glob("batch-*.json")):
    reports[f.stem] = json.loads(f.read_text())
    r = reports[f.stem]["rows"][0]
    rows.append((f.stem[len("batch-"):], r["batched_wall_s"], r["audio_s"] / r["batched_wall_s"], r["batched_rtf"],
                 r.get("profile", {}).get("phases_s")))
print("| run | wall s | audio s/s | RTF | phases s (profiled run) |\n|---|---|---|---|---|")
for label, wall, rate, rtf, phases in rows:
    ph = ", ".join(f"{k} {v:.2f}" for k, v in phases.items()) if phases else ""
    print(f"| {label} | {wall:.2f} | {rate:.1f} | {rtf:.4f} | {ph} |")
singles = {f.stem: json.loads(f.read_text()) for f in sorted(Path(sys.argv[1]).glob("single-*.json"))}
if singles:
    print("\n| run | case | wall s (median of 3) | LM ms a step | decode s | tokens sha256 |\n|---|---|---|---|---|---|")
    for label, rep in singles.items():
        for case, per in rep["cases"].items():
            for m in (v["median"] for v in per.values()):
                print(f"| {label} | {case} | {m['wall_s']:.3f} | {m['lm_ms_per_step'] or 0:.2f} | "
                      f"{m['decode_s'] or 0:.3f} | {m['tokens_sha256'][:12]} |")
reports["single"] = singles
Path(sys.argv[2]).write_text(json.dumps(reports, indent=1))
EOF

if (( $(left) > 60 )); then
  stamp "tests on $BACKEND"
  OMNIVOICE_TEST_BACKEND=$BACKEND timeout $(( $(left) - 20 )) python3 -m pytest -q -p no:cacheprovider \
    ${TESTS:-tests/ggml/test_binding.py tests/models/test_lm.py tests/engine} > "$OUT/tests-$BACKEND.log" 2>&1
  tail -15 "$OUT/tests-$BACKEND.log"
fi
stamp "done, $(left) s left"
