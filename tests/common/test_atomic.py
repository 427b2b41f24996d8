"""common/atomic.py: whole files or nothing, with the mode a plain open() gives."""

from __future__ import annotations

import os

import pytest

from common.atomic import write_atomically
from common.errors import UserError


def test_text_and_bytes_replace_the_file_with_an_ordinary_mode(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    write_atomically(target, "new text ✓")
    assert target.read_text(encoding="utf-8") == "new text ✓"
    write_atomically(target, b"\x00\x01", durable=True)
    assert target.read_bytes() == b"\x00\x01"
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(TypeError):
        write_atomically(target, 12345)  # not bytes or text: fails mid-write
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_a_missing_folder_is_a_user_error_named_by_its_label(tmp_path):
    with pytest.raises(UserError, match=r"^-o x/out.ptx: folder .*x does not exist$"):
        write_atomically(tmp_path / "x" / "out.ptx", "ptx", label="-o x/out.ptx")
    with pytest.raises(UserError, match=r"^cannot write .*out.ptx: folder"):
        write_atomically(tmp_path / "x" / "out.ptx", "ptx")


def test_writing_never_changes_the_process_umask_that_other_threads_create_files_under(tmp_path, monkeypatch):
    """The umask is the whole process's: the dataclass code cache writes beside the command's
    job and the pod's start-up (common/dataclass_code_cache.py), and a file another thread makes
    while a writer has set it to 0, or a pod forked then, would be world-writable. Each time the
    umask is set, a file is made there and then, as another thread could."""
    real_umask, made = os.umask, []

    def umask_then_another_thread_creates(mask):
        previous = real_umask(mask)
        other = tmp_path / "others" / f"{len(made)}.npy"
        other.parent.mkdir(exist_ok=True)
        other.touch()
        made.append(other.stat().st_mode & 0o777)
        other.unlink()
        return previous

    process_umask = real_umask(0o022)
    try:
        monkeypatch.setattr(os, "umask", umask_then_another_thread_creates)
        write_atomically(tmp_path / "shared.bin", b"data")
        write_atomically(tmp_path / "private.bin", b"code", mode=0o600)
    finally:
        monkeypatch.undo()
        real_umask(process_umask)
    assert all(mode == 0o644 for mode in made), [oct(m) for m in made]  # none made under umask 0
    assert (tmp_path / "shared.bin").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "private.bin").stat().st_mode & 0o777 == 0o600
