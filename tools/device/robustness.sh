#!/usr/bin/env bash
# Issue 14.2 on a GPU (about 30 s): a graph too large for the device is refused from its measured plan
# (MemoryError naming the device's memory, nothing allocated), and a device allocation that fails anyway is a
# MemoryError, not a crash. Needs ggml's GPU build in place: run it after gpu_check.sh or lm_profile.sh in the
# same device call, e.g.
#
#     bash tools/device/gpu_check.sh; BACKEND=cuda bash tools/device/robustness.sh
#
# BACKEND=cpu runs the same checks on the CPU (what CI's tests/robustness/test_limits.py does too).
set -uo pipefail
BACKEND=${BACKEND:-cuda}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
{
  OMNIVOICE_TEST_BACKEND=$BACKEND timeout 120 python3 -m pytest -q -p no:cacheprovider \
    tests/robustness/test_limits.py -k "graph_too_large"
  timeout 120 python3 - "$BACKEND" <<'PY'
import sys
import numpy as np
from omnivoice.ggml import Graph, Runtime, lib, memory, new_tensor, types

with Runtime(sys.argv[1]) as rt:
    memory.available = lambda backend: None  # skip the plan: the device allocation itself must fail cleanly
    g = Graph(rt, what="a 1 TiB graph")
    x = g.input("x", np.float32, (4,))
    g.output("y", lib.ggml_repeat(g.ctx, x, new_tensor(g.ctx, types.F32, (1 << 38,))))
    try:
        g.allocate()
        print("FAIL: a 1 TiB graph was allocated on", rt.device.spec)
    except MemoryError as e:
        print("ok: MemoryError:", e)
PY
} 2>&1 | tee "$OUT/robustness_$BACKEND.log"
