"""Output files written whole or not at all: the one atomic writer every output of the package goes through.

    with atomic_write(path, "the WAV output") as f:     # a binary file object
        f.write(header)
        f.write(samples)
    # path now holds exactly what was written, or (on any exception) is as it was before

The bytes go to a temporary file in the target's directory, which is flushed, fsynced and renamed over the
target at the end; on any exception (KeyboardInterrupt included) the temporary file is removed and the target
is left untouched. The temporary file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name:
a file or symbolic link planted at that name makes the open fail instead of redirecting the write, and the
final rename replaces a symbolic link at the target itself rather than writing through it. New files get the
permissions a plain ``open()`` would give (0666 less the umask).

A target that exists and is neither a regular file nor a symbolic link (``/dev/null``, a named pipe) is
written in place: renaming over it would replace the device node itself, and there is no partial *file* to
leave behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import BinaryIO, Iterator, Union

__all__ = ["FileWriteError", "atomic_write", "atomic_write_bytes", "atomic_write_text", "check_writable"]

PathLike = Union[str, "os.PathLike[str]"]

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_ATTEMPTS = 100  # random names tried before giving up (each collision means a file already sits there)


class FileWriteError(ValueError):
    """An output path that cannot be written (the message names the path and the reason)."""


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _open_temporary(target: Path) -> tuple[BinaryIO, Path]:
    for _ in range(_ATTEMPTS):
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, _FLAGS, 0o666)  # the kernel applies the umask, as for open()
        except FileExistsError:
            continue
        except OSError as exc:
            raise FileWriteError(f"{target}: cannot write here ({_reason(exc)})") from exc
        return os.fdopen(fd, "wb"), tmp
    raise FileWriteError(f"{target}: cannot create a temporary file beside it ({_ATTEMPTS} names taken)")


def _is_special(target: Path) -> bool:
    """A device, FIFO or socket at `target` itself (a symbolic link is not followed)."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise FileWriteError(f"{target}: cannot write ({_reason(exc)})") from exc
    return not (stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def atomic_write(path: PathLike, what: str = "the output") -> Iterator[BinaryIO]:
    """A binary file whose content replaces `path` when the block ends without an exception.

    `what` names the output in errors ("the WAV output"). Raises FileWriteError (a ValueError) naming the path
    when it is a directory, its directory does not exist or is not writable, or the disk fills up.
    """
    target = Path(os.fspath(path))
    if target.is_dir() and not target.is_symlink():
        raise FileWriteError(f"{target}: is a directory; give a file name for {what}")
    if _is_special(target):
        try:
            fd = os.open(target, os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
            f = os.fdopen(fd, "wb")
        except OSError as exc:
            raise FileWriteError(f"{target}: cannot write ({_reason(exc)})") from exc
        with f:
            try:
                yield f
            except OSError as exc:
                raise FileWriteError(f"{target}: cannot write ({_reason(exc)})") from exc
        return
    f, tmp = _open_temporary(target)
    _in_progress.add(tmp)
    try:
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise FileWriteError(f"{target}: cannot write ({_reason(exc)})") from exc
        raise
    finally:
        _in_progress.discard(tmp)


def check_writable(path: PathLike) -> None:
    """Raise FileWriteError unless atomic_write can write `path`: its temporary file is created beside it and
    removed, for a command to know before its work that the output can be written. Permissions alone do not
    tell (root may write anywhere but /proc and /sys take no new file; a read-only mount; a full disk's
    inodes). A device or FIFO at `path` is written in place and not opened here (a FIFO would wait for its
    reader)."""
    target = Path(os.fspath(path))
    if target.is_dir() and not target.is_symlink():
        raise FileWriteError(f"{target}: is a directory; give a file name")
    if _is_special(target):
        return
    f, tmp = _open_temporary(target)
    _in_progress.add(tmp)
    try:
        f.close()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _in_progress.discard(tmp)


# The temporary files of the atomic writes under way, for remove_partial_outputs.
_in_progress: set[Path] = set()


def remove_partial_outputs() -> None:
    """Remove the temporary file of every atomic write under way: for a process that must exit without unwinding
    (cli's termination watchdog, while the main thread is stuck in a native call)."""
    for tmp in list(_in_progress):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def atomic_write_bytes(path: PathLike, blob: bytes, what: str = "the output") -> None:
    """Write `blob` to `path` whole or not at all (see atomic_write)."""
    with atomic_write(path, what) as f:
        f.write(blob)


def atomic_write_text(path: PathLike, text: str, what: str = "the text") -> None:
    """Write `text` as UTF-8 to `path` whole or not at all (see atomic_write)."""
    atomic_write_bytes(path, text.encode("utf-8"), what)
