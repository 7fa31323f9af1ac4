"""Model resolution: what the user names as the model -> the LM and codec GGUF files, and the conversion cache.

A model is one of
- an LM GGUF file (the codec is the one given, else omnivoice-tokenizer-F32.gguf beside it);
- a folder of converted GGUFs, as `python -m omnivoice.convert` writes it (the LM of the wanted weight type,
  else the backend's preferred one, else any, and the codec; the choice is logged);
- an OmniVoice checkpoint directory in the Hugging Face layout, converted once into the cache;
- a Hugging Face repo id, downloaded with huggingface_hub, then as a checkpoint directory; a repo of GGUFs
  (omnivoice.cpp's Serveurperso/omnivoice.cpp-GGUF, or files of ours) gives only the two files needed: the LM of
  the wanted weight type (as in a folder of GGUFs) and the codec (F32 when there), into huggingface_hub's cache.

The cache ($OMNIVOICE_CACHE, else ~/.cache/omnivoice) holds one folder per converted checkpoint, named
`<checkpoint name>-<id>`, where the id hashes the content of every checkpoint file the converter reads and the
converter's own code (omnivoice.convert.source): changed weights, configs or converter make a new entry and never
reuse a stale GGUF. Hashing 3 GB on every start would cost seconds, so content hashes are memoised in
hashes.json, each valid while its file keeps the size, mtime, ctime, inode and device it was hashed with
(ctime changes with every write and cannot be set back by the user). `python -m omnivoice.cache` lists and
cleans the cache.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from .config import current

log = logging.getLogger("omnivoice")

DEFAULT_REPO = "k2-fsa/OmniVoice"
QUANT_ORDER = ("f32", "bf16", "f16", "q8_0")  # preference when a folder lacks the wanted weight type
# then, in a repo of GGUFs, the K-quants from the most precise down
REPO_QUANT_ORDER = QUANT_ORDER + ("q6_k", "q5_k_m", "q5_k_s", "q4_k_m", "q4_k_s", "q3_k_l", "q3_k_m", "q3_k_s",
                                  "q2_k")
_REPO_LM = re.compile(r"omnivoice-base-(.+)\.gguf", re.IGNORECASE)
_REPO_CODEC = re.compile(r"omnivoice-tokenizer-(.+)\.gguf", re.IGNORECASE)
_HASHES = "hashes.json"
_SOURCE = "source.json"

__all__ = ["DEFAULT_REPO", "ModelNotAvailable", "DownloadError", "cache_dir", "default_quant", "AUTO_QUANT_HELP",
           "resolve_model", "check_model", "resolve_codec", "CacheEntry", "list_cache", "remove_cache_entry"]


class ModelNotAvailable(FileNotFoundError):
    """The model named cannot be had: no such file, folder or repository, or huggingface_hub is missing."""


class DownloadError(RuntimeError):
    """The Hugging Face Hub could not be reached or did not deliver (network, offline mode, server error):
    not a problem with what the user asked for."""

    exit_status = 1  # a command exits with omnivoice.cli's EXIT_FAILURE, not bad input's 2


def cache_dir() -> Path:
    """Where converted checkpoints live: OMNIVOICE_CACHE, else ~/.cache/omnivoice."""
    return current().cache_dir


def default_quant(backend_name: str, cpu_features: frozenset[str] | None = None) -> str:
    """The LM weight type a checkpoint is converted to when none is named, by backend, each the fastest of the
    measured machines' types at the best agreement with float32 (BENCHMARKS.md has the figures): BF16 on CUDA
    (cuBLAS accumulates it in F32, F16 in F16; F32 is slower), F16 on other GPUs (Vulkan's BF16 products are
    several times slower than its F16 ones). On the CPU, by the features of its kernels (`cpu_features`, default:
    this build's): with AMX (Intel's server CPUs since Sapphire Rapids) BF16, whose products run on the package's
    AMX kernel (nn.amx; BF16's agreement, the fastest path on AMX CPUs), or Q8_0 in ggml's AMX buffer where that
    kernel is missing; F16 with AVX2 and F16C, whose products run on the package's int8 kernel
    (runners.lm.products_kernel; F16 the most precise of the int8 kernel's inputs; its int16 kernel,
    `cpu_products="i16"`, keeps F16's precision at a lower speed), but BF16 with AVX-512 BF16 where that kernel is
    missing (ggml's BF16 dot products beat its F16 ones there); else F32.
    F32, the reference's own precision, is `quant="f32"`."""
    name = backend_name.lower()
    if name != "cpu":
        return "bf16" if name == "cuda" else "f16"
    if cpu_features is None:
        from .ggml.backend import cpu_features as features
        cpu_features = features()
    if "AMX_INT8" in cpu_features:  # ggml's feature list names AMX by its INT8 part
        from .nn import amx

        return "bf16" if amx.available() else "q8_0"
    if "AVX512_BF16" in cpu_features:
        from .nn import int8

        if not int8.available():
            return "bf16"
    return "f16" if {"AVX2", "F16C"} <= cpu_features else "f32"


AUTO_QUANT_HELP = ("bf16 on CUDA, f16 on other GPUs; on the CPU by its kernels: bf16 with AMX, f16 with AVX2 and "
                   "F16C, else f32")
"""default_quant in words, for the help of every --quant."""


# ------------------------------------------------------------------------------------------------ resolution
def resolve_model(model: Optional[str] = None, codec: Optional[str] = None, quant: str = "auto",
                  prefer: str = "f32") -> tuple[Path, Path]:
    """Turn the user's model argument into (LM GGUF, codec GGUF) paths (see the module docstring).

    `quant` is the LM weight type wanted (f32, f16, bf16, q8_0), or "auto": `prefer` when a checkpoint is
    converted, and in a folder of GGUFs `prefer` if it is there, else the first of QUANT_ORDER found. None for
    `model` means OMNIVOICE_MODEL, else k2-fsa/OmniVoice. Raises ModelNotAvailable for what does not exist,
    DownloadError when the Hub cannot be reached, and the converter's errors for a bad checkpoint.
    """
    model, path, codec_path, kind = _locate(model, codec)
    if kind == "file":
        return path, codec_path
    if kind == "repo":
        files = _download_gguf_repo(model, quant, prefer)
        if files is not None:
            return files[0], codec_path or files[1]
        path = _download(model)
        kind = _folder_kind(path, model)
    if kind == "gguf folder":
        return _pick_from_folder(path, codec_path, quant, prefer)
    lm, cached_codec = _convert_cached(path, prefer if quant == "auto" else quant)
    return lm, codec_path or cached_codec


def check_model(model: Optional[str] = None, codec: Optional[str] = None) -> None:
    """Check a model argument as far as it can be without downloading, converting or loading anything: the
    files and folders named exist and are of a kind resolve_model takes, and GGUF files named have a GGUF
    header. Raises what resolve_model (or the GGUF reader) would; a repo id is left to resolve_model. For
    commands that would otherwise report a typo only after starting (the server, before it binds its port)."""
    from .gguf.reader import read_gguf_metadata

    _, path, codec_path, kind = _locate(model, codec)
    if kind == "file":
        for f in (path, codec_path):
            read_gguf_metadata(str(f), ())
    elif codec_path is not None:
        read_gguf_metadata(str(codec_path), ())


def _locate(model: Optional[str], codec: Optional[str]) -> tuple[str, Path, Optional[Path], str]:
    """(the model as named, its path, the codec's path, kind) where kind is "file" (an LM GGUF, with its codec),
    "repo" (a Hugging Face repo id), "gguf folder" or "checkpoint"; ModelNotAvailable for anything else."""
    model = model or current().model or DEFAULT_REPO
    path = Path(model).expanduser()
    codec_path = Path(codec).expanduser() if codec else None
    if codec_path is not None and not codec_path.is_file():
        raise ModelNotAvailable(f"codec GGUF not found: {codec_path}")
    if path.is_file():
        codec_path = codec_path or path.with_name(_codec_name())
        if not codec_path.is_file():
            raise ModelNotAvailable(f"codec GGUF not found: {codec_path} (pass codec=... / --codec)")
        return model, path, codec_path, "file"
    if not path.exists():
        if path.is_absolute() or str(model).startswith((".", "~")) or str(model).count("/") != 1:
            raise ModelNotAvailable(f"model not found: {model} (expected a GGUF file, a folder of converted "
                                    f"GGUFs, a checkpoint directory or a Hugging Face repo id such as "
                                    f"{DEFAULT_REPO})")
        return model, path, codec_path, "repo"
    return model, path, codec_path, _folder_kind(path, model)


def _folder_kind(path: Path, model: str) -> str:
    """"gguf folder" or "checkpoint" for a model folder (named `model`); ModelNotAvailable for anything else."""
    if not path.is_dir():
        raise ModelNotAvailable(f"model not found: {model} (not a file or a directory)")
    if (path / "config.json").is_file():
        return "checkpoint"
    if _lm_files(path):
        return "gguf folder"
    raise ModelNotAvailable(
        f"{path}: neither a folder of converted GGUFs (no {_lm_name('*')}) nor an OmniVoice checkpoint "
        f"(no config.json); pass --model with a GGUF file, such a folder, a checkpoint directory or a repo id")


def resolve_codec(model: str) -> Path:
    """The codec GGUF for a codec-only tool: a GGUF file itself, the codec of a folder of converted GGUFs, or
    (a checkpoint directory or repo id) the codec of its cached conversion. Only the codec is downloaded or
    converted: the LM is not needed."""
    path = Path(model).expanduser()
    if path.is_file():
        return path
    if not path.exists():
        _, path, _, _ = _locate(model, None)  # a repo id, or ModelNotAvailable
        files = _download_gguf_repo(model, "auto", "f32", lm=False)
        if files is not None:
            return files[1]
        path = _download(model)
    if (path / "config.json").is_file():
        return _convert_cached(path, None)[1]
    if not path.is_dir():
        raise ModelNotAvailable(f"model not found: {model} (not a file or a directory)")
    codec = _codec_in(path)
    if codec is None:
        raise ModelNotAvailable(f"{path}: holds no codec GGUF ({_codec_name()}); pass --model with the "
                                f"codec GGUF file")
    log.info("model folder %s: codec %s", path, codec.name)
    return codec


def _lm_name(quant: str) -> str:
    """The LM GGUF's file name for a weight type ("*" gives the glob), as the converter names it."""
    from .gguf.names import lm_filename

    return lm_filename(quant)


def _codec_name() -> str:
    from .gguf.names import CODEC_FILENAME

    return CODEC_FILENAME


def _lm_files(folder: Path) -> dict[str, Path]:
    """{quant: LM GGUF} of a folder of converted files."""
    prefix, suffix = _lm_name("*").split("*")
    return {p.name[len(prefix):len(p.name) - len(suffix)].lower(): p
            for p in sorted(folder.glob(_lm_name("*"))) if p.is_file()}


def _codec_in(folder: Path) -> Optional[Path]:
    codec = folder / _codec_name()
    return codec if codec.is_file() else None


def _pick_from_folder(folder: Path, codec: Optional[Path], quant: str, prefer: str) -> tuple[Path, Path]:
    found = _lm_files(folder)
    have = ", ".join(q.upper() for q in found)
    if quant != "auto":
        if quant not in found:
            raise ModelNotAvailable(f"{folder}: no {_lm_name(quant)} (this folder has {have}); convert it with "
                                    f"python -m omnivoice.convert CHECKPOINT -o {folder} --quant {quant}")
        pick = quant
    else:
        order = [prefer] + [q for q in QUANT_ORDER if q != prefer] + sorted(found)
        pick = next(q for q in order if q in found)
    codec = codec or _codec_in(folder)
    if codec is None:
        raise ModelNotAvailable(f"{folder}: no codec GGUF ({_codec_name()}); pass codec=... / --codec")
    log.info("model folder %s: using %s (of %s) and %s", folder, found[pick].name, have, codec.name)
    return found[pick], codec


# ------------------------------------------------------------------------------------------------ download
def _hub(repo_id: str, call: Callable):
    """`call(huggingface_hub)` with the Hub's failures as ours: ModelNotAvailable (no huggingface_hub, no such
    repo or file, no access) or DownloadError (network, server, offline mode with nothing cached)."""
    try:
        import huggingface_hub
        from huggingface_hub.errors import (EntryNotFoundError, HFValidationError, LocalEntryNotFoundError,
                                            RepositoryNotFoundError, RevisionNotFoundError)
    except ImportError:
        raise ModelNotAvailable(f"{repo_id!r} looks like a Hugging Face repo id, but huggingface_hub is not "
                                f"installed: pip install huggingface_hub, or pass a local checkpoint or GGUF") from None
    try:
        return call(huggingface_hub)
    except Exception as e:
        missing = (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError, HFValidationError)
        # gated repos are "not found" too; LocalEntryNotFoundError (offline, not cached) is an EntryNotFoundError
        if isinstance(e, missing) and not isinstance(e, LocalEntryNotFoundError):
            raise ModelNotAvailable(f"{repo_id}: no such model on the Hugging Face Hub, or no access to it "
                                    f"({_first_line(e)})") from e
        # connection refused, timeouts, server errors, offline mode with nothing cached
        raise DownloadError(f"could not download {repo_id} from the Hugging Face Hub ({_first_line(e)}); "
                            f"check the network, or pass --model with a local checkpoint directory or GGUF "
                            f"file") from e


def _download(repo_id: str) -> Path:
    return Path(_hub(repo_id, lambda hub: hub.snapshot_download(repo_id)))


def pick_repo_files(files: Iterable[str], quant: str = "auto", prefer: str = "f32") -> Optional[tuple[str, str]]:
    """The (LM, codec) file names to fetch from a repo listing `files`, or None when it holds no LM GGUF (a
    checkpoint repo). The LM: `quant`, or for "auto" `prefer`, else the first of REPO_QUANT_ORDER there; the
    codec: F32 when there (the codec's graphs compute in F32; other types are expanded at load). Files of
    either layout's names are found at the top level or in folders."""
    lms: dict[str, str] = {}
    codecs: dict[str, str] = {}
    for name in files:
        base = name.rsplit("/", 1)[-1]
        for pattern, found in ((_REPO_LM, lms), (_REPO_CODEC, codecs)):
            m = pattern.fullmatch(base)
            if m:
                found.setdefault(m.group(1).lower(), name)
    if not lms:
        return None
    have = ", ".join(sorted(q.upper() for q in lms))
    if quant != "auto":
        if quant not in lms:
            raise ModelNotAvailable(f"the repo has no {_lm_name(quant)} (it has {have}); pick one with --quant")
        pick = quant
    else:
        pick = next((q for q in (prefer,) + REPO_QUANT_ORDER if q in lms), sorted(lms)[0])
    if not codecs:
        raise ModelNotAvailable(f"the repo has LM GGUFs ({have}) but no codec GGUF (omnivoice-tokenizer-*.gguf)")
    codec = next((q for q in REPO_QUANT_ORDER if q in codecs), sorted(codecs)[0])
    return lms[pick], codecs[codec]


def _download_gguf_repo(repo_id: str, quant: str, prefer: str,
                        lm: bool = True) -> Optional[tuple[Optional[Path], Path]]:
    """A repo of GGUFs: its LM and codec files (pick_repo_files), each downloaded alone into huggingface_hub's
    cache (where a second run finds them); without `lm` the codec alone (the LM's place is None). None for a
    checkpoint repo, and when the listing cannot be had (no network: the snapshot path then finds what is
    cached, or says what failed)."""
    try:  # the model card's file list: one request, where list_repo_files retries a dead network for 25 s
        files = _hub(repo_id, lambda hub: [s.rfilename for s in hub.HfApi().model_info(repo_id).siblings or ()])
    except DownloadError:
        return None
    pick = pick_repo_files(files, quant, prefer)
    if pick is None:
        return None
    names = pick if lm else pick[1:]
    log.info("%s: downloading %s", repo_id, " and ".join(names))
    paths = [Path(_hub(repo_id, lambda hub, n=n: hub.hf_hub_download(repo_id, n))) for n in names]
    return (paths[0] if lm else None), paths[-1]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# ------------------------------------------------------------------------------------------------ cache
class _HashMemo:
    """Content hashes of files, memoised in the cache's hashes.json while a file's stat stays the same."""

    def __init__(self, root: Path) -> None:
        self.path = root / _HASHES
        try:
            self.table = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(self.table, dict):
                self.table = {}
        except (OSError, ValueError):
            self.table = {}
        self.changed = False

    @staticmethod
    def _stat(path: Path) -> list[int]:
        st = path.stat()
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]

    def __call__(self, path: Path) -> str:
        from .convert.source import file_sha256

        key = str(path.resolve())
        stat = self._stat(path)
        entry = self.table.get(key)
        if isinstance(entry, dict) and entry.get("stat") == stat and isinstance(entry.get("sha256"), str):
            return entry["sha256"]
        digest = file_sha256(path)
        if self._stat(path) != stat:  # written to while we read it: do not trust this hash next time
            return digest
        self.table[key] = {"stat": stat, "sha256": digest}
        self.changed = True
        return digest

    def prune(self) -> None:
        """Forget files that no longer exist."""
        gone = [k for k in self.table if not Path(k).exists()]
        for k in gone:
            del self.table[k]
        self.changed |= bool(gone)

    def save(self) -> None:
        if self.changed:
            from .files import atomic_write_text

            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self.table, indent=0, sort_keys=True))
            self.changed = False


def _entry_id(checkpoint: Path, memo: _HashMemo) -> str:
    from .convert.source import source_digest

    return source_digest(checkpoint, ("lm", "codec"), memo)[:16]


def _convert_cached(checkpoint: Path, quant: Optional[str]) -> tuple[Optional[Path], Path]:
    """The checkpoint's GGUFs in the cache, converted first if they are not there: the LM of weight type `quant`
    and the codec, or (`quant` None, for a codec-only tool) the codec alone.

    The entry records its checkpoint before anything is converted into it, so that one an interrupted conversion
    leaves holding a whole file says where it is from; one left with nothing else is removed again."""
    from .convert import convert_checkpoint, convert_codec

    root = cache_dir()
    memo = _HashMemo(root)
    out = root / f"{checkpoint.name}-{_entry_id(checkpoint, memo)}"
    if out.is_symlink():  # a link planted as an entry: not followed, neither to load from nor to write into
        out.unlink()
    lm = out / _lm_name(quant) if quant else None
    codec = out / _codec_name()
    if not _own_file(codec) or (lm is not None and not _own_file(lm)):
        log.info("converting %s %sin %s (once; the codec is kept if already there)", checkpoint,
                 f"to {quant.upper()} " if quant else "(its codec) ", out)
        t0 = time.perf_counter()
        out.mkdir(parents=True, exist_ok=True)
        try:
            _write_source(out, checkpoint)
            if lm is None:
                convert_codec(checkpoint, out, progress=False, file_hash=memo)
            else:
                convert_checkpoint(checkpoint, out, quant=quant, progress=False, file_hash=memo)
        except BaseException:  # a bad checkpoint, a full disk, Ctrl-C: no empty entry stays behind
            with contextlib.suppress(OSError):
                if {p.name for p in out.iterdir()} <= {_SOURCE}:  # (another run's temporary file keeps it)
                    (out / _SOURCE).unlink(missing_ok=True)
                    out.rmdir()
            raise
        log.info("converted in %.1f s", time.perf_counter() - t0)
    memo.save()
    return lm, codec


def _own_file(path: Path) -> bool:
    """A regular file that is not a symbolic link: a link planted in the cache is converted over (the atomic
    writer replaces the link itself), never loaded."""
    return path.is_file() and not path.is_symlink()


def _write_source(entry: Path, checkpoint: Path) -> None:
    from .files import atomic_write_text

    atomic_write_text(entry / _SOURCE, json.dumps({"checkpoint": str(checkpoint.resolve()),
                                                   "converted": time.strftime("%Y-%m-%d %H:%M:%S")}, indent=1))


@dataclass(frozen=True)
class CacheEntry:
    """One converted checkpoint in the cache."""

    path: Path
    checkpoint: Optional[str]   # where it was converted from, when known
    files: tuple[str, ...]      # the GGUF files in it
    size: int                   # bytes, all files
    stale: bool                 # its checkpoint is gone or has changed since (a new entry would be made)

    @property
    def name(self) -> str:
        return self.path.name


def list_cache() -> list[CacheEntry]:
    """Every entry of the cache, oldest first: a folder holding the record of its checkpoint or a GGUF file. Other
    folders are not the cache's (the reference harness keeps its results in ~/.cache/omnivoice/reference), and
    neither listed nor cleaned."""
    root = cache_dir()
    if not root.is_dir():
        return []
    memo = _HashMemo(root)
    entries = []
    for d in sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime):
        files = tuple(sorted(p.name for p in d.iterdir() if p.is_file() and p.suffix == ".gguf"))
        if not files and not (d / _SOURCE).is_file():
            continue
        size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
        try:
            source = json.loads((d / _SOURCE).read_text(encoding="utf-8")).get("checkpoint")
        except (OSError, ValueError, AttributeError):
            source = None
        entries.append(CacheEntry(d, source, files, size, _is_stale(d, source, memo)))
    memo.save()
    return entries


def _is_stale(entry: Path, source: Optional[str], memo: _HashMemo) -> bool:
    if not source or not (Path(source) / "config.json").is_file():
        return True
    try:
        return entry.name != f"{Path(source).name}-{_entry_id(Path(source), memo)}"
    except (OSError, ValueError):
        return True


def remove_cache_entry(entry: CacheEntry) -> None:
    """Delete one cache entry (its folder) and forget hashes of files that are gone."""
    root = cache_dir().resolve()
    if entry.path.resolve().parent != root:
        raise ValueError(f"{entry.path} is not an entry of the cache {root}")
    shutil.rmtree(entry.path)
    memo = _HashMemo(root)
    memo.prune()
    memo.save()
