#!/usr/bin/env bash
# Run HERE (not on the device): Ray for the device machine's Python 3.12, small enough to share one call's
# 64 MiB carry with the wheels and the ggml source (h200x2_ray.sh runs in one call).
#
# Ray's wheel is ~79 MB. Left out: ray/jars (32 MB of Java workers), rllib and serve (never imported by
# ray.data or the actors) and the dashboard's web client (the head runs with --include-dashboard=false);
# the rest, xz-compressed, is .whl-ray/ray.tar.xz (~28 MB, unpacked into site-packages as the wheel would
# be), beside the wheels of the one dependency the device image lacks (jsonschema and its own, ~0.5 MB).
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.whl-ray   # git-ignored
mkdir -p "$D"
[ -f "$D/ray.tar.xz" ] && { ls -la "$D"; exit 0; }
pip=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"${pip[@]}" -d "$D" jsonschema==4.25.1 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.28.0
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
"${pip[@]}" -d "$T" ray==2.60.0
# extracted keeping each file's mode (zipfile -e drops it: gcs_server and raylet then fail with EACCES)
python3 - "$T" <<'EOF'
import pathlib, sys, zipfile
t = pathlib.Path(sys.argv[1])
with zipfile.ZipFile(next(t.glob("ray-*.whl"))) as z:
    for info in z.infolist():
        path = pathlib.Path(z.extract(info, t / "x"))
        mode = info.external_attr >> 16
        if mode and not info.is_dir():
            path.chmod(mode & 0o777)
EOF
rm -rf "$T/x/ray/jars" "$T/x/ray/rllib" "$T/x/ray/serve" "$T/x/ray/dashboard/client/build"
tar -C "$T/x" -cf - . | xz -T0 -6 > "$D/ray.tar.xz"
ls -la "$D"
