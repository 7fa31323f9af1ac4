#!/usr/bin/env bash
# Long audio on a GPU backend, end to end with the full random checkpoint (about 2 minutes after the setup): a
# 20 s and a 30 s single-chunk text, a long-form text of about a minute, a clone from a reference of the longest length
# synthesize takes (audio.MAX_REFERENCE_SECONDS), and the codec's encode and decode of that reference. Each one
# must finish with the expected length: the codec's activations at 24 000 samples a second are where a kernel
# that puts a tensor's dimension into a launch grid's y or z (at most 65 535) fails, as CUDA's PAD did for 20 s.
#
#     CUDA_LIB_ARCHIVE=.devcarry/cudalib bash tools/device/long_audio.sh     # carry .whl .devcarry/cudalib
# After another script has built ggml and converted the checkpoint (e.g. Vulkan after h200_ggml.sh PART=vulkan,
# with vulkan_env.sh sourced and its PYTHONPATH): GGUF_DIR=/tmp/ovggml/gguf BACKEND=vulkan skips the set-up.
# Results: $OUT/long_audio.log.
set -uo pipefail
t0=$(date +%s)
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/long_audio.log") 2>&1
if [ -n "${GGUF_DIR:-}" ]; then
  stamp() { echo "== $(( $(date +%s) - t0 ))s: $*"; }
  left() { echo $(( ${BUDGET_S:-400} - ($(date +%s) - t0) )); }
  BACKEND=${BACKEND:-cuda}
else
  BUDGET_S=${BUDGET_S:-400} source tools/device/batch_setup.sh || exit 1
  GGUF_DIR=$W/gguf
fi
stamp "long audio on $BACKEND"
timeout $(( $(left) - 5 )) python3 - "$GGUF_DIR" "$BACKEND" <<'PY'
import sys, time
import numpy as np
import omnivoice as ov
from omnivoice.audio import MAX_REFERENCE_SECONDS

model, backend = sys.argv[1], sys.argv[2]
failures = 0
with ov.OmniVoice(model=model, backend=backend) as tts:
    rate = tts.codec.sample_rate
    sentence = "The quick brown fox jumps over the lazy dog near the river bank. "

    def check(what, fn, seconds, tolerance=0.05):
        global failures
        t = time.perf_counter()
        try:
            got = fn()
        except Exception as e:  # a crash of the process shows as the script's exit status
            failures += 1
            print(f"FAIL {what}: {type(e).__name__}: {e}", flush=True)
            return
        ok = abs(got - seconds) <= tolerance * seconds
        failures += not ok
        print(f"{'ok' if ok else 'FAIL'} {what}: {got:.2f} s of audio (expected {seconds:g}), "
              f"{time.perf_counter() - t:.2f} s", flush=True)

    for seconds in (20, 30):  # 30 s is the longest single chunk (Settings.chunk_threshold)
        check(f"one chunk of {seconds} s", lambda: tts.synthesize(sentence * 3, duration=seconds, seed=0,
                                                                  num_step=8).duration, seconds)
    # long form at the text's own pace (with a duration, chunks after the first get the speed factor twice, as
    # in the reference: docs/PARITY.md); its length is the sum of the planned chunks'
    long_text = sentence * 12
    plans = tts.pipeline.plan(long_text, tts.settings(), None)
    check(f"long form, {len(plans)} chunks", lambda: tts.synthesize(long_text, seed=0, num_step=8).duration,
          sum(p.num_target_tokens for p in plans) / 25, 0.1)
    n = int(MAX_REFERENCE_SECONDS * rate)
    t = np.arange(n) / rate
    ref = (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) / 2).astype(np.float32)
    ref += np.random.default_rng(0).normal(0, 0.01, n).astype(np.float32)
    check(f"clone from a {MAX_REFERENCE_SECONDS:g} s reference",
          lambda: tts.synthesize("Hello there.", ref_audio=(ref, rate), ref_text=sentence * 10, duration=5,
                                 seed=0, num_step=8).duration, 5)
    codes = None

    def encode():
        global codes
        codes = tts.codec.encode(ref)
        return codes.shape[-1] / 25

    check(f"codec encode of {MAX_REFERENCE_SECONDS:g} s", encode, MAX_REFERENCE_SECONDS, 0.01)
    if codes is not None:
        check(f"codec decode of {MAX_REFERENCE_SECONDS:g} s", lambda: len(tts.codec.decode(codes)) / rate,
              MAX_REFERENCE_SECONDS, 0.01)
print("failures:", failures)
sys.exit(1 if failures else 0)
PY
echo "exit status $?"
stamp done
