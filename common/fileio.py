"""System calls on open files that storage (common/storage.py) and the commit (common/commit.py)
share: reading exactly, starting write-back early, making bytes durable."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from pathlib import Path

from common.errors import UserError


def pread_exactly(fd: int, into: memoryview, offset: int, path: Path) -> None:
    while len(into):
        got = os.preadv(fd, [into], offset)
        if got <= 0:
            raise UserError(f"{path}: the file ended early (truncated while the job ran?)")
        into, offset = into[got:], offset + got


def fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, nbytes: int) -> None:
    """Start writing these bytes to disk without waiting (Linux sync_file_range): the commit's
    fsync, which keeps its guarantee, then finds most of a job's stores on disk already instead
    of writing them all at the end. Elsewhere, or where the filesystem refuses: nothing."""
    call = _sync_file_range()
    if call is not None:
        call(fd, ctypes.c_int64(offset), ctypes.c_int64(nbytes), _SYNC_FILE_RANGE_WRITE)


@functools.cache
def _sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return call
