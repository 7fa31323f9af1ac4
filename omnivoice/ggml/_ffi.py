"""Load the ggml libraries that build_ext.py compiled, through cffi in ABI mode.

The declarations in _cdef.h were generated from the headers that were compiled, so the struct layouts and the
enum values here are the library's own. Nothing above this module touches cffi's loading details.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import cffi

from ..config import variable

_HERE = Path(__file__).resolve().parent
LIB_DIR = variable("OMNIVOICE_GGML_LIB_DIR") or _HERE / "_lib"
_CDEF = _HERE / "_cdef.h"
_CONSTS = _HERE / "_consts.json"

log = logging.getLogger("omnivoice.ggml")


class GGMLNotBuiltError(ImportError):
    """The compiled ggml libraries or their declarations are missing from this install."""


def _shared_lib(stem: str) -> Path:
    names = {"linux": f"lib{stem}.so", "darwin": f"lib{stem}.dylib", "win32": f"{stem}.dll"}
    return LIB_DIR / names.get(sys.platform, f"lib{stem}.so")


if not _CDEF.exists() or not _shared_lib("ggml-base").exists():
    raise GGMLNotBuiltError(
        f"ggml is not built for this checkout: expected {_CDEF.name} and {_shared_lib('ggml-base').name} in "
        f"{LIB_DIR.parent}. Install with `pip install .` (or `python build_ext.py all` in a checkout).")

ffi = cffi.FFI()
ffi.cdef(_CDEF.read_text())
consts: dict[str, int] = json.loads(_CONSTS.read_text())
# Patch 0024's MaskGIT step on CUDA (ggml-cuda's softmax.cuh declares the same struct): not in ggml's public headers,
# it is reached through the CUDA registry's get_proc_address (Runtime.proc), so a build without it simply lacks it.
ffi.cdef("""
struct ggml_cuda_maskgit_args {
    const int32_t * pred; const float * score; int32_t * tokens; int32_t * ids; const int32_t * plan;
    int32_t * state; uint32_t * keys; float penalty; float inv_temp;
    int32_t C, T, L, cond0, uncond0, audio_vocab, mask_id, n_steps;
};
typedef int (*ggml_backend_cuda_maskgit_step_t)(ggml_backend_t, const struct ggml_cuda_maskgit_args *);
""")


class _Lib:
    """One namespace over libggml-base (tensor ops) and libggml (backend registry): looked up once, then cached."""

    def __init__(self) -> None:
        self._libs = [ffi.dlopen(str(_shared_lib("ggml"))), ffi.dlopen(str(_shared_lib("ggml-base")))]

    def __getattr__(self, name: str):
        for lib in self._libs:
            try:
                value = getattr(lib, name)
            except AttributeError:
                continue
            setattr(self, name, value)
            return value
        raise AttributeError(f"ggml has no symbol {name!r} (declared in the headers but not exported?)")


lib = _Lib()


def _ops_library() -> Path | None:
    """The build of the package's kernels to load: libomnivoice-ops (a source build, compiled for its machine), else
    the highest level of libomnivoice-ops-<level> (a wheel's, one per x86 level) whose omnivoice_ops_level() says
    this CPU runs it, else None."""
    path = _shared_lib("omnivoice-ops")
    if path.exists():
        return path
    best: tuple[int, Path] | None = None
    level_ffi = cffi.FFI()  # its own FFI: the probe's declaration stays out of the package's
    level_ffi.cdef("int omnivoice_ops_level(void);")
    for candidate in sorted(LIB_DIR.glob(_shared_lib("omnivoice-ops-*").name)):
        try:
            probe = level_ffi.dlopen(str(candidate))
        except OSError as e:  # a library this system cannot load: another level may do
            log.debug("skipping %s: %s", candidate.name, e)
            continue
        try:
            level = probe.omnivoice_ops_level()
        except AttributeError:
            level = -1
        level_ffi.dlclose(probe)  # only the one chosen stays loaded (dlopened again below)
        if level >= 0 and (best is None or level > best[0]):
            best = (level, candidate)
    if best is not None:
        log.debug("the package's kernels: %s", best[1].name)
    return None if best is None else best[1]


def _load_ops():
    """The package's own CPU kernels (omnivoice/csrc, libomnivoice-ops, built beside ggml), or None for a ggml
    built without them (e.g. OMNIVOICE_GGML_LIB_DIR naming a plain ggml build): their callers then fall back."""
    path = _ops_library()
    if path is None:
        return None
    ffi.cdef("void omnivoice_snake_rows(struct ggml_tensor *, const struct ggml_tensor *, const struct ggml_tensor *,"
             " const struct ggml_tensor *, int, int, void *);"
             "void omnivoice_conv_columns(struct ggml_tensor *, int, int, void *);"
             "void omnivoice_rms_norm_rows(struct ggml_tensor *, const struct ggml_tensor *,"
             " const struct ggml_tensor *, int, int, void *);"
             "void omnivoice_concat_cols(struct ggml_tensor *, int, int, void *);"
             "void omnivoice_pad_cols(struct ggml_tensor *, int, int, void *);"
             "void omnivoice_row_max(struct ggml_tensor *, int, int, void *);"
             "void omnivoice_gelu_erf(struct ggml_tensor *, int, int, void *);"
             "struct omnivoice_i16_weight { const void * data; int64_t M, K; };"
             "int64_t omnivoice_i16_packed_bytes(int64_t, int64_t);"
             "int omnivoice_i16_supported(void);"
             "void omnivoice_i16_pack(const float *, int64_t, int64_t, void *);"
             "void omnivoice_i16_mul_mat(struct ggml_tensor *, int, int, void *);"
             "struct omnivoice_i8_weight { const void * data; int64_t M, K; };"
             "int64_t omnivoice_i8_packed_bytes(int64_t, int64_t);"
             "int omnivoice_i8_supported(void);"
             "void omnivoice_i8_pack(const float *, int64_t, int64_t, void *);"
             "void omnivoice_i8_mul_mat(struct ggml_tensor *, int, int, void *);"
             "struct omnivoice_amx_weight { const void * data; int64_t M, K; };"
             "int64_t omnivoice_amx_packed_bytes(int64_t, int64_t);"
             "int omnivoice_amx_supported(void);"
             "void omnivoice_amx_pack(const float *, int64_t, int64_t, void *);"
             "void omnivoice_amx_mul_mat(struct ggml_tensor *, int, int, void *);"
             "struct omnivoice_fma_weight { const void * data; int64_t M, K; };"
             "struct omnivoice_fma_conv { const struct omnivoice_fma_weight * w; int64_t taps, stride, dilation,"
             " padding; };"
             "int64_t omnivoice_fma_packed_bytes(int64_t, int64_t);"
             "int omnivoice_fma_supported(void);"
             "void omnivoice_fma_pack(const float *, int64_t, int64_t, void *);"
             "int omnivoice_fma_cols_per_group(void);"
             "void omnivoice_fma_pack_cols(struct ggml_tensor *, int, int, void *);"
             "void omnivoice_fma_mul_mat(struct ggml_tensor *, int, int, void *);"
             "void omnivoice_fma_conv(struct ggml_tensor *, int, int, void *);"
             "int omnivoice_fma_attention_supported(int64_t);"
             "void omnivoice_fma_attention(struct ggml_tensor *, int, int, void *);")
    return ffi.dlopen(str(path))


ops = _load_ops()


def _build_info() -> dict:
    """What build_ext.py recorded of the loaded build (_lib/build.json: ggml's version, the patches applied,
    CMake's arguments), or {} for a build without the record."""
    try:
        return json.loads((LIB_DIR / "build.json").read_text())
    except (OSError, ValueError):
        return {}


build_info = _build_info()


def built_with_patch(prefix: str) -> bool:
    """Deprecated: whether build.json lists a patch whose file name starts with `prefix`. Renumbered or squashed
    patches would answer wrongly; ask the library what it has instead (Runtime.has, ggml.backend's capability
    names)."""
    import warnings

    warnings.warn("built_with_patch is deprecated: use Runtime.has(capability)", DeprecationWarning, stacklevel=2)
    return any(str(name).startswith(prefix) for name in build_info.get("ggml_patches", []))

_LEVELS = {lib.GGML_LOG_LEVEL_ERROR: logging.ERROR, lib.GGML_LOG_LEVEL_WARN: logging.WARNING,
           lib.GGML_LOG_LEVEL_INFO: logging.DEBUG, lib.GGML_LOG_LEVEL_DEBUG: logging.DEBUG}


_pending: list[BaseException] = []


def callback_error(exc_type, exc, tb) -> None:
    """`onerror` of every C callback of this package (an exception cannot cross into C, and cffi would print it
    and drop it): a signal's exception (KeyboardInterrupt, or the CLI's Terminated: the handler runs in the
    main thread, which may be inside a callback of a running graph) is kept and raised again when the ggml
    call returns (raise_pending); any other is logged."""
    if exc is not None and not isinstance(exc, Exception):
        _pending.append(exc)
    else:
        log.error("exception in a ggml callback", exc_info=(exc_type, exc, tb))


def raise_pending() -> None:
    """Raise the signal's exception a callback caught during the last ggml call, if any."""
    if _pending:
        exc = _pending[0]
        _pending.clear()
        raise exc


@ffi.callback("void(enum ggml_log_level, const char *, void *)", onerror=callback_error)
def _on_log(level, text, _user):
    # ggml talks a lot on stderr while loading backends; route it through logging so --quiet means quiet.
    try:
        msg = ffi.string(text).decode("utf-8", "replace").rstrip()
        if msg:
            log.log(_LEVELS.get(level, logging.DEBUG), msg)
    except Exception:  # an exception escaping a C callback would be printed and lost anyway
        pass


lib.ggml_log_set(_on_log, ffi.NULL)
