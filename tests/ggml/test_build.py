"""build_ext.py: reinstalls, backend switches and editable installs rebuild correctly or fail loudly (issue 13.1).

The CMake runs here use tiny throw-away projects (a second each); the full `pip install` cases are run by hand
(docs in vendor/ggml/README.md) since a ggml build takes minutes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import build_ext  # noqa: E402

needs_cmake = pytest.mark.skipif(not (shutil.which("cmake") and shutil.which("ninja")),
                                 reason="cmake and ninja are build requirements; this machine has neither")


def project(tmp_path: Path, body: str = "") -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(f"cmake_minimum_required(VERSION 3.18)\nproject(t NONE)\n{body}\n")
    return src


def cache_value(build_dir: Path, key: str) -> str:
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    raise KeyError(key)


def test_each_configuration_builds_in_its_own_folder():
    base = build_ext.build_key(["-DCMAKE_BUILD_TYPE=Release"], "Ninja", "a" * 64)
    assert base == build_ext.build_key(["-DCMAKE_BUILD_TYPE=Release"], "Ninja", "a" * 64)
    others = {build_ext.build_key(["-DGGML_CUDA=ON", "-DCMAKE_BUILD_TYPE=Release"], "Ninja", "a" * 64),
              build_ext.build_key(["-DCMAKE_BUILD_TYPE=Release"], None, "a" * 64),
              build_ext.build_key(["-DCMAKE_BUILD_TYPE=Release"], "Ninja", "b" * 64)}
    assert base not in others and len(others) == 3


def test_the_patches_are_part_of_the_source_key():
    lock = {"sha256": "a" * 64}
    assert build_ext.source_key(lock) == "a" * 64
    one = build_ext.source_key(dict(lock, patches=[{"file": "0001-x.patch", "sha256": "b" * 64}]))
    assert one != build_ext.source_key(lock)
    assert one != build_ext.source_key(dict(lock, patches=[{"file": "0001-x.patch", "sha256": "c" * 64}]))


def test_every_pinned_patch_is_there_with_its_hash():
    for entry in build_ext.read_lock().get("patches", []):
        assert build_ext.sha256_of(build_ext.PATCHES / entry["file"]) == entry["sha256"], entry["file"]


def test_a_patch_applies_in_order_and_a_changed_one_is_refused(tmp_path, monkeypatch):
    tree = tmp_path / "ggml"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "k.cu").write_text("int a = 1;\nint b = 2;\n")
    patches = tmp_path / "patches"
    patches.mkdir()
    head = "--- a/src/k.cu\n+++ b/src/k.cu\n@@ -1,2 +1,2 @@\n"
    (patches / "0001.patch").write_text(head + " int a = 1;\n-int b = 2;\n+int b = 3;\n")
    (patches / "0002.patch").write_text(head + "-int a = 1;\n+int a = 4;\n int b = 3;\n")
    monkeypatch.setattr(build_ext, "PATCHES", patches)
    monkeypatch.setattr(build_ext, "ROOT", tmp_path)
    monkeypatch.setattr(build_ext, "LOCK", tmp_path / "ggml.lock")
    lock = {"patches": [{"file": f, "sha256": build_ext.sha256_of(patches / f)} for f in ("0001.patch", "0002.patch")]}
    build_ext.apply_patches(lock, tree)
    assert (tree / "src" / "k.cu").read_text() == "int a = 4;\nint b = 3;\n"
    lock["patches"][0]["sha256"] = "0" * 64
    with pytest.raises(RuntimeError, match="0001.patch: sha256 .* does not match"):
        build_ext.apply_patches(lock, tree)


def test_a_unified_diff_applies_as_diff_wrote_it(tmp_path):
    """Two files, hunks far apart, an insertion, an empty context line and a removed line that starts with
    dashes: the same result as the files the diff was made from (diff -u itself, where the machine has it)."""
    old = {"a.c": "".join(f"line {n}\n" for n in range(1, 40)).replace("line 29\n", "\n"),
           "sub/b.h": "-- keep\n-- drop\nend\n"}
    new = {"a.c": old["a.c"].replace("line 3\n", "line three\n").replace("line 30\n", "line 30\nadded\n"),
           "sub/b.h": "-- keep\nend\n"}
    before, after, tree = tmp_path / "a", tmp_path / "b", tmp_path / "tree"
    for root, files in ((before, old), (after, new), (tree, old)):
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    if shutil.which("diff"):
        r = subprocess.run(["diff", "-ru", "a", "b"], cwd=tmp_path, capture_output=True, text=True)
        diff = r.stdout
    else:  # what diff -ru writes for these files, headers trimmed
        diff = ("--- a/a.c\n+++ b/a.c\n@@ -1,6 +1,6 @@\n line 1\n line 2\n-line 3\n+line three\n line 4\n line 5\n"
                " line 6\n@@ -28,6 +28,7 @@\n line 28\n \n line 30\n+added\n line 31\n line 32\n line 33\n"
                "--- a/sub/b.h\n+++ b/sub/b.h\n@@ -1,3 +1,2 @@\n -- keep\n--- drop\n end\n")
    build_ext.apply_unified_diff(diff, tree)
    assert {rel: (tree / rel).read_text() for rel in old} == new
    with pytest.raises(RuntimeError, match=r"a.c: hunk @@ -1,6 \+1,6 @@ does not match line 3"):
        build_ext.apply_unified_diff(diff, tree)   # applied already: the file names the hunk that no longer fits
    assert {rel: (tree / rel).read_text() for rel in old} == new
    outside = tmp_path / "outside.c"
    outside.write_text("line 1\n")
    for name in (str(outside), "../outside.c"):   # only files below the tree, whatever the header says
        with pytest.raises(RuntimeError, match="no such file in"):
            build_ext.apply_unified_diff(f"--- a/x\n+++ {name}\n@@ -1 +1 @@\n-line 1\n+line one\n", tree)
    assert outside.read_text() == "line 1\n"


def test_cmake_args_from_env(monkeypatch):
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_CUDA=ON  '-DCMAKE_CUDA_FLAGS=-O3 -g'")
    assert build_ext.cmake_args_from_env() == ["-DGGML_CUDA=ON", "-DCMAKE_CUDA_FLAGS=-O3 -g",
                                               "-DCMAKE_BUILD_TYPE=Release"]
    monkeypatch.setenv("CMAKE_ARGS", "-DCMAKE_BUILD_TYPE=Debug")
    assert build_ext.cmake_args_from_env() == ["-DCMAKE_BUILD_TYPE=Debug"]


def test_requested_backends():
    args = ["-DGGML_CUDA=ON", "-DGGML_VULKAN:BOOL=1", "-DGGML_METAL=OFF", "-DGGML_CUDA_GRAPHS=ON", "-DFOO=ON"]
    assert build_ext.requested_backends(args) == ["ggml-cuda", "ggml-vulkan"]
    assert build_ext.requested_backends(["-DGGML_CUDA=ON", "-DGGML_CUDA=OFF"]) == []


def test_a_gpu_wheel_says_its_backend_in_the_local_version(tmp_path):
    """A CUDA build's wheel is 0.1.0+cu130 (the CUDA compiler CMake found, as its CMakeFiles record it), a Vulkan
    one +vulkan, a CPU one keeps the plain version."""
    cpu = ["libggml-base.so", "libggml-cpu-x64.so", "libomnivoice-ops-x64.so"]
    assert build_ext.local_version({"libraries": cpu}) == ""
    assert build_ext.local_version({"libraries": [*cpu, "libggml-cuda.so"], "cuda_version": "13.0"}) == "cu130"
    assert build_ext.local_version({"libraries": [*cpu, "libggml-cuda.so"], "cuda_version": None}) == "cuda"
    assert build_ext.local_version({"libraries": [*cpu, "libggml-vulkan.so"]}) == "vulkan"
    assert build_ext.local_version({"libraries": [*cpu, "libggml-vulkan.so", "libggml-cuda.so"],
                                    "cuda_version": "12.8"}) == "cu128.vulkan"
    assert build_ext.cuda_version(tmp_path) is None
    d = tmp_path / "CMakeFiles" / "3.31.6"
    d.mkdir(parents=True)
    (d / "CMakeCUDACompiler.cmake").write_text('set(CMAKE_CUDA_COMPILER "/usr/local/cuda/bin/nvcc")\n'
                                               'set(CMAKE_CUDA_COMPILER_VERSION "13.0.88")\n')
    assert build_ext.cuda_version(tmp_path) == "13.0"


@needs_cmake
def test_reconfigure_after_the_build_tools_vanished(tmp_path, monkeypatch):
    """The second `pip install .`: the cache names the ninja of a deleted pip build environment."""
    src, build = project(tmp_path), tmp_path / "build"
    overlay = tmp_path / "pip-build-env" / "bin"
    overlay.mkdir(parents=True)
    (overlay / "ninja").write_text(f'#!/bin/sh\nexec {shutil.which("ninja")} "$@"\n')
    (overlay / "ninja").chmod(0o755)
    path = os.environ["PATH"]
    monkeypatch.setenv("PATH", f"{overlay}{os.pathsep}{path}")
    build_ext.configure(src, build, [], "Ninja")
    assert cache_value(build, "CMAKE_MAKE_PROGRAM") == str(overlay / "ninja")

    shutil.rmtree(tmp_path / "pip-build-env")
    monkeypatch.setenv("PATH", path)
    build_ext.configure(src, build, [], "Ninja")
    assert cache_value(build, "CMAKE_MAKE_PROGRAM") == shutil.which("ninja")


@needs_cmake
def test_a_folder_keeps_the_tools_that_made_it(tmp_path, monkeypatch):
    """An isolated build (`python -m build`) puts pip's newest cmake and ninja first on PATH: a folder another
    CMake and ninja made keeps them while they exist, so that nothing is regenerated and recompiled."""
    src, build = project(tmp_path), tmp_path / "build"
    build_ext.configure(src, build, [], "Ninja")
    made_with = cache_value(build, "CMAKE_COMMAND")
    assert build_ext.cmake_program(build) == made_with
    overlay = tmp_path / "pip-build-env" / "bin"
    overlay.mkdir(parents=True)
    for tool in ("ninja", "cmake"):
        (overlay / tool).write_text("#!/bin/sh\nexit 1\n")  # would fail the build if it were run
        (overlay / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{overlay}{os.pathsep}{os.environ['PATH']}")
    build_ext.configure(src, build, [], "Ninja")
    assert cache_value(build, "CMAKE_MAKE_PROGRAM") == shutil.which("ninja", path=os.environ["PATH"].split(os.pathsep, 1)[1])
    assert cache_value(build, "CMAKE_COMMAND") == made_with
    assert build_ext.cmake_program(tmp_path / "elsewhere") == "cmake"


@needs_cmake
def test_a_cache_cmake_refuses_is_replaced(tmp_path):
    src, build = project(tmp_path), tmp_path / "build"
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-G", "Unix Makefiles"], check=True,
                   capture_output=True)
    build_ext.configure(src, build, [], "Ninja")  # CMake alone: "generator Ninja does not match ..."
    assert cache_value(build, "CMAKE_GENERATOR") == "Ninja"


@needs_cmake
def test_a_failed_first_configure_leaves_nothing(tmp_path):
    src, build = project(tmp_path, "message(FATAL_ERROR broken)"), tmp_path / "build"
    with pytest.raises(subprocess.CalledProcessError):
        build_ext.configure(src, build, [], "Ninja")
    assert not build.exists()


@pytest.mark.skipif(not (ROOT / "vendor/ggml/src/ggml/CMakeLists.txt").exists(), reason="no fetched ggml source")
@needs_cmake
def test_editable_install_fails_when_the_build_fails(tmp_path):
    """`pip install -e .` used to print a warning, exit 0 and keep the old libraries when CMake failed."""
    env = dict(os.environ, CMAKE_ARGS=f"-DOMNIVOICE_GGML_SOURCE={tmp_path / 'nowhere'}")
    r = subprocess.run([sys.executable, "-c", f"import build_ext; build_ext.build_editable({str(tmp_path)!r})"],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "ggml source not found" in r.stdout + r.stderr
    assert not list(tmp_path.glob("*.whl"))
    key = build_ext.build_key([f"-DOMNIVOICE_GGML_SOURCE={tmp_path / 'nowhere'}", "-DCMAKE_BUILD_TYPE=Release"],
                              "Ninja", build_ext.source_key(build_ext.read_lock()))
    assert not (ROOT / "build" / key).exists()


def test_a_wheel_is_built_for_every_x86_level_unless_told_otherwise():
    """build_wheel's CMAKE_ARGS: GGML_CPU_ALL_VARIANTS first, the user's own after; a build that names it or
    OMNIVOICE_CPU_NATIVE keeps its word (and build_editable never adds it)."""
    assert build_ext.portable_cmake_args("") == ["-DGGML_CPU_ALL_VARIANTS=ON"]
    assert build_ext.portable_cmake_args("-DGGML_CUDA=ON '-DX=a b'") == ["-DGGML_CPU_ALL_VARIANTS=ON",
                                                                          "-DGGML_CUDA=ON", "-DX=a b"]
    for own in ("-DOMNIVOICE_CPU_NATIVE=ON", "-DGGML_CPU_ALL_VARIANTS=OFF", "-DGGML_CPU_ALL_VARIANTS:BOOL=ON"):
        assert build_ext.portable_cmake_args(own) == [own]


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(not (sys.platform == "linux" and os.uname().machine == "x86_64" and shutil.which("cc")),
                    reason="the per-level kernels are x86-64 Linux builds; this test compiles their level check")
def test_the_kernels_of_the_highest_level_this_cpu_runs_are_loaded(tmp_path, monkeypatch):
    """A wheel's libomnivoice-ops-<level>: _ffi loads the highest whose omnivoice_ops_level() accepts this CPU,
    judged here from /proc/cpuinfo's flags (the features CMakeLists.txt compiles each level with); a file that
    does not load is passed over, and a source build's libomnivoice-ops wins over them all."""
    from omnivoice.ggml import _ffi

    for number, tag in enumerate(("x64", "haswell", "skylakex")):
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", f"-DOMNIVOICE_OPS_LEVEL={number}", "-o",
                        str(tmp_path / f"libomnivoice-ops-{tag}.so"), str(ROOT / "omnivoice/csrc/dispatch.c")],
                       check=True)
    (tmp_path / "libomnivoice-ops-zz.so").write_bytes(b"not a library")
    flags = _cpu_flags()
    haswell = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"} <= flags
    skylakex = haswell and {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"} <= flags
    want = "skylakex" if skylakex else "haswell" if haswell else "x64"
    monkeypatch.setattr(_ffi, "LIB_DIR", tmp_path)
    assert _ffi._ops_library() == tmp_path / f"libomnivoice-ops-{want}.so"
    (tmp_path / "libomnivoice-ops.so").write_bytes(b"")
    assert _ffi._ops_library() == tmp_path / "libomnivoice-ops.so"
