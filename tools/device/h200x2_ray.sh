#!/usr/bin/env bash
# Issue 15 on nvidia-h200-x2, in one device call (~8 minutes on a bare machine; results in $OUT):
# `python -m omnivoice.batch --ray` on a local Ray cluster, 64 mixed five-second requests (auto / design / clone;
# seven languages: tools/batch_bench.py --mix multilingual, MIX=mixed for the English-only manifest of the
# 2026-11-30 and 2026-12-01 runs)
# on one GPU actor, then on two; items/s, aggregate RTF, the scaling, and whether every item's tokens are equal
# in both runs.
#
# Carry (made here once: bash tools/device/prepare_carry.sh; bash tools/device/ray_wheels.sh):
#   .whl, .devcarry/ggml-src.tar.xz, .whl-ray (Ray without its Java jars, xz'd: ~28 MB; 64 MiB in all)
#     bash tools/device/h200x2_ray.sh
# CUDA_LIB_ARCHIVE=DIR skips the ggml build when its parts fit the carry too (see batch_setup.sh).
# Both runs use --batch-size 32: the driver shards the manifest in the engine's order, one shard per engine
# batch, so the same requests share a graph with one actor or two and the tokens can be compared on a GPU.
# EXTRA_ARGS: more batch CLI arguments for both runs (e.g. --no-warm-up: the actors start cold).
# On the CPU (to try it): BACKEND=cpu CKPT=/path/to/ckpt-tiny N=8 STEPS=4 bash tools/device/h200x2_ray.sh
set -uo pipefail
LOG=h200x2_ray.log; RAY=1  # batch_setup.sh: $OUT, the log, t0, stamp, left
source tools/device/batch_setup.sh || exit 1

N=${N:-64}; STEPS=${STEPS:-32}; M=$W/ray-manifest/lines.jsonl
python3 tools/batch_bench.py --write-manifest "$M" --sizes "$N" --mix "${MIX:-multilingual}" --steps "$STEPS" ||
  exit 1
export RAY_USAGE_STATS_ENABLED=0
unset RAY_ADDRESS

one_run() {  # label, share of the time left (%), batch CLI extra args: a local Ray cluster of its own per run
  local label=$1 share=$2; shift 2
  local t=$(( ($(left) - 30) * share / 100 ))
  (( t < 30 )) && { stamp "skip $label: no time left"; return 1; }
  stamp "$label: up to $t s"
  # --ray without an address: the CLI starts a local cluster (ray.init) and shuts it down, and stops only
  # what it started (no `ray stop`, which would end every Ray process of the machine)
  timeout --signal=INT --kill-after=15 "$t" python3 -m omnivoice.batch "$M" -o "$W/out-$label" --model "$MODEL" \
    --batch-size 32 --save-tokens --ray ${EXTRA_ARGS:-} "$@" 2>&1 | tee "$OUT/batch-$label.log"
}

if [ "$BACKEND" = cuda ]; then
  CUDA_VISIBLE_DEVICES=0 one_run one 55 --backend cuda       # Ray sees the one GPU CUDA_VISIBLE_DEVICES shows
  CUDA_VISIBLE_DEVICES=0,1 one_run two 100 --backend cuda
else
  one_run one 55 --cpu-actors 1 --threads 1
  one_run two 100 --cpu-actors 2 --threads 1
fi

stamp "compare"
python3 - "$W" "$OUT" <<'EOF'
import json, re, sys, pathlib
import numpy as np
W, OUT = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = {}
for label in ("one", "two"):
    log = (OUT / f"batch-{label}.log").read_text()
    m = re.search(r"done: (\d+) written.*?([\d.]+) s of audio in ([\d.]+) s, ([\d.]+) s from loading to the last item: "
                  r"([\d.]+) items/s, ([\d.]+) audio s/s \(RTF ([\d.]+)\)", log)
    if m:
        rows[label] = dict(zip(("written", "audio_s", "wall_s", "work_s", "items_per_s", "audio_per_s", "rtf"),
                               map(float, m.groups())))
npy = sorted(p.name for p in (W / "out-one").glob("*.npy"))
same = [n for n in npy if (W / "out-two" / n).is_file()
        and np.array_equal(np.load(W / "out-one" / n), np.load(W / "out-two" / n))]
report = {"runs": rows, "items": len(npy), "tokens_equal": len(same)}
if "one" in rows and "two" in rows:
    report["scaling"] = rows["two"]["items_per_s"] / rows["one"]["items_per_s"]
(OUT / "ray_scaling.json").write_text(json.dumps(report, indent=1))
lines = ["| actors | items | wall s (loading to last item) | items/s | audio s/s | aggregate RTF |", "|---|---|---|---|---|---|"]
for label, n in (("one", 1), ("two", 2)):
    r = rows.get(label)
    if r:
        lines.append(f"| {n} | {r['written']:.0f} | {r['wall_s']:.1f} ({r['work_s']:.2f}) | {r['items_per_s']:.2f} | "
                     f"{r['audio_per_s']:.1f} | {r['rtf']:.4f} |")
lines.append(f"\nscaling two / one: {report.get('scaling', float('nan')):.2f}x; tokens equal in both runs: "
             f"{len(same)} of {len(npy)} items")
(OUT / "ray_scaling.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
stamp "done, $(left) s left"
