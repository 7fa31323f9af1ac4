#!/usr/bin/env bash
# The standard H200 checks in one device call (about 8 minutes with the default parts; a call may run 10): the
# tables of BENCHMARKS.md's "NVIDIA H200, CUDA" section, measured on the tree the call carries.
#
# Here, once (a CPU machine with the package registries): bash tools/device/prepare_carry.sh, which makes .whl
# (the wheels the device image lacks, the server's and the reference's included) and .devcarry (the pinned,
# patched ggml tree; the reference's float32 dump; with CUDA=1 a CUDA build, .devcarry/cudalib). Then, on the
# device machine, in the repository root (carry .whl .devcarry; .gl .vk for vulkan and vulkan_f32; .whl-ray for
# ray and serve; .whl-build for cuda_wheel):
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/h200_checks.sh
#
# Without CUDA_LIB_ARCHIVE ggml is built there for sm_90 (about 4 minutes more; ARCHIVE=1 leaves that build in
# $OUT/cudalib for later calls). The full-size random checkpoint (tools/make_checkpoint.py --preset full --seed 0)
# is made and converted to BF16 beside the build, for the parts that run a model on it.
#
# PARTS (comma list, default tests,bench,batch,server) picks what runs, in this order:
#   one_engine  tests,bench,batch,server with the settings that compare this tree against BASE (required): bench
#           and batch alternated ROUNDS (1) times, the server at CLIENTS (1,4: four is the device MaskGIT of a
#           packed group) of REQUESTS (6), TTFB_REPEATS (5), WS_REPEATS (3), then LOAD_ARGS --direct:
#           OmniVoice.synthesize on the one-client requests in one process after the server
#           (`direct.server_ratio` in server_load.json: the server's audio s/s at one client over the library's)
#   tests   the CUDA suites, TEST_PATHS (default tests/nn tests/ggml tests/models tests/engine tests/test_api*.py)
#   bench   tools/bench.py CASES (auto5,clone5,auto20) in QUANTS (bf16) side by side with the reference in
#           REF_DTYPES (bfloat16), REPEATS (3) after a warm-up; with BASE=DIR (an earlier tree, made here with
#           `git archive COMMIT omnivoice tools | tar -x -C .devcarry/base`) ours against that tree instead,
#           alternated ROUNDS (2) times on this machine's build
#   classes tools/class_check.py: CLASS_SESSIONS (300) random packs of 1 to 4 one-sentence prompts, a shape-class
#           graph's picks against exact shapes' (a pick of -1, a score not finite, or under 98 % equal fails);
#           CLASS_ARGS adds its flags, one run per setting split at | (e.g. "--steps 3 --poison|--steps 3 --poison
#           --outputs-in-compute-buffer": three runs a session, each from a compute buffer filled with NaN, with the
#           outputs' zeroed constant and without it, as before 3f6a352; a minute or two a setting)
#   steps   tools/lm_step_time.py: synced steps, QUEUED (64) steps back to back, 32-step chunks stepped on the host
#           and on the device, at SHAPES (auto5,clone5,90:0:500)
#   batch   tools/batch_bench.py: BATCH_SIZES (64) five-second requests of MIX (mixed) batched against one by one;
#           with BASE, this tree and BASE alternated ROUNDS times as for bench
#   server  tools/server_load.py: the first audio byte (TTFB_REPEATS, 10 runs), the first audio after the first
#           sentence's end over the WebSocket with text at 30 tokens/s (WS_REPEATS, 10 runs), CLIENTS (1,8,32)
#           clients of REQUESTS (4) requests; LOAD_ARGS adds its flags (e.g. --vary). With LOADS=closed,
#           conversational (either or both) instead: the streaming loads (streamed one-sentence requests of 1 to 25
#           words; closed loop, and clients that play their audio in real time) at CLIENTS (1,8,32,64) clients of
#           REQUESTS (3) requests, first audio p50/p90/p99, audio s per s, errors and 503s; with BASE=DIR (an
#           earlier tree, as for bench) BASE's server first, then this tree's, and one table of all. SERVER_ARGS
#           adds flags to this tree's server only, one run per setting split at | (e.g. "|--max-step-positions
#           16384": the default, then a step cap; a run takes about 90 s at the default sizes); a NAME=VALUE word
#           of a setting is the server's environment instead (e.g. "|OMNIVOICE_SHAPE_CLASSES=1")
#   vulkan  ggml's Vulkan module built beside (carry .gl .vk), the graph suites on Vulkan (VULKAN_TESTS, default
#           tests/nn tests/ggml tests/models; empty: none), the LM step (F16, BF16 default shaders; F32 float32
#           shaders) and the F32 parity with either shaders
#   vulkan_f32  (about 4 minutes; carry .whl .gl .vk .devcarry/ggml-src.tar.xz) ggml built for Vulkan alone where
#           no part runs on CUDA and no CUDA build is carried (else its Vulkan module as for vulkan), then an F32 LM
#           named each way a user names it (file, folder, checkpoint with quant f32) and, for contrast, the same
#           file with the F16 shaders: the load line's arithmetic and the greedy tokens of auto, design and clone
#           against the reference's goldens (tools/parity.py lm --ways on the tiny checkpoint; every way but
#           f16 must say "F32 arithmetic" and give 100 %), --list-devices, the CLI's load line, and tests/parity on
#           Vulkan with OMNIVOICE_EXACT_F32=0, where only the F32 file itself asks for F32 arithmetic
#   ray     on two GPUs (nvidia-h200-x2; carry .whl-ray from RAY=1 prepare_carry.sh): python -m omnivoice.batch
#           --ray over a 64-request manifest in seven languages on one GPU actor, then two; scaling and tokens
#   serve   the speech server on Ray Serve (carry .whl-ray from RAY=1 prepare_carry.sh; its first arm repeats the
#           server part's figures, so name one of the two): tools/server_load.py against the plain server, then
#           `--ray --replicas 1`, then `--ray --replicas 2 --gpus-per-replica 0.5` (two replicas on the one GPU),
#           each with CLIENTS (1,8,32) clients of REQUESTS (4) and TTFB_REPEATS (10) first audios; a table of the
#           three (first audio p50 / p99 of the runs, audio s per s and p50 latency per client count)
#   cuda_wheel  (about 8 minutes: name it alone; carry .whl .whl-build .devcarry/ggml-src.tar.xz, .whl-build from
#           WHEEL_TOOLS=1 prepare_carry.sh) the CUDA wheel: tools/wheel.py build with CUDA for CUDA_ARCHS (90) beside
#           the portable CPU build, repaired by auditwheel into a manylinux wheel that leaves the CUDA runtime
#           (libcudart, libcublas, libcublasLt, the driver's libcuda) to the machine and is named by its CUDA
#           version (omnivoice_ggml-0.1.0+cu130-...); then tools/wheel.py check installs it into a fresh venv
#           (--no-index from .whl, the image's numpy and scipy inherited, no compiler on PATH), where it speaks on
#           the GPU (the tiny checkpoint). auditwheel show, the wheel's size in bytes, tag and libraries in
#           cuda_wheel.json, the check's in cuda_wheel-check.json. WHEEL_CMAKE_ARGS replaces the CUDA arguments
#           (a local trial of the part: BACKEND=cpu PARTS=cuda_wheel WHEEL_CMAKE_ARGS=-DOMNIVOICE_CPU_NATIVE=ON)
# Each part gets what is left of BUDGET_S (570 s) and is skipped, saying so, when it would not fit. TF32=off keeps
# NVIDIA_TF32_OVERRIDE=0 after the tests (the timings otherwise run with TF32 as a user's process has it).
# Results in $OUT (a call brings back at most eight files): h200_checks.log (every table), tests-cuda.log and
# results.tar.gz (every JSON and log).
#
# Examples (device calls; the carry lists above):
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib BASE=.devcarry/base PARTS=one_engine bash tools/device/h200_checks.sh
#     PARTS=vulkan_f32 bash tools/device/h200_checks.sh
#     PARTS=cuda_wheel bash tools/device/h200_checks.sh
#
# To try the script on a CPU machine (tiny model, small sizes):
#     BACKEND=cpu PARTS=bench,steps,batch,server CASES=auto5 REPEATS=1 BATCH_SIZES=2 CLIENTS=1,2 TTFB_REPEATS=1 \
#         QUEUED=0 SHAPES=auto5 OUT=/tmp/checks bash tools/device/h200_checks.sh
[[ "${1:-}" == -h || "${1:-}" == --help ]] &&  # the header above, without its comment marks
  { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0; }
set -uo pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 NVIDIA_TF32_OVERRIDE=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # no NVLink multicast
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
W=${BENCH_WORK:-/tmp/ovchecks}; R=$W/res; mkdir -p "$R"
exec > >(tee -a "$OUT/h200_checks.log") 2>&1
t0=$(date +%s); BUDGET_S=${BUDGET_S:-570}; BACKEND=${BACKEND:-cuda}
PARTS=${PARTS:-tests,bench,batch,server}
left() { echo $(( BUDGET_S - ($(date +%s) - t0) )); }
stamp() { tar -czf "$OUT/results.tar.gz" -C "$W" res 2>/dev/null; echo "== $(( $(date +%s) - t0 ))s, $(left) s left: $*"; }
part() { [[ ",$PARTS," == *",$1,"* ]]; }
any_part() { local p; for p; do part "$p" && return 0; done; return 1; }  # whether PARTS names any of these
fits() { (( $(left) >= $1 )) && return 0; stamp "skipped $2: needs ~$1 s"; return 1; }
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
for p in ${PARTS//,/ }; do
  [[ " one_engine tests bench classes steps batch server vulkan vulkan_f32 ray serve cuda_wheel " == *" $p "* ]] ||
    { echo "error: PARTS=$PARTS: unknown part '$p'"; exit 2; }
done
if part one_engine; then  # this tree against BASE on every measure, with the settings of its header entry
  [ -n "${BASE:-}" ] || { echo "error: PARTS=one_engine needs BASE=DIR (the earlier tree)"; exit 2; }
  ROUNDS=${ROUNDS:-1} CLIENTS=${CLIENTS:-1,4} REQUESTS=${REQUESTS:-6} TTFB_REPEATS=${TTFB_REPEATS:-5}
  WS_REPEATS=${WS_REPEATS:-3} LOAD_ARGS="--direct ${LOAD_ARGS:-}" PARTS=${PARTS//one_engine/tests,bench,batch,server}
fi
# what the parts need: ggml built for this machine (all but cuda_wheel), the full checkpoint and its conversion
BUILD_PARTS=(tests bench classes steps batch server vulkan vulkan_f32 ray serve)
CUDA_PARTS=(tests bench classes steps batch server ray serve)
MODEL_PARTS=(bench classes steps batch server vulkan ray serve)

# --- setup: wheels, ggml, the checkpoint and its conversion (each skipped when a warm machine has it) ---
if [ "$BACKEND" = cuda ] && [ ! -f "$W/site/.done" ]; then
  stamp "python wheels"
  mapfile -t ours < <(ls .whl/*.whl | grep -v -e '/omnivoice-' -e '/pydub-')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
    "${ours[@]}" || exit 1
  if ls .whl/omnivoice-*.whl >/dev/null 2>&1; then  # the reference sees only ref-site (and needs soundfile there)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/ref-site" \
      .whl/omnivoice-*.whl .whl/pydub-*.whl .whl/soundfile-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl || exit 1
  fi
  touch "$W/site/.done"
fi
[ "$BACKEND" = cuda ] && export PYTHONPATH=$W/site${PYTHONPATH:+:$PYTHONPATH}
REF_SITE=; [ -d "$W/ref-site" ] && REF_SITE=$W/ref-site
if [ "$BACKEND" = cuda ]; then QUANT=bf16; PRESET=full; else QUANT=${QUANT:-f32}; PRESET=${PRESET:-tiny}; fi
CKPT=${CKPT:-$W/ckpt-$PRESET}
convert() {  # quant...: tools/bench.py's conversion (kept while the checkpoint is unchanged)
  python3 -c "import sys, pathlib; sys.path.insert(0, 'tools'); import bench
bench.convert(pathlib.Path('$CKPT'), pathlib.Path('$W/gguf'), sys.argv[1:])" "$@" >> "$R/checkpoint.log" 2>&1
}
conv_pid=
if any_part "${MODEL_PARTS[@]}"; then
  stamp "checkpoint ($PRESET) and $QUANT conversion (background)"
  ( [ -f "$CKPT/audio_tokenizer/model.safetensors" ] ||
      python3 tools/make_checkpoint.py --preset "$PRESET" --seed 0 -o "$CKPT" >> "$R/checkpoint.log" 2>&1 ) &&
    convert "$QUANT" &
  conv_pid=$!
fi
src() { [ -f vendor/ggml/src/ggml/CMakeLists.txt ] || { mkdir -p vendor/ggml/src &&
  tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; }; }
vk_env=0 vk_ready=0
vulkan_env() {  # the carried Vulkan loader and driver files (.gl), and the SDK's loader, headers and glslc (.vk)
  [ "$vk_env" = 1 ] && return 0
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  mkdir -p /opt/vk && for f in .vk/*.deb; do dpkg -x "$f" /opt/vk; done
  VK=/opt/vk/usr; VKLIB=$VK/lib/x86_64-linux-gnu
  export LD_LIBRARY_PATH=$VKLIB:${LD_LIBRARY_PATH:-}
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  ldconfig
  VKARGS="-DGGML_VULKAN=ON -DCMAKE_PREFIX_PATH=$VK -DVulkan_INCLUDE_DIR=$VK/include -DVulkan_LIBRARY=$VKLIB/libvulkan.so.1"
  VKARGS="$VKARGS -DVulkan_GLSLC_EXECUTABLE=$VK/bin/glslc -DCMAKE_CXX_FLAGS=-I$VK/include"
  vk_env=1
}
vulkan_module() {  # ggml's Vulkan module built beside this build (unless the setup built ggml for Vulkan)
  [ "$vk_ready" = 1 ] && return 0
  stamp "Vulkan module (carried .gl .vk)"
  vulkan_env
  # shellcheck disable=SC2086  # VKARGS: several arguments
  { src && cmake -S . -B build/vk -G Ninja -DCMAKE_BUILD_TYPE=Release $VKARGS > "$R/build-vulkan.log" 2>&1 &&
    cmake --build build/vk --target ggml-vulkan >> "$R/build-vulkan.log" 2>&1 &&
    cp build/vk/lib/libggml-vulkan.so omnivoice/ggml/_lib/; } || { tail -30 "$R/build-vulkan.log"; exit 1; }
  vk_ready=1
}
if ! any_part "${BUILD_PARTS[@]}"; then
  stamp "no part here runs on this tree's build"
elif [ "$BACKEND" != cuda ]; then
  stamp "backend $BACKEND: the build here is used"
elif [ -f omnivoice/ggml/_lib/libggml-cuda.so ]; then
  stamp "CUDA build already here"
elif ! any_part "${CUDA_PARTS[@]}" && [ -z "${CUDA_LIB_ARCHIVE:-}" ]; then
  stamp "build ggml for Vulkan alone (no part here runs on CUDA; about 2 minutes)"
  vulkan_env; src || exit 1
  CMAKE_ARGS="$VKARGS" python3 build_ext.py all > "$R/build.log" 2>&1 || { tail -40 "$R/build.log"; exit 1; }
  vk_ready=1
elif [ -n "${CUDA_LIB_ARCHIVE:-}" ] && ls "$CUDA_LIB_ARCHIVE"/*.tar.xz.* >/dev/null 2>&1; then
  stamp "unpack the carried CUDA build"
  cat "$CUDA_LIB_ARCHIVE"/*.tar.xz.* | xz -d | tar -C omnivoice/ggml -xf - || exit 1
  # the package's CPU kernels (omnivoice/csrc) change more often than ggml: rebuild them from this tree (seconds)
  if [ "${OPS_REBUILD:-1}" = 1 ] && [ -f .devcarry/ggml-src.tar.xz ]; then
    stamp "rebuild libomnivoice-ops from this tree"
    { src && cmake -S . -B build/ops -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_VULKAN=OFF > "$R/ops-build.log" 2>&1 &&
      cmake --build build/ops --target omnivoice-ops -j "$(nproc)" >> "$R/ops-build.log" 2>&1 &&
      cp build/ops/lib/libomnivoice-ops.so omnivoice/ggml/_lib/; } || { tail -20 "$R/ops-build.log"; exit 1; }
  fi
else
  stamp "build ggml (CUDA sm_90)"
  src || exit 1
  CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" python3 build_ext.py all > "$R/build.log" 2>&1 ||
    { tail -40 "$R/build.log"; exit 1; }
  if [ "${ARCHIVE:-0}" = 1 ]; then
    stamp "archive the CUDA build into \$OUT/cudalib"
    mkdir -p "$OUT/cudalib"
    tar -C omnivoice/ggml -cf - _lib _cdef.h _consts.json | xz -T0 -6 | split -b 15M - "$OUT/cudalib/ggml_cuda_lib.tar.xz."
  fi
fi
[ "$BACKEND" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
any_part "${BUILD_PARTS[@]}" &&
  python3 -c "from omnivoice.ggml import build_info, list_devices; [print(d.spec, d.description) for d in list_devices()]
print('ggml patches:', ', '.join(p[:4] for p in build_info.get('ggml_patches', [])))"
echo "tree: $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)')"

if part tests && fits 120 "tests"; then
  stamp "tests on $BACKEND"
  # shellcheck disable=SC2086  # TEST_PATHS: several paths
  OMNIVOICE_TEST_BACKEND=$BACKEND timeout $(( $(left) > 330 ? 240 : $(left) / 2 )) python3 -m pytest -q \
    -p no:cacheprovider -rs ${TEST_PATHS:-tests/nn tests/ggml tests/models tests/engine tests/test_api*.py} \
    > "$OUT/tests-cuda.log" 2>&1
  tail -14 "$OUT/tests-cuda.log"
fi
[ "${TF32:-default}" = default ] && unset NVIDIA_TF32_OVERRIDE
if [ -n "$conv_pid" ]; then
  stamp "waiting for the checkpoint and conversion"
  wait $conv_pid || { tail -20 "$R/checkpoint.log"; exit 1; }
fi
MODEL=$W/gguf/omnivoice-base-${QUANT^^}.gguf; CODEC=$W/gguf/omnivoice-tokenizer-F32.gguf

if part bench && fits 150 "bench"; then
  CASES=${CASES:-auto5,clone5,auto20}; REPEATS=${REPEATS:-3}; QUANTS=${QUANTS:-$QUANT}
  bench() {  # tree label [bench.py arguments]: the tree's tools/bench.py with that tree's package
    local tree=$1 label=$2; shift 2
    (cd "$tree" && PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} timeout $(( $(left) - 20 )) python3 tools/bench.py \
      --checkpoint "$CKPT" --gguf-dir "$W/gguf" --backend "$BACKEND" --quant "$QUANTS" --cases "$CASES" \
      --repeats "$REPEATS" --warmup 1 --json "$R/bench-$label.json" "$@") > "$R/bench-$label.log" 2>&1 ||
      { tail -5 "$R/bench-$label.log"; return 1; }
    grep -E "^(\||Machine)" "$R/bench-$label.log"
  }
  if [ -n "${BASE:-}" ]; then
    [ -f "$BASE/tools/bench.py" ] || { echo "BASE=$BASE holds no tools/bench.py"; exit 1; }
    cp -r omnivoice/ggml/_lib omnivoice/ggml/_cdef.h omnivoice/ggml/_consts.json "$BASE/omnivoice/ggml/"
    for round in $(seq "${ROUNDS:-2}"); do
      stamp "bench round $round: this tree"; bench . "this-$round" --no-reference
      stamp "bench round $round: BASE"; bench "$BASE" "base-$round" --no-reference
    done
  elif [ -n "$REF_SITE" ] || [ "$BACKEND" != cuda ]; then
    stamp "side by side with the reference"
    ref=(--ref-python python3 --ref-pythonpath "$REF_SITE"); [ -z "$REF_SITE" ] && ref=()
    bench . reference --ref-dtype "${REF_DTYPES:-bfloat16}" "${ref[@]}"
  else
    stamp "skipped bench: no reference wheels in .whl and no BASE"
  fi
fi

if part classes && fits 60 "classes"; then
  IFS='|' read -ra settings <<< "${CLASS_ARGS:-}"; [ ${#settings[@]} = 0 ] && settings=("")
  for i in "${!settings[@]}"; do
    stamp "class graphs against exact shapes${settings[$i]:+ (${settings[$i]})}"
    # shellcheck disable=SC2086  # a setting: several flags
    timeout $(( ($(left) - 10) / (${#settings[@]} - i) )) python3 tools/class_check.py --model "$MODEL" \
      --backend "$BACKEND" --sessions "${CLASS_SESSIONS:-300}" ${settings[$i]} \
      --json "$R/class_check$( [ "$i" -gt 0 ] && echo "-$((i + 1))").json" 2>&1 | grep -vE "^\s*$" | tail -40
  done
fi

if part steps && fits 90 "steps"; then
  stamp "LM steps: synced, queued, 32-step chunks"
  timeout $(( $(left) - 10 )) python3 tools/lm_step_time.py --gguf-dir "$W/gguf" --backend "$BACKEND" \
    --quants "$QUANT" --shapes "${SHAPES:-auto5,clone5,90:0:500}" --repeats 7 --queued "${QUEUED:-64}" \
    --maskgit 32 --json "$R/steps.jsonl" 2>&1 | grep -vE "^\s*$"
fi

if part batch && fits 90 "batch"; then
  batch() {  # tree label: the tree's tools/batch_bench.py with that tree's package
    (cd "$1" && PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} timeout $(( $(left) - 10 )) python3 tools/batch_bench.py \
      --model "$MODEL" --codec "$CODEC" --backend "$BACKEND" --steps 32 --sizes "${BATCH_SIZES:-64}" \
      --mix "${MIX:-mixed}" --json "$R/batch-$2.json") 2>&1 | grep -E "^\||by phase"
  }
  if [ -n "${BASE:-}" ] && [ -f "$BASE/tools/batch_bench.py" ]; then  # this tree and BASE alternated
    cp -r omnivoice/ggml/_lib omnivoice/ggml/_cdef.h omnivoice/ggml/_consts.json "$BASE/omnivoice/ggml/"
    for round in $(seq "${ROUNDS:-2}"); do
      stamp "batch_bench round $round: this tree"; batch . "this-$round"
      stamp "batch_bench round $round: BASE"; batch "$BASE" "base-$round"
    done
  else
    stamp "batch_bench ${BATCH_SIZES:-64} ${MIX:-mixed}"; batch . this
  fi
fi

if part server && [ "${LOADS:-whole}" != whole ] && fits 100 "server"; then
  # the streaming loads, BASE's server then this tree's (once per setting of SERVER_ARGS, split at |), each
  # with this tree's tools/server_load.py
  arms=(); [ -n "${BASE:-}" ] && arms+=("$BASE|base|")
  IFS='|' read -ra settings <<< "${SERVER_ARGS:-}"; [ ${#settings[@]} = 0 ] && settings=("")
  for i in "${!settings[@]}"; do arms+=(".|this$( [ "$i" -gt 0 ] && echo "-$((i + 1))")|${settings[$i]}"); done
  rm -f "$R"/stream-*.json  # a warm machine's earlier run is not this one's
  n=${#arms[@]}
  for arm in "${arms[@]}"; do
    IFS='|' read -r tree name args <<< "$arm"
    [ "$name" = base ] && cp -r omnivoice/ggml/_lib omnivoice/ggml/_cdef.h omnivoice/ggml/_consts.json "$tree/omnivoice/ggml/"
    # a setting's NAME=VALUE words are the server's environment (OMNIVOICE_SHAPE_CLASSES=1), the others its flags
    envs=() extra=()
    for a in $args; do if [[ $a =~ ^[A-Z][A-Z0-9_]*= ]]; then envs+=("$a"); else extra+=("$a"); fi; done
    [ ${#extra[@]} -gt 0 ] && extra=(--server-args "${extra[@]}")
    label="$name${args:+ ($args)}"; label=${label% ()}
    stamp "server_load $LOADS: $label, tree $tree"
    # the server subprocess is the tree's package: its folder first on the path, and the current directory
    # shellcheck disable=SC2086  # LOAD_ARGS: several arguments
    (cd "$tree" && env "${envs[@]}" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
      timeout $(( ($(left) - 10) / n )) python3 \
      "$OLDPWD/tools/server_load.py" --backend "$BACKEND" --model "$MODEL" --codec "$CODEC" --loads "$LOADS" \
      --clients "${CLIENTS:-1,8,32,64}" --requests "${REQUESTS:-3}" --ttfb-repeats 0 --ws-repeats 0 --label "$label" \
      ${LOAD_ARGS:-} --json "$R/stream-$name.json" --server-log "$R/server-$name.log" "${extra[@]}") 2>&1 |
      tee "$R/stream-$name.md" | grep -vE "^\s*$"
    n=$((n - 1))
  done
  python3 - "$R" "${arms[@]}" <<'EOF2'
import json, sys, pathlib
sys.path.insert(0, "tools")
from server_load import streaming_table
R = pathlib.Path(sys.argv[1])
rows = []
for arm in sys.argv[2:]:
    f = R / f"stream-{arm.split('|')[1]}.json"
    if f.is_file():
        result = json.loads(f.read_text())
        table = streaming_table(result["streaming_loads"], result["label"])
        rows += table if not rows else table[2:]
print("\n".join(rows))
EOF2
elif part server && [ "${LOADS:-whole}" = whole ] && fits 100 "server"; then
  stamp "server_load ${LOAD_ARGS:-}"
  # shellcheck disable=SC2086  # LOAD_ARGS: several arguments
  timeout $(( $(left) - 10 )) python3 tools/server_load.py --backend "$BACKEND" --model "$MODEL" --codec "$CODEC" \
    --clients "${CLIENTS:-1,8,32}" --requests "${REQUESTS:-4}" --ttfb-repeats "${TTFB_REPEATS:-10}" \
    --ws-repeats "${WS_REPEATS:-10}" ${LOAD_ARGS:-} \
    --json "$R/server_load.json" --server-log "$R/server.log" 2>&1 | tee "$R/server_load.md"
fi

if part vulkan && fits 200 "vulkan"; then
  vulkan_module
  if [ -n "${VULKAN_TESTS-tests/nn tests/ggml tests/models}" ] && fits 150 "Vulkan tests"; then
    stamp "tests on Vulkan (float32 shaders: the conftest's OMNIVOICE_EXACT_F32=1)"
    # shellcheck disable=SC2086  # VULKAN_TESTS: several paths
    OMNIVOICE_TEST_BACKEND=vulkan timeout $(( $(left) / 3 )) python3 -m pytest -q -p no:cacheprovider -rs \
      ${VULKAN_TESTS-tests/nn tests/ggml tests/models} > "$R/tests-vulkan.log" 2>&1
    tail -8 "$R/tests-vulkan.log"
  fi
  convert f16 f32 || { tail -20 "$R/checkpoint.log"; exit 1; }
  stamp "Vulkan LM steps"
  OMNIVOICE_EXACT_F32=0 timeout $(( $(left) - 10 )) python3 tools/lm_step_time.py --gguf-dir "$W/gguf" \
    --backend vulkan --quants f16,bf16 --shapes auto5,clone5,auto20 --json "$R/steps-vulkan.jsonl" --label default
  OMNIVOICE_EXACT_F32=1 timeout $(( $(left) - 10 )) python3 tools/lm_step_time.py --gguf-dir "$W/gguf" \
    --backend vulkan --quants f32 --shapes auto5,clone5,auto20 --json "$R/steps-vulkan.jsonl" --label float32
  for exact in 1 0; do
    fits 50 "Vulkan parity (exact $exact)" || break
    stamp "Vulkan F32 parity, OMNIVOICE_EXACT_F32=$exact"
    OMNIVOICE_EXACT_F32=$exact timeout $(( $(left) - 5 )) python3 tools/parity.py lm --checkpoint "$CKPT" \
      --gguf-dir "$W/gguf" --ref .devcarry/ref_auto5.npz --backend vulkan --flash --quants f32 \
      --json "$R/parity-vulkan-$exact.json" 2>&1 | grep -v '^{' | tail -4
  done
fi

if part vulkan_f32 && fits 200 "vulkan_f32"; then
  TINY=$W/ckpt-tiny  # the tiny seed-0 checkpoint (the goldens' own) needs no ggml: made beside the compile
  ( [ -f "$TINY/config.json" ] || python3 tools/make_checkpoint.py --preset tiny --seed 0 -o "$TINY" ) \
    > "$R/checkpoint-tiny.log" 2>&1 &
  tiny_pid=$!
  vulkan_module
  python3 -m omnivoice.tts --list-devices | tee "$R/devices.txt"
  wait $tiny_pid || { tail -20 "$R/checkpoint-tiny.log"; exit 1; }
  stamp "F32 LM by file, folder and checkpoint, and with the F16 shaders"
  timeout $(( $(left) / 2 )) python3 tools/parity.py lm --ways --checkpoint "$TINY" --backend vulkan \
    --json "$R/vulkan_f32.json"
  echo "check exit status: $?"
  stamp "the load line of the CLI (F32 file, no --quant)"
  python3 -m omnivoice.tts "Hello." --model "$TINY-gguf/omnivoice-base-F32.gguf" \
    --codec "$TINY-gguf/omnivoice-tokenizer-F32.gguf" --backend vulkan --steps 4 --seed 0 -o "$W/hello.wav" 2>&1 |
    grep -i "arithmetic"
  if fits 60 "tests/parity on Vulkan"; then
    stamp "tests/parity on Vulkan, OMNIVOICE_EXACT_F32=0 (the F32 file alone asks for F32)"
    OMNIVOICE_EXACT_F32=0 OMNIVOICE_TEST_BACKEND=vulkan timeout $(( $(left) - 10 )) python3 -m pytest -q \
      -p no:cacheprovider tests/parity --junitxml="$R/tests-parity.xml" 2>&1 | tail -15
  fi
fi

install_ray() {  # Ray (and Serve's wheels) from the carried .whl-ray, unless the image has them
  python3 -c "import ray.serve" 2>/dev/null && return 0
  stamp "unpack Ray (.whl-ray)"
  { xz -T0 -dc .whl-ray/ray.tar.xz | tar -C "$W/site" -xf - &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .whl-ray/*.whl; } \
    > "$R/ray-install.log" 2>&1 || { tail -20 "$R/ray-install.log"; exit 1; }
}

if part ray && fits 120 "ray"; then
  install_ray
  M=$W/ray-manifest/lines.jsonl
  python3 tools/batch_bench.py --write-manifest "$M" --sizes "${RAY_N:-64}" --mix multilingual --steps 32 || exit 1
  export RAY_USAGE_STATS_ENABLED=0; unset RAY_ADDRESS
  for n in 1 2; do
    [ "$BACKEND" = cuda ] && (( n > $(nvidia-smi -L | wc -l) )) && { stamp "skipped ray on $n GPUs"; break; }
    stamp "omnivoice.batch --ray on $n GPU(s)"
    if [ "$BACKEND" = cuda ]; then dev=(--backend cuda); vis=$(seq -s, 0 $((n - 1))); else dev=(--cpu-actors $n --threads 1); vis=; fi
    # --ray without an address: the CLI starts a local cluster and stops only what it started
    CUDA_VISIBLE_DEVICES=$vis timeout --signal=INT --kill-after=15 $(( ($(left) - 20) * n / 2 )) \
      python3 -m omnivoice.batch "$M" -o "$W/ray-out-$n" --model "$MODEL" --batch-size 32 --save-tokens --ray \
      "${dev[@]}" 2>&1 | tee "$R/ray-$n.log" | grep -E "done:|actor"
  done
  python3 - "$W" <<'EOF'
import sys, pathlib
import numpy as np
W = pathlib.Path(sys.argv[1])
one, two = W / "ray-out-1", W / "ray-out-2"
names = sorted(p.name for p in one.glob("*.npy"))
same = sum((two / n).is_file() and np.array_equal(np.load(one / n), np.load(two / n)) for n in names)
print(f"tokens equal between one and two actors: {same} of {len(names)} items")
EOF
fi
if part serve && fits 240 "serve"; then
  install_ray
  export RAY_USAGE_STATS_ENABLED=0; unset RAY_ADDRESS
  if [ "$BACKEND" = cuda ]; then one=(--gpus-per-replica 1); half=(--gpus-per-replica 0.5)
  else one=(--gpus-per-replica 0 --threads 1); half=("${one[@]}"); fi
  n=3
  for arm in plain ray1 ray2; do
    case $arm in
      plain) extra=() ;;
      ray1) extra=(--server-args --ray --replicas 1 "${one[@]}") ;;
      ray2) extra=(--server-args --ray --replicas 2 "${half[@]}") ;;
    esac
    fits 70 "serve $arm" || break
    stamp "server_load: $arm ${extra[*]}"
    # each arm gets an equal share of what is left (a Ray arm starts its own local cluster and stops it)
    timeout $(( ($(left) - 10) / n )) python3 tools/server_load.py --backend "$BACKEND" --model "$MODEL" \
      --codec "$CODEC" --clients "${CLIENTS:-1,8,32}" --requests "${REQUESTS:-4}" \
      --ttfb-repeats "${TTFB_REPEATS:-10}" --ws-repeats 0 --json "$R/serve-$arm.json" \
      --server-log "$R/serve-$arm.log" "${extra[@]}" 2>&1 | tee "$R/serve-$arm.md"
    n=$((n - 1))
  done
  python3 - "$R" <<'EOF'
import json, sys, pathlib
R = pathlib.Path(sys.argv[1])
def pct(v, q):
    v = sorted(v); k = (len(v) - 1) * q; lo = int(k); hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)
arms = {a: json.loads((R / f"serve-{a}.json").read_text()) for a in ("plain", "ray1", "ray2")
        if (R / f"serve-{a}.json").is_file()}
if arms:
    counts = [r["clients"] for r in next(iter(arms.values()))["concurrency"]]
    print("| server | first audio p50 / p99 ms (runs) | "
          + " | ".join(f"{c} clients: audio s/s, p50 latency s" for c in counts) + " |")
    print("|---|---|" + "---|" * len(counts))
    for a, res in arms.items():
        fa = [r["first_audio_s"] for r in res["first_audio"]["runs"]]
        cells = [f"{r['audio_s_per_s']:.1f}, {r['p50_s']:.3f}" for r in res["concurrency"]]
        print(f"| {a} | {pct(fa, .5) * 1000:.0f} / {pct(fa, .99) * 1000:.0f} ({len(fa)}) | " + " | ".join(cells) + " |")
EOF
fi
if part cuda_wheel && fits 420 "cuda_wheel"; then
  ls .whl-build/*.whl >/dev/null 2>&1 ||
    { echo "error: no build tools in .whl-build (WHEEL_TOOLS=1 prepare_carry.sh)"; exit 1; }
  stamp "wheel build tools, ggml source"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/wheel-tools" \
    .whl-build/*.whl || exit 1
  src || exit 1
  TINY=$W/wheel-check/ckpt-tiny  # the check's checkpoint, made beside the build
  ( [ -f "$TINY/config.json" ] || python3 tools/make_checkpoint.py --preset tiny --seed 0 -o "$TINY" ) \
    > "$R/checkpoint-tiny.log" 2>&1 &
  tiny_pid=$!
  # the wheel's build replaces omnivoice/ggml/_lib: this machine's own build is put back after it
  rm -rf "$W/lib-kept"; [ -d omnivoice/ggml/_lib ] && cp -a omnivoice/ggml/_lib "$W/lib-kept"
  # NCCL off: ggml-cuda links it (where the machine has it) for a model split over GPUs in one process, which
  # the package never does (a process runs on one device; several GPUs are Ray's); auditwheel grafted it,
  # 179 of the wheel's 229 MiB (2026-12-05, H100 image: libnccl 2.28.3)
  WHEEL_CMAKE_ARGS=${WHEEL_CMAKE_ARGS:--DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS:-90} -DGGML_CUDA_NCCL=OFF}
  stamp "wheel: CMAKE_ARGS=$WHEEL_CMAKE_ARGS (and the CPU backend for every x86 level, unless they say otherwise)"
  PYTHONPATH=$W/wheel-tools${PYTHONPATH:+:$PYTHONPATH} PATH=$W/wheel-tools/bin:$PATH CMAKE_ARGS=$WHEEL_CMAKE_ARGS \
    AUDITWHEEL_EXCLUDE="libcuda.so.1 libcudart.so.* libcublas.so.* libcublasLt.so.*" \
    timeout $(( $(left) - 60 )) python3 tools/wheel.py build --no-isolation --out "$W/dist" \
    --json "$R/cuda_wheel.json" > "$R/cuda_wheel-build.log" 2>&1
  built=$?
  [ -d "$W/lib-kept" ] && { rm -rf omnivoice/ggml/_lib && mv "$W/lib-kept" omnivoice/ggml/_lib; }
  (( built == 0 )) || { tail -60 "$R/cuda_wheel-build.log"; exit 1; }
  python3 -c "import json; r = json.load(open('$R/cuda_wheel.json')); print(r['auditwheel_show']);
print('wheel', r['wheel'].rsplit('/', 1)[1], r['bytes'], 'bytes,', r['mib'], 'MiB; before repair', r['raw_mib'], 'MiB');
print('CPU modules', len(r['cpu_modules']), '| kernel levels', r['ops_levels'], '| grafted', r['grafted']);
print('libraries', [n.rsplit('/', 1)[1] for n in r['libraries']])"
  wait $tiny_pid || { tail -20 "$R/checkpoint-tiny.log"; exit 1; }
  stamp "the wheel in a fresh venv (--no-index, no compiler on PATH) speaks on $BACKEND"
  # the wheelhouse: .whl for what the image lacks (gguf, soundfile, cffi), the image's numpy and scipy inherited
  timeout $(( $(left) - 5 )) python3 tools/wheel.py check "$W"/dist/*manylinux*.whl --wheelhouse .whl \
    --backend "$BACKEND" --inherit-site --work "$W/wheel-check" --json "$R/cuda_wheel-check.json" \
    > "$R/cuda_wheel-check.log" 2>&1
  echo "check exit status: $?"
  python3 -c "import json; r = json.load(open('$R/cuda_wheel-check.json')); print({k: r.get(k) for k in
  ('ok', 'package', 'wav_seconds', 'wav_peak', 'cpu_module', 'ops_library', 'tts_stderr')})" ||
    tail -30 "$R/cuda_wheel-check.log"
fi
stamp "done"
