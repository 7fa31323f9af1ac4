#!/usr/bin/env bash
# Run HERE (not on the device): Ray for the device machine's Python 3.12, in pieces that fit a device call.
#
# Ray's wheel (~79 MB) is larger than one call's 64 MiB carry. 32 MB of it is ray/jars (Java workers, not
# used here), so the rest is split by file into two zips of ~23 MB each (.whl-ray/ray-part1.zip, -part2.zip;
# together they unpack into exactly the wheel's other files), plus the wheels of the one dependency the device
# image lacks (jsonschema and its own). tools/device/h200x2_ray.sh takes part 1 in a first call ("stash",
# which also does the setup) and part 2 in the second ("run").
set -euo pipefail
cd "$(dirname "$0")/../.."
D=.whl-ray   # git-ignored
mkdir -p "$D"
pip=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$D")
"${pip[@]}" ray==2.60.0
"${pip[@]}" jsonschema==4.25.1 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==0.28.0
python3 - "$D" <<'EOF'
import sys, zipfile, pathlib
d = pathlib.Path(sys.argv[1])
whl = next(d.glob("ray-*.whl"))
src = zipfile.ZipFile(whl)
items = [i for i in src.infolist() if not i.filename.startswith("ray/jars/")]
half = sum(i.compress_size for i in items) / 2
parts, size = [[], []], 0
for i in items:  # the first half of the bytes to part 1, the rest to part 2
    parts[0 if size < half else 1].append(i)
    size += i.compress_size
for n, part in enumerate(parts, 1):
    with zipfile.ZipFile(d / f"ray-part{n}.zip", "w") as out:
        for i in part:  # each file compressed as it was in the wheel
            out.writestr(i, src.read(i.filename), compress_type=i.compress_type)
whl.unlink()
for p in sorted(d.iterdir()):
    print(f"{p.stat().st_size / 2**20:6.1f} MiB {p}")
EOF
