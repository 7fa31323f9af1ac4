#!/usr/bin/env bash
# Run one timing command on a shared machine as fairly as it allows: one timing at a time
# (flock /tmp/omnivoice-bench.lock), and the command in its own session whose scheduler autogroup gets
# nice -20, so that other users' work (each in its own autogroup, where plain `nice` does not reach) takes the
# cores only when the command leaves them idle. Prints uptime before and after.
#
#     bash tools/bench_lock.sh python3 tools/matmul_bench.py --threads 1,2
#
# Measured on the shared 2-core host at load average 5-6: a one-thread F32 product took 100 ms of wall time for
# 33 ms of CPU time under plain `nice -n -20`, and 41 ms for 41 ms with this wrapper.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
echo "# before: $(uptime)" >&2
rc=0
flock /tmp/omnivoice-bench.lock setsid bash -c '
    if [ -w /proc/$$/autogroup ]; then echo -20 > /proc/$$/autogroup 2>/dev/null || true; fi
    exec nice -n -20 "$@"' bash "$@" || rc=$?
echo "# after: $(uptime)" >&2
exit $rc
