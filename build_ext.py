"""Build ggml for omnivoice: fetch the pinned source, compile it with CMake, generate the cffi declarations.

Three steps, each usable alone from a checkout:

    python build_ext.py fetch     # download + verify + extract the pinned ggml into vendor/ggml/src
    python build_ext.py build     # cmake configure + build, copy the libraries into omnivoice/ggml/_lib
    python build_ext.py all       # both, then generate omnivoice/ggml/_cdef.h (what `pip install` runs)

Backends are chosen with CMAKE_ARGS, as llama-cpp-python does:

    CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90" pip install .
    CMAKE_ARGS="-DGGML_VULKAN=ON" pip install .

A wheel (`python -m build --wheel`, `pip wheel .`, and so `pip install .`) is built to run on any x86-64 CPU:
GGML_CPU_ALL_VARIANTS, ggml's CPU backend once per x86 level and the package's kernels once per level, each
loaded at run time by the CPU's features (CMakeLists.txt). An editable install (`pip install -e .`) runs from
its checkout, on the machine that built it, and compiles the CPU code once for that machine (-march=native), as
does any build whose CMAKE_ARGS names OMNIVOICE_CPU_NATIVE or GGML_CPU_ALL_VARIANTS itself:

    CMAKE_ARGS="-DOMNIVOICE_CPU_NATIVE=ON" pip install .      # a wheel for this machine only, built faster

The cffi declarations are generated from the very headers that were compiled (preprocessed with the same
GGML_MAX_NAME), so the bindings cannot drift from the library. They are build outputs, never committed.

This file is also the PEP 517 build backend (pyproject.toml points here through backend-path): it re-exports
setuptools' hooks; its build_wheel and build_editable run the three steps above first (a failure fails the
install), and its build_py puts the libraries into the wheel.

Each configuration (pinned source, generator, CMAKE_ARGS) builds in a folder of its own, build/cmake-<hash>, so
switching backends never reuses a cache made with other settings, and a successful build replaces
omnivoice/ggml/_lib as a whole (its build.json says what it was built from). A build that asked for a GPU
backend and made no library for it fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent
VENDOR = ROOT / "vendor" / "ggml"
LOCK = VENDOR / "ggml.lock"
PATCHES = VENDOR / "patches"
SRC = VENDOR / "src"
CACHE = Path(os.environ.get("OMNIVOICE_GGML_CACHE", VENDOR / "cache"))
PKG_GGML = ROOT / "omnivoice" / "ggml"
LIB_OUT = PKG_GGML / "_lib"
CDEF_OUT = PKG_GGML / "_cdef.h"
CONSTS_OUT = PKG_GGML / "_consts.json"

GGML_MAX_NAME = 128  # must equal the CMakeLists.txt definition
HEADERS = ["ggml.h", "ggml-alloc.h", "ggml-backend.h", "gguf.h"]


def log(msg: str) -> None:
    print(f"[omnivoice build] {msg}", file=sys.stderr, flush=True)


def read_lock() -> dict:
    return json.loads(LOCK.read_text())


# omnivoice/digest.py's hasher, run by its path: the build does not import the package it builds
sha256_of = runpy.run_path(str(ROOT / "omnivoice" / "digest.py"))["file_sha256"]


# ----------------------------------------------------------------------------------------------------- fetch

def _download(lock: dict, archive: Path) -> None:
    """Fetch the pinned sdist: straight from the package index's simple page, else through `pip download`.

    The simple page is read first because `pip download` of an sdist builds its metadata, which needs the
    package's own build backend and fails inside some build environments.
    """
    import urllib.parse
    import urllib.request

    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    project = re.sub(r"[-_.]+", "-", lock["package"]).lower()
    log(f"downloading {lock['filename']} from {index}")
    try:
        page_url = f"{index}/{project}/"
        page = urllib.request.urlopen(page_url, timeout=60).read().decode("utf-8", "replace")
        links = [urllib.parse.urljoin(page_url, h) for h in re.findall(r'href="([^"]+)"', page)]
        url = next(u for u in links if urllib.parse.urlparse(u).path.endswith("/" + lock["filename"]))
        tmp = archive.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=300) as r, open(tmp, "wb") as f:
            shutil.copyfileobj(r, f)
        tmp.replace(archive)
        return
    except Exception as e:  # no network route to the index page, or a mirror without it: let pip try
        log(f"simple index download failed ({e}); trying pip download")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", tmp,
                        f"{lock['package']}=={lock['version']}"], check=True)
        got = Path(tmp) / lock["filename"]
        if not got.exists():
            raise RuntimeError(f"pip did not produce {lock['filename']} (got {os.listdir(tmp)})")
        shutil.move(str(got), archive)


def source_key(lock: dict) -> str:
    """What the extracted tree is made of: the pinned archive's sha256, then each patch's, in the order applied."""
    return ",".join([lock["sha256"], *(f"{p['file']}:{p['sha256']}" for p in lock.get("patches", []))])


class Hunk(NamedTuple):
    """One hunk of a unified diff: its header, the 0-based line of the file where it starts, the lines it expects
    there (context and removed) and the lines it leaves (context and added)."""
    header: str
    first: int
    old: list[str]
    new: list[str]


def parse_unified_diff(text: str, name: str = "patch") -> list[tuple[str, list[Hunk]]]:
    """The files (paths as `+++ b/PATH` names them) and hunks of a unified diff as `diff -u` writes it; a malformed
    diff is an error naming the line."""
    lines = text.splitlines(keepends=True)
    files: list[tuple[str, list[Hunk]]] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise RuntimeError(f"{name}: line {i + 2}: expected a '+++ ' header after '--- '")
        rel = lines[i + 1][4:].split("\t")[0].strip()
        rel = rel[2:] if rel.startswith("b/") else rel
        hunks: list[Hunk] = []
        i += 2
        while i < len(lines) and lines[i].startswith("@@ "):
            m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@", lines[i])
            if not m:
                raise RuntimeError(f"{name}: line {i + 1}: not a hunk header: {lines[i].strip()!r}")
            header = lines[i].strip()
            n_old, n_new = int(m.group(2) or 1), int(m.group(3) or 1)
            hunk = Hunk(header, int(m.group(1)) - (1 if n_old else 0), [], [])
            i += 1
            while n_old or n_new:
                if i >= len(lines):
                    raise RuntimeError(f"{name}: {rel}: hunk {header} ends early")
                line = " \n" if lines[i] == "\n" else lines[i]  # an empty context line whose space an editor stripped
                tag, body = line[:1], line[1:]
                if tag not in (" ", "-", "+"):
                    raise RuntimeError(f"{name}: line {i + 1}: unexpected {lines[i].strip()!r} in hunk {header}")
                if tag != "+":
                    hunk.old.append(body)
                    n_old -= 1
                if tag != "-":
                    hunk.new.append(body)
                    n_new -= 1
                i += 1
            if i < len(lines) and lines[i].startswith("\\"):
                raise RuntimeError(f"{name}: {rel}: files without a final newline are not supported")
            hunks.append(hunk)
        files.append((rel, hunks))
    return files


def patch_target(root: Path, rel: str, name: str = "patch") -> Path:
    """The file below `root` that a diff's path names; an error where it is absent or outside `root`."""
    target = root / rel
    if Path(rel).is_absolute() or ".." in Path(rel).parts or not target.is_file():
        raise RuntimeError(f"{name}: {rel}: no such file in {root}")
    return target


def apply_unified_diff(text: str, root: Path, name: str = "patch") -> None:
    """Apply a unified diff (`--- a/PATH`, `+++ b/PATH` headers, as `diff -u` writes them) to the files below
    `root`.

    Exact: every hunk's context and removed lines must match the file at the line its header names, or the file
    is left as it was and the error names it and the hunk. No fuzz and no offsets: the patches are ours, made
    against the pinned source, so a mismatch means the source is not what the lock says (vendor/ggml/reapply.py
    reports, for another source, which hunks still apply and where). No dependency on the `patch` program (a
    fresh CI machine need not have it)."""
    for rel, hunks in parse_unified_diff(text, name):
        target = patch_target(root, rel, name)
        old = target.read_text(encoding="utf-8").splitlines(keepends=True)
        out: list[str] = []
        at = 0  # lines of `old` consumed so far
        for h in hunks:
            if h.first < at:
                raise RuntimeError(f"{name}: {rel}: hunk {h.header} overlaps the one before it")
            got = old[h.first:h.first + len(h.old)]
            if got != h.old:
                bad = h.first + next((k for k, (a, b) in enumerate(zip(got, h.old)) if a != b), len(got))
                raise RuntimeError(f"{name}: {rel}: hunk {h.header} does not match line {bad + 1} of the file "
                                   "(a source other than the pinned one, or the patch applied already?)")
            out += old[at:h.first] + h.new
            at = h.first + len(h.old)
        out += old[at:]
        target.write_text("".join(out), encoding="utf-8")


def apply_patches(lock: dict, dest: Path) -> None:
    """Apply the lock's patches (vendor/ggml/patches, unified diffs against the ggml folder) in order, each
    checked against its sha256 first."""
    for entry in lock.get("patches", []):
        path = PATCHES / entry["file"]
        digest = sha256_of(path) if path.exists() else "missing"
        if digest != entry["sha256"]:
            raise RuntimeError(f"{path.relative_to(ROOT)}: sha256 {digest} does not match {entry['sha256']} in "
                               f"{LOCK.relative_to(ROOT)}; refusing to build from it")
        log(f"applying {path.name}")
        apply_unified_diff(path.read_text(), dest, path.name)


def fetch() -> Path:
    """Download (once), verify and extract the pinned ggml source and apply our patches to it; return the ggml
    source directory."""
    lock = read_lock()
    dest = SRC / "ggml"
    stamp = SRC / ".sha256"
    key = source_key(lock)
    if dest.joinpath("CMakeLists.txt").exists() and stamp.exists() and stamp.read_text() == key:
        return dest

    CACHE.mkdir(parents=True, exist_ok=True)
    archive = CACHE / lock["filename"]
    if not archive.exists() or sha256_of(archive) != lock["sha256"]:
        _download(lock, archive)

    digest = sha256_of(archive)
    if digest != lock["sha256"]:
        archive.unlink()
        raise RuntimeError(f"{archive.name}: sha256 {digest} does not match the pin {lock['sha256']} "
                           f"in {LOCK.relative_to(ROOT)}; refusing to build from it")

    log(f"extracting {lock['ggml_subdir']} from {archive.name}")
    if SRC.exists():
        shutil.rmtree(SRC)
    SRC.mkdir(parents=True)
    prefix = lock["ggml_subdir"].rstrip("/") + "/"
    with tarfile.open(archive) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(prefix) or not (m.isfile() or m.isdir()):
                continue
            rel = m.name[len(prefix):]
            if not rel or rel.startswith("/") or ".." in Path(rel).parts:
                continue
            m.name = "ggml/" + rel
            members.append(m)
        tar.extractall(SRC, members=members)
    apply_patches(lock, dest)  # a failure leaves no stamp: the next fetch extracts afresh
    stamp.write_text(key)
    return dest


# ----------------------------------------------------------------------------------------------------- build

# Backend switches whose library must exist after a build that asked for them (a configuration that silently
# dropped one, or a stale library folder, must not pass for a GPU build).
BACKEND_LIBS = {"GGML_CUDA": "ggml-cuda", "GGML_VULKAN": "ggml-vulkan", "GGML_METAL": "ggml-metal",
                "GGML_HIP": "ggml-hip", "GGML_SYCL": "ggml-sycl", "GGML_BLAS": "ggml-blas",
                "GGML_OPENCL": "ggml-opencl"}
_TRUE = {"1", "on", "yes", "true", "y"}


def cmake_args_from_env() -> list[str]:
    """CMAKE_ARGS split as a shell would, with CMAKE_BUILD_TYPE defaulting to Release."""
    args = shlex.split(os.environ.get("CMAKE_ARGS", ""))
    if not any(a.startswith("-DCMAKE_BUILD_TYPE") for a in args):
        args.append("-DCMAKE_BUILD_TYPE=Release")
    return args


def requested_backends(cmake_args: list[str]) -> list[str]:
    """The ggml backend libraries that `-DGGML_<NAME>=ON` arguments ask for (the last setting of each wins)."""
    wanted: dict[str, bool] = {}
    for a in cmake_args:
        m = re.fullmatch(r"-D(GGML_[A-Z]+)(?::BOOL)?=(.*)", a)
        if m and m.group(1) in BACKEND_LIBS:
            wanted[m.group(1)] = m.group(2).strip().lower() in _TRUE
    return [BACKEND_LIBS[k] for k, on in wanted.items() if on]


def portable_cmake_args(cmake_args: str) -> list[str]:
    """CMAKE_ARGS of a wheel: GGML_CPU_ALL_VARIANTS on, first, unless they name it or OMNIVOICE_CPU_NATIVE
    themselves (a wheel is copied to other machines; a CPU module built with -march=native dies there of an illegal
    instruction)."""
    args = shlex.split(cmake_args)
    if any(re.match(r"-D(GGML_CPU_ALL_VARIANTS|OMNIVOICE_CPU_NATIVE)\b", a) for a in args):
        return args
    return ["-DGGML_CPU_ALL_VARIANTS=ON", *args]


def cuda_version(build_dir: Path) -> str | None:
    """The CUDA compiler's version (major.minor) that CMake found for a build folder, None where it built no CUDA."""
    for f in sorted(build_dir.glob("CMakeFiles/*/CMakeCUDACompiler.cmake")):
        m = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "(\d+)\.(\d+)', f.read_text(errors="replace"))
        if m:
            return f"{m.group(1)}.{m.group(2)}"
    return None


def local_version(info: dict) -> str:
    """The PEP 440 local version label of a wheel of this build (build.json's `info`): `cu130` for ggml's CUDA
    backend built with CUDA 13.0, `vulkan` for its Vulkan backend, joined by dots; empty for a CPU-only build. A GPU
    wheel is then `omnivoice_ggml-0.1.0+cu130-py3-none-manylinux_...whl`, never mistaken for the CPU wheel, as
    PyTorch names its CUDA wheels."""
    libs = info.get("libraries", [])
    label = []
    if any(n.startswith("libggml-cuda") for n in libs):
        label.append("cu" + info["cuda_version"].replace(".", "") if info.get("cuda_version") else "cuda")
    if any(n.startswith("libggml-vulkan") for n in libs):
        label.append("vulkan")
    return ".".join(label)


def build_key(cmake_args: list[str], generator: str | None, source: str) -> str:
    """The name of the build folder of one configuration: the pinned source and its patches (source_key), the
    generator and CMAKE_ARGS.

    A new configuration gets a folder of its own instead of reusing a CMake cache that still holds the old
    settings: CMake keeps every -D it was ever given, so `-DGGML_CUDA=ON` once would stay on for good, and a
    later CUDA build on top of a CPU cache would depend on what that cache remembers.
    """
    blob = json.dumps({"ggml": source, "generator": generator or "", "args": cmake_args}, sort_keys=True)
    return "cmake-" + hashlib.sha256(blob.encode()).hexdigest()[:12]


def _cached_tool(build_dir: Path, key: str) -> str | None:
    """The program a build folder's CMake cache names under `key` (CMAKE_COMMAND, CMAKE_MAKE_PROGRAM), where it
    still exists."""
    try:
        text = (build_dir / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(rf"^{key}:\w+=(.+)$", text, re.M)
    return m.group(1).strip() if m and os.access(m.group(1).strip(), os.X_OK) else None


def cmake_program(build_dir: Path) -> str:
    """The CMake that made this build folder where it is still there, else the one on PATH.

    pip's isolated build installs the newest CMake and ninja from the index; a folder made by another version
    (the system's, an earlier isolated build's) would be regenerated by it, and another ninja may not read the
    old one's logs: either can recompile everything (the portable CPU build takes the longest). The folder's own
    tools keep an unchanged configuration's objects."""
    return _cached_tool(build_dir, "CMAKE_COMMAND") or "cmake"


def configure(source: Path, build_dir: Path, cmake_args: list[str], generator: str | None) -> None:
    """Run CMake's configure step, robust against a cache left by another toolchain.

    The tools are those the cache names while they exist (cmake_program), else named afresh: pip builds in a
    throw-away environment whose `ninja` is gone by the next install, and a cache that still points at it fails
    with "Running '.../ninja' '--version' failed".
    If configuring on top of an existing cache fails all the same, the folder is wiped and configured once from
    scratch; a folder whose very first configure failed is removed, so no half-made cache is left behind.
    """
    def command() -> list[str]:
        tools = []
        if generator == "Ninja":
            ninja = _cached_tool(build_dir, "CMAKE_MAKE_PROGRAM")
            ninja = ninja if ninja and Path(ninja).name.startswith("ninja") else shutil.which("ninja")
            tools.append(f"-DCMAKE_MAKE_PROGRAM={ninja}")
        return [cmake_program(build_dir), "-S", str(source), "-B", str(build_dir),
                *(["-G", generator] if generator else []), *tools, *cmake_args]

    fresh = not (build_dir / "CMakeCache.txt").exists()
    log(f"cmake configure in {build_dir.name}: {' '.join(cmake_args)}")
    if subprocess.run(command()).returncode == 0:
        return
    if not fresh:
        log(f"configure on the existing cache of {build_dir} failed; configuring from scratch")
        shutil.rmtree(build_dir)
    try:
        subprocess.run(command(), check=True)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise


def build(build_dir: Path | None = None) -> Path:
    """Configure and build ggml with CMake; replace omnivoice/ggml/_lib with the libraries of this build."""
    fetch()
    lock = read_lock()
    cmake_args = cmake_args_from_env()
    generator = "Ninja" if shutil.which("ninja") else None
    build_dir = Path(build_dir or ROOT / "build" / build_key(cmake_args, generator, source_key(lock)))
    build_dir.mkdir(parents=True, exist_ok=True)
    configure(ROOT, build_dir, cmake_args, generator)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    log(f"cmake build with {jobs} jobs")
    subprocess.run([cmake_program(build_dir), "--build", str(build_dir), "--config", "Release", "-j", jobs], check=True)

    built = build_dir / "lib"
    libs = [p for p in built.iterdir() if re.search(r"\.(so|dylib|dll)(\.|$)", p.name)]
    stems = {re.sub(r"^lib", "", p.name.split(".")[0]) for p in libs}
    # GGML_CPU_ALL_VARIANTS makes ggml-cpu-<level> modules and omnivoice-ops-<level> libraries instead of one each
    missing = [name for name in ["ggml-base", "ggml-cpu", "omnivoice-ops", *requested_backends(cmake_args)]
               if not any(s == name or s.startswith(name + "-") for s in stems)]
    if missing:
        raise RuntimeError(f"the build in {build_dir} made no {', '.join(missing)} library although CMAKE_ARGS "
                           f"asked for it (CMAKE_ARGS={os.environ.get('CMAKE_ARGS', '')!r}); see the CMake output")
    if LIB_OUT.exists():
        shutil.rmtree(LIB_OUT)
    LIB_OUT.mkdir(parents=True)
    for p in libs:
        shutil.copy2(p, LIB_OUT / p.name, follow_symlinks=True)
    (LIB_OUT / "build.json").write_text(json.dumps(
        {"ggml_version": lock["ggml_version"], "ggml_sha256": lock["sha256"],
         "ggml_patches": [p["file"] for p in lock.get("patches", [])], "cmake_args": cmake_args,
         "build_dir": build_dir.name, "libraries": sorted(p.name for p in libs),
         "cuda_version": cuda_version(build_dir)}, indent=1))
    log(f"libraries: {', '.join(sorted(p.name for p in libs))}")
    return LIB_OUT


# ------------------------------------------------------------------------------------------- cffi declarations

_STUB_HEADERS = ["stdbool.h", "stddef.h", "stdint.h", "stdio.h", "stdlib.h", "string.h", "assert.h"]
_C_SIZES = {"int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4, "uint32_t": 4,
            "int64_t": 8, "uint64_t": 8, "float": 4, "double": 8, "size_t": 8, "int": 4, "char": 1}


def _eval_sizeof_bounds(text: str) -> str:
    """cffi cannot size arrays whose bound contains sizeof(...): evaluate those bounds here."""
    def repl(m: re.Match) -> str:
        expr = re.sub(r"sizeof\s*\(\s*(\w+)\s*\)", lambda s: str(_C_SIZES[s.group(1)]), m.group(1))
        if not re.fullmatch(r"[\d\s+\-*/()]+", expr):
            return m.group(0)
        return f"[{int(eval(expr))}]"  # noqa: S307 -- digits and operators only, checked above
    return re.sub(r"\[([^\[\]]*sizeof[^\[\]]*)\]", repl, text)


def generate_cdef(include_dir: Path | None = None) -> str:
    """Preprocess the built ggml headers into declarations that cffi's ABI mode can parse."""
    include_dir = Path(include_dir or SRC / "ggml" / "include")
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as tmp:
        stubs = Path(tmp)
        for h in _STUB_HEADERS:
            (stubs / h).write_text("")
        main = stubs / "all.h"
        main.write_text("".join(f'#include "{h}"\n' for h in HEADERS))
        defs = [f"-DGGML_MAX_NAME={GGML_MAX_NAME}", "-D__attribute__(x)=", "-D__declspec(x)=",
                "-DGGML_RESTRICT=", "-D__restrict=", "-Drestrict="]
        out = subprocess.run([cc, "-E", "-P", "-nostdinc", f"-I{stubs}", f"-I{include_dir}", *defs, str(main)],
                             check=True, capture_output=True, text=True).stdout
        macros = subprocess.run([cc, "-E", "-dM", "-nostdinc", f"-I{stubs}", f"-I{include_dir}", *defs, str(main)],
                                check=True, capture_output=True, text=True).stdout

    out = _eval_sizeof_bounds(out)
    seen: set[str] = set()
    lines = []
    for line in out.splitlines():
        s = line.strip()
        if not s:
            continue
        # The same typedef can appear in several headers; cffi rejects a repeat.
        if s.startswith("typedef") and s.endswith(";") and "{" not in s:
            if s in seen:
                continue
            seen.add(s)
        lines.append(line)
    cdef = "\n".join(lines) + "\n"

    consts = {}
    for m in re.finditer(r"^#define\s+(GGML_\w+|GGUF_\w+)\s+(\(?-?\d+\)?|0x[0-9a-fA-F]+)\s*$", macros, re.M):
        consts[m.group(1)] = int(m.group(2).strip("()"), 0)
    consts["GGML_MAX_NAME"] = GGML_MAX_NAME
    return cdef, consts


def write_cdef() -> None:
    cdef, consts = generate_cdef()
    import cffi  # checked here, at build time, so a broken declaration fails the build and not the import
    cffi.FFI().cdef(cdef)
    CDEF_OUT.write_text(cdef)
    CONSTS_OUT.write_text(json.dumps(consts, indent=1, sort_keys=True))
    log(f"wrote {CDEF_OUT.relative_to(ROOT)} ({len(cdef)} bytes) and {len(consts)} constants")


def build_all() -> None:
    build()
    write_cdef()


# ----------------------------------------------------------------------------------- PEP 517 / setuptools glue

try:
    from setuptools import build_meta as _meta
    from setuptools.command.build_py import build_py as _build_py
except ImportError:  # running `python build_ext.py` without setuptools is fine
    _meta = None
    _build_py = object

if _meta is not None:
    from setuptools.build_meta import *  # noqa: F401,F403 -- this module is the build backend

    # ggml is built in the PEP 517 hooks themselves, before setuptools runs: setuptools runs a customised
    # build_py of an editable install through a wrapper that turns any exception into a warning, so a failed
    # build there ended in "Successfully installed" with the old libraries still in place.
    def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
        os.environ["CMAKE_ARGS"] = shlex.join(portable_cmake_args(os.environ.get("CMAKE_ARGS", "")))
        build_all()
        return _meta.build_wheel(wheel_directory, config_settings, metadata_directory)

    def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
        build_all()
        return _meta.build_editable(wheel_directory, config_settings, metadata_directory)

    class BuildPy(_build_py):
        """build_py that ships the built libraries and declarations inside the package (a wheel's copy)."""

        def run(self):
            target = Path(self.build_lib) / "omnivoice" / "ggml"
            if not getattr(self, "editable_mode", False):
                # setuptools' build folder outlives the install: libraries of an earlier configuration (a CUDA
                # module after switching to a CPU-only build) must not ride along into this wheel.
                shutil.rmtree(target / "_lib", ignore_errors=True)
            super().run()
            if not getattr(self, "editable_mode", False):
                if not (LIB_OUT / "build.json").exists():
                    raise RuntimeError(f"no ggml build in {LIB_OUT}: build through pip or `python build_ext.py all`")
                shutil.copytree(LIB_OUT, target / "_lib", dirs_exist_ok=True)
                for f in (CDEF_OUT, CONSTS_OUT):
                    shutil.copy2(f, target / f.name)

    try:  # setuptools >= 70.1, which pyproject.toml requires for building; absent when run as a script
        from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:
        _bdist_wheel = object

    class BdistWheel(_bdist_wheel):
        """The wheel carries compiled libraries: tag it for this platform, not py3-none-any, and put the package
        at the wheel's root as platlib (a distribution without extension modules is installed as purelib, under
        .data/purelib, and auditwheel refuses to repair a wheel with libraries there). A wheel with a GPU backend
        gets a local version label saying which (local_version)."""

        def finalize_options(self):
            self.distribution.has_ext_modules = lambda: True
            info = LIB_OUT / "build.json"
            label = local_version(json.loads(info.read_text())) if info.exists() else ""
            meta = self.distribution.metadata
            if label and "+" not in meta.version:  # before egg_info is finalized: it names the dist-info folder
                meta.version = f"{meta.version}+{label}"
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat


if __name__ == "__main__":
    steps = {"fetch": fetch, "build": build, "cdef": write_cdef, "all": build_all}
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what not in steps:
        sys.exit(f"usage: python build_ext.py [{'|'.join(steps)}]")
    steps[what]()
