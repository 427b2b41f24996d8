"""System calls on open files that storage (common/storage.py) and the commit (common/commit.py)
share: reading exactly, writing (through the page cache or past it), starting write-back early,
making bytes durable."""

from __future__ import annotations

import ctypes
import errno
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


DIRECT_ALIGN = 4096  # direct I/O wants file offsets, lengths and memory on the device's block (512, 4096)
DIRECT_MIN_BYTES = 1 << 20  # shorter runs go through the page cache: a direct write waits for the disk


def pwrite_all(fd: int, data: memoryview, at: int) -> None:
    while len(data):
        wrote = os.pwrite(fd, data, at)
        data, at = data[wrote:], at + wrote


def write_runs(fd: int, path: Path, source: memoryview, address: int, runs, direct: bool = False) -> None:
    """Write `source`, whose memory starts at `address`, into the open file `fd` (of `path`):
    `runs` holds (file offset, bytes) of its consecutive pieces. With `direct`, the block-aligned
    middle of each run of DIRECT_MIN_BYTES or more whose memory is aligned too goes to the disk
    straight from `source` (O_DIRECT): no copy into the page cache, and no fresh page-cache memory
    to fault in, which is what a buffered write of a new file's pages mostly costs on a VM that
    hands idle memory back to its host (docs/performance.md). The rest, and everything where the
    file system refuses direct I/O, goes through the page cache as before."""
    direct_fd = None  # opened for the first run that can use it; -1: refused
    try:
        done = 0
        for at, nbytes in runs:
            piece, first = source[done:done + nbytes], done
            done += nbytes
            lo, hi = -at % DIRECT_ALIGN, (at + nbytes) // DIRECT_ALIGN * DIRECT_ALIGN - at  # within piece
            if direct and hi - lo >= DIRECT_MIN_BYTES and (address + first + lo) % DIRECT_ALIGN == 0:
                if direct_fd is None:
                    direct_fd = _open_direct(path)
                if direct_fd >= 0:
                    wrote = _pwrite_direct(direct_fd, piece[lo:hi], at + lo)
                    pwrite_all(fd, piece[:lo], at)
                    pwrite_all(fd, piece[lo + wrote:], at + lo + wrote)
                    continue
            pwrite_all(fd, piece, at)
    finally:
        if direct_fd is not None and direct_fd >= 0:
            os.close(direct_fd)


def _open_direct(path: Path) -> int:
    """`path` opened for direct writes, or -1 where there are none (a file system without them:
    tmpfs before Linux 6.6; a platform without O_DIRECT)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return -1
    try:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC | flag)
    except OSError as err:
        if err.errno != errno.EINVAL:
            raise
        return -1


def _pwrite_direct(fd: int, data: memoryview, at: int) -> int:
    """How many bytes of `data` went to the disk directly; the caller writes the rest through the
    page cache (a device whose blocks are larger than DIRECT_ALIGN refuses with EINVAL)."""
    done = 0
    try:
        while done < len(data):
            done += os.pwrite(fd, data[done:], at + done)
    except OSError as err:
        if err.errno != errno.EINVAL:
            raise
    return done


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
