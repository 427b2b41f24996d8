"""common/fileio.py: the system calls storage and the commit share."""

from __future__ import annotations

import os

import pytest

from common import fileio
from common.errors import UserError


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
