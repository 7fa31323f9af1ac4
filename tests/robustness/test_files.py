"""omnivoice.files.atomic_write: whole or nothing, and no write through a symbolic link planted at the temporary
name or at the target (issue 14.5)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from omnivoice import files
from omnivoice.files import FileWriteError, atomic_write, atomic_write_bytes


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A victim file and a symbolic link to it at the first temporary name atomic_write will try."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    names = iter(["planted", "planted", "fresh"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: next(names))
    return victim


def test_a_link_planted_at_the_temporary_name_is_not_followed(tmp_path, planted):
    target = tmp_path / "out.bin"
    (tmp_path / ".out.bin.planted.tmp").symlink_to(planted)
    atomic_write_bytes(target, b"new content")
    assert planted.read_bytes() == b"precious"
    assert target.read_bytes() == b"new content" and not target.is_symlink()
    assert (tmp_path / ".out.bin.planted.tmp").is_symlink()  # left alone, not ours
    assert not (tmp_path / ".out.bin.fresh.tmp").exists()


def test_every_temporary_name_taken_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(files.secrets, "token_hex", lambda n: "taken")
    (tmp_path / ".out.bin.taken.tmp").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileWriteError, match="out.bin"):
        atomic_write_bytes(tmp_path / "out.bin", b"x")
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "out.bin").exists()


def test_a_link_at_the_target_is_replaced_not_written_through(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    target = tmp_path / "out.bin"
    target.symlink_to(victim)
    atomic_write_bytes(target, b"new content")
    assert victim.read_bytes() == b"precious"
    assert not target.is_symlink() and target.read_bytes() == b"new content"


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_an_exception_leaves_the_target_as_it_was(tmp_path, exc):
    target = tmp_path / "out.bin"
    target.write_bytes(b"before")
    with pytest.raises(type(exc)):
        with atomic_write(target) as f:
            f.write(b"half of it")
            raise exc
    assert target.read_bytes() == b"before"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_a_full_disk_is_a_clear_error_naming_the_output(tmp_path, monkeypatch):
    def fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", fsync)
    with pytest.raises(FileWriteError, match=r"out\.bin: cannot write \(No space left on device\)"):
        atomic_write_bytes(tmp_path / "out.bin", b"x")
    assert list(tmp_path.iterdir()) == []


def test_the_converter_writes_through_the_same_writer(tmp_path, planted):
    """The GGUF writer used to write `.NAME.tmp-PID` with open(): a link planted there redirected the file."""
    from omnivoice.gguf.writer import OutTensor, write_gguf

    target = tmp_path / "m.gguf"
    (tmp_path / ".m.gguf.planted.tmp").symlink_to(planted)
    values = np.arange(32, dtype=np.float32)
    write_gguf(target, "test", [("general.name", "x", "str")], [OutTensor("t", (32,), "F32", lambda: values)],
               progress=False)
    assert planted.read_bytes() == b"precious"
    from gguf import GGUFReader

    assert np.array_equal(GGUFReader(target).get_tensor(0).data, values)


def test_links_planted_in_the_model_cache_are_not_followed(tiny_checkpoint, tmp_path, monkeypatch):
    """A symbolic link at a cache entry's GGUF, or as the entry itself, is converted over, never loaded from or
    written through (issue 14.5)."""
    import shutil

    from omnivoice.resolve import resolve_model

    monkeypatch.setenv("OMNIVOICE_CACHE", str(tmp_path / "cache"))
    lm, codec = resolve_model(str(tiny_checkpoint), quant="f32")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for f in (lm, codec):
        (elsewhere / f.name).write_bytes(b"not a model")
        f.unlink()
        f.symlink_to(elsewhere / f.name)
    lm2, codec2 = resolve_model(str(tiny_checkpoint), quant="f32")
    assert (lm2, codec2) == (lm, codec)
    assert not lm.is_symlink() and not codec.is_symlink() and lm.read_bytes()[:4] == b"GGUF"
    assert [f.read_bytes() for f in sorted(elsewhere.iterdir())] == [b"not a model"] * 2

    shutil.rmtree(lm.parent)
    lm.parent.symlink_to(elsewhere, target_is_directory=True)
    lm3, _ = resolve_model(str(tiny_checkpoint), quant="f32")
    assert lm3 == lm and not lm.parent.is_symlink() and lm.read_bytes()[:4] == b"GGUF"
    assert [f.read_bytes() for f in sorted(elsewhere.iterdir())] == [b"not a model"] * 2
