"""common/fileio.py: the system calls storage and the commit share."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest

from common import fileio
from common.errors import UserError
from tests.job_files import in_page_cache


def test_writeback_started_early_leaves_the_bytes_as_written(tmp_path):
    path = tmp_path / "f.bin"
    data = os.urandom(3 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.pwrite(fd, data, 0)
        fileio.start_writeback(fd, 4096, len(data) - 8192)  # a span inside the file
    finally:
        os.close(fd)
    fileio.fsync_path(path)
    assert path.read_bytes() == data


def test_pread_exactly_reads_all_or_names_the_truncated_file(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 4)
    into = bytearray(1000)
    fd = os.open(path, os.O_RDONLY)
    try:
        fileio.pread_exactly(fd, memoryview(into), 24, path)
        assert bytes(into) == (bytes(range(256)) * 4)[24:1024]
        with pytest.raises(UserError, match="ended early"):
            fileio.pread_exactly(fd, memoryview(bytearray(100)), 1000, path)
    finally:
        os.close(fd)


# ---- writing past the page cache --------------------------------------------------------------

MIB = 1 << 20


def _staging_like(tmp_path, nbytes: int):
    """A file of `nbytes` whose blocks are reserved but never written (as a staging copy)."""
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.posix_fallocate(fd, 0, nbytes)
    os.close(fd)
    direct = fileio._open_direct(path)
    if direct < 0:
        pytest.skip(f"{tmp_path}'s file system has no direct I/O")
    os.close(direct)
    return path


def _page_aligned(nbytes: int):
    """(memoryview of `nbytes` random bytes starting on a page, its address)."""
    memory = mmap.mmap(-1, nbytes)
    memory.write(os.urandom(nbytes))
    array = np.frombuffer(memory, np.uint8)
    return memoryview(array), array.__array_interface__["data"][0]


def _write(path, source, address, runs, direct=True):
    fd = os.open(path, os.O_WRONLY)
    try:
        fileio.write_runs(fd, path, source, address, runs, direct)
    finally:
        os.close(fd)


def test_long_aligned_runs_go_to_the_disk_past_the_page_cache(tmp_path):
    path = _staging_like(tmp_path, 4096 + 4 * MIB)
    source, address = _page_aligned(3 * MIB)
    _write(path, source, address, [(4096, 2 * MIB), (4096 + 3 * MIB, MIB)])
    for offset in (4096, 4096 + MIB, 4096 + 3 * MIB, 4096 + 4 * MIB - 4096):
        assert not in_page_cache(path, offset), offset  # buffered, every written page would be
    data = path.read_bytes()
    assert data[4096:4096 + 2 * MIB] == source[:2 * MIB]
    assert data[4096 + 3 * MIB:] == source[2 * MIB:]
    assert data[4096 + 2 * MIB:4096 + 3 * MIB] == bytes(MIB)  # the gap between the runs untouched


def test_the_unaligned_ends_of_a_run_go_through_the_page_cache(tmp_path):
    """A run starting and ending inside a block: its ends are written through the page cache,
    its aligned middle directly, whose memory then starts on a page as well."""
    path = _staging_like(tmp_path, 8192 + 2 * MIB)
    memory, address = _page_aligned(2 * MIB + 8192)
    at, nbytes = 4096 + 100, 2 * MIB
    skip = 100  # the source's byte at a block of the file is at a page of memory
    _write(path, memory[skip:skip + nbytes], address + skip, [(at, nbytes)])
    assert in_page_cache(path, at) and in_page_cache(path, at + nbytes - 1)
    assert not in_page_cache(path, 8192) and not in_page_cache(path, at + nbytes - 4096 - 100)
    assert path.read_bytes()[at:at + nbytes] == memory[skip:skip + nbytes]


@pytest.mark.parametrize("skip, direct", [(1, True), (0, False)])
def test_memory_off_the_blocks_or_no_direct_asked_goes_through_the_page_cache(tmp_path, skip, direct):
    path = _staging_like(tmp_path, 4096 + 2 * MIB)
    memory, address = _page_aligned(2 * MIB + 4096)
    _write(path, memory[skip:skip + 2 * MIB], address + skip, [(4096, 2 * MIB)], direct)
    assert in_page_cache(path, 4096 + MIB)
    assert path.read_bytes()[4096:] == memory[skip:skip + 2 * MIB]


def test_runs_shorter_than_the_direct_minimum_go_through_the_page_cache(tmp_path):
    path = _staging_like(tmp_path, 4096 + fileio.DIRECT_MIN_BYTES)
    source, address = _page_aligned(fileio.DIRECT_MIN_BYTES)
    _write(path, source[:-4096], address, [(4096, fileio.DIRECT_MIN_BYTES - 4096)])
    assert in_page_cache(path, 4096)
    assert path.read_bytes()[4096:-4096] == source[:-4096]
