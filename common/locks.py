"""Locks that keep concurrent jobs from tearing each other's files.

A job holds an exclusive lock on every output it writes and a shared lock on every input it
reads, from before its staging copies exist until its commit (or abort) is over. Locks are
`flock` locks on a hidden lock file beside the tensor (`.NAME.npy.phobos-lock`), never on the
tensor itself: a commit replaces the tensor's inode, and a lock on the old inode would guard
nothing. Lock files are never deleted (deleting one races with a job opening it); they are
empty but for the last writer's name.

A lock that is taken is refused at once, never waited for: waiting would let two jobs that
read each other's outputs wait for each other forever. The kernel drops a process's locks when
it dies, however it dies, so a killed job never leaves a file locked. On NFS, Linux maps flock
to NFS byte-range locks, so jobs on several hosts exclude each other as well.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from pathlib import Path

from common.errors import UserError

LOCK_MARK = ".phobos-lock"


class LockRefused(UserError):
    """Another job holds a lock this job needs."""


def lock_path(path: Path) -> Path:
    path = Path(path)
    return path.with_name(f".{path.name}{LOCK_MARK}")


def _open_lock_file(path: Path) -> int | None:
    """The lock file's descriptor; None when it does not exist and cannot be made (a folder
    this user may not write: no phobos job of this user can write the tensor there either)."""
    lock = lock_path(path)
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT | flags, 0o666)
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise UserError(f"{path}: cannot open its lock file {lock} ({err.strerror})") from None
    try:
        return os.open(lock, os.O_RDONLY | flags)  # flock needs no write access
    except FileNotFoundError:
        return None
    except OSError as err:
        raise UserError(f"{path}: cannot open its lock file {lock} ({err.strerror})") from None


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return f" ({text})" if text else ""


class Locks:
    """The locks one job holds, by real path; `release` drops them all (idempotent)."""

    def __init__(self, owner: str):
        self.owner = owner  # written into exclusively held lock files, for the next one's message
        self.held: dict[Path, tuple[int, bool]] = {}  # real path -> (fd, exclusive)

    def take(self, name: str, path: Path, exclusive: bool) -> None:
        """Lock tensor `name` stored at `path`, or a LockRefused saying who is in the way."""
        real = Path(os.path.realpath(path))
        if real in self.held and (self.held[real][1] or not exclusive):
            return
        fd = _open_lock_file(real)
        if fd is None:
            if exclusive:
                raise UserError(f"tensor {name}: cannot create a lock file beside {real} "
                                "(the folder is not writable)")
            return  # see _open_lock_file
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            if exclusive:
                raise LockRefused(f"tensor {name}: {real} is in use by another phobos job (it writes "
                                  f"it, or reads it as an input){holder}; this job did not start: "
                                  "run it again when that job has ended") from None
            raise LockRefused(f"tensor {name}: {real} is being written by another phobos job{holder}; "
                              "this job did not start: run it again when that job has ended") from None
        if exclusive:
            with contextlib.suppress(OSError):  # only a courtesy for the next one's message
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"job {self.owner}, pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self.held[real] = (fd, exclusive)

    def holds_exclusive(self, path: Path) -> bool:
        entry = self.held.get(Path(os.path.realpath(path)))
        return entry is not None and entry[1]

    def release(self) -> None:
        held, self.held = self.held, {}
        for fd, _ in held.values():
            os.close(fd)  # closing the only descriptor drops the flock


def is_locked(path: Path) -> bool:
    """Whether some job holds any lock on the tensor at `path` right now (a probe)."""
    fd = _open_lock_file(Path(os.path.realpath(path)))
    if fd is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
