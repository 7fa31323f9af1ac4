#!/usr/bin/env bash
# Issue 19 on nvidia-h200-x2: `python -m omnivoice.batch --ray` on a local Ray head, 64 mixed five-second
# requests (auto / design / clone) on one GPU actor, then on two; items/s, aggregate RTF, the scaling, and
# whether every item's tokens are equal in both runs (results in $OUT).
#
# Ray does not fit one call's carry (tools/device/ray_wheels.sh, run here, makes .whl-ray/: Ray in two zips
# without its Java jars, and jsonschema's wheels), so two calls on one warm machine (the next within 30 s):
#
#   1. carry .whl, vendor/ggml/cache, .devcarry, .whl-ray/ray-part1.zip:
#        CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200x2_ray.sh stash    # setup + keep part 1
#   2. carry .whl, .whl-ray (part 2 and the small wheels; part 1 may stay behind):
#        bash tools/device/h200x2_ray.sh run                                         # ~4 minutes
#
# Both runs use --batch-size 32: the driver shards the manifest in the engine's order, one shard per engine
# batch, so the same requests share a graph with one actor or two and the tokens can be compared on a GPU.
# On the CPU (to try it): BACKEND=cpu CKPT=/path/to/ckpt-tiny N=8 STEPS=4 bash tools/device/h200x2_ray.sh run
set -uo pipefail
mode=${1:-run}
t0=$(date +%s)
source tools/device/batch_setup.sh || exit 1
exec > >(tee -a "$OUT/h200x2_ray.log") 2>&1
STASH=/tmp/ovstash; mkdir -p "$STASH"
cp -n .whl-ray/* "$STASH"/ 2>/dev/null
if [ "$mode" = stash ]; then
  stamp "stashed: $(ls "$STASH" | tr '\n' ' ')"
  exit 0
fi

if ! python3 -c "import ray" 2>/dev/null; then
  stamp "install Ray from the stashed pieces"
  ls "$STASH"/ray-part1.zip "$STASH"/ray-part2.zip >/dev/null || { echo "missing Ray pieces: run 'stash' first"; exit 1; }
  for z in "$STASH"/ray-part*.zip; do python3 -m zipfile -e "$z" "$W/site" || exit 1; done
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" "$STASH"/*.whl || exit 1
  python3 -c "import ray; print('ray', ray.__version__)" || exit 1
fi

N=${N:-64}; STEPS=${STEPS:-32}; M=$W/ray-manifest/lines.jsonl
python3 tools/batch_bench.py --write-manifest "$M" --sizes "$N" --mix mixed --steps "$STEPS" || exit 1
ray_cli() { python3 -m ray.scripts.scripts "$@"; }
export RAY_USAGE_STATS_ENABLED=0

one_run() {  # label, ray start resources..., -- , batch CLI extra args
  local label=$1; shift
  local start=() extra=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do start+=("$1"); shift; done
  shift
  extra=("$@")
  stamp "$label: ray head ${start[*]}"
  ray_cli stop --force >/dev/null 2>&1
  ray_cli start --head --include-dashboard=false --disable-usage-stats "${start[@]}" > "$OUT/ray-$label-start.log" 2>&1 ||
    { tail -20 "$OUT/ray-$label-start.log"; return 1; }
  timeout $(( $(left) - 20 )) python3 -m omnivoice.batch "$M" -o "$W/out-$label" --model "$MODEL" --batch-size 32 \
    --save-tokens --ray auto "${extra[@]}" 2>&1 | tee "$OUT/batch-$label.log"
  ray_cli stop --force >/dev/null 2>&1
}

if [ "$BACKEND" = cuda ]; then
  CUDA_VISIBLE_DEVICES=0 one_run one --num-gpus=1 --num-cpus=8 -- --backend cuda
  one_run two --num-gpus=2 --num-cpus=16 -- --backend cuda
else
  one_run one --num-cpus=2 -- --cpu-actors 1 --threads 1
  one_run two --num-cpus=2 -- --cpu-actors 2 --threads 1
fi

stamp "compare"
python3 - "$W" "$OUT" <<'EOF'
import json, re, sys, pathlib
import numpy as np
W, OUT = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
rows = {}
for label in ("one", "two"):
    log = (OUT / f"batch-{label}.log").read_text()
    m = re.search(r"done: (\d+) written.*?([\d.]+) s of audio in ([\d.]+) s, ([\d.]+) s after loading: "
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
lines = ["| actors | items | wall s (after loading) | items/s | audio s/s | aggregate RTF |", "|---|---|---|---|---|---|"]
for label, n in (("one", 1), ("two", 2)):
    r = rows.get(label)
    if r:
        lines.append(f"| {n} | {r['written']:.0f} | {r['wall_s']:.1f} ({r['work_s']:.1f}) | {r['items_per_s']:.2f} | "
                     f"{r['audio_per_s']:.1f} | {r['rtf']:.4f} |")
lines.append(f"\nscaling two / one: {report.get('scaling', float('nan')):.2f}x; tokens equal in both runs: "
             f"{len(same)} of {len(npy)} items")
(OUT / "ray_scaling.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
stamp "done, $(left) s left"
