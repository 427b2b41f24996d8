"""Region reads and writes on the direct paths (pread into the caller's buffer, pwrite from the
tile) against numpy slicing, for every way a region can sit in a tensor: whole, whole rows,
partial rows (one run per row), runs too short for a system call each (memory map), Fortran-order
files, and tiles kept in their storage dtype."""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from common import storage
from schemas.program import Region

SHAPES = [(4096,), (64, 1024), (8, 16, 512), (2, 3, 4, 256), (300, 7)]


def _regions(shape):
    """A handful of regions per shape: whole, a corner, an inner block, whole leading rows."""
    yield tuple(0 for _ in shape), shape
    yield tuple(0 for _ in shape), tuple(max(1, s // 2) for s in shape)
    yield tuple(s // 4 for s in shape), tuple(max(1, s // 2) for s in shape)
    yield (shape[0] // 2, *[0] * (len(shape) - 1)), (shape[0] - shape[0] // 2, *shape[1:])


def _region(start, shape):
    return Region("t", tuple(start), tuple(shape))


@pytest.mark.parametrize("pread_run_bytes", [storage.PREAD_RUN_BYTES, 0],
                         ids=["short-runs-mapped", "pread-every-run"])
@pytest.mark.parametrize("shape", SHAPES)
def test_read_region_into_matches_numpy(tmp_path, shape, pread_run_bytes, monkeypatch):
    monkeypatch.setattr(storage, "PREAD_RUN_BYTES", pread_run_bytes)
    data = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    np.save(tmp_path / "t.npy", data)
    for start, extent in _regions(shape):
        want = data[tuple(slice(a, a + n) for a, n in zip(start, extent, strict=True))]
        out = np.full(extent, -1, np.float32)
        nbytes = storage.read_region_into(tmp_path / "t.npy", _region(start, extent), out)
        np.testing.assert_array_equal(out, want)
        assert nbytes == want.nbytes
        np.testing.assert_array_equal(storage.read_region(tmp_path / "t.npy", _region(start, extent)), want)


@pytest.mark.parametrize("shape", SHAPES)
def test_write_region_matches_numpy(tmp_path, shape):
    final = tmp_path / "o.npy"
    staging = storage.create_staging(final, shape, "f32", "job1")
    want = np.zeros(shape, np.float32)
    for index, (start, extent) in enumerate(_regions(shape)):
        values = (index + 1 + np.arange(np.prod(extent), dtype=np.float32)).reshape(extent)
        want[tuple(slice(a, a + n) for a, n in zip(start, extent, strict=True))] = values
        assert storage.write_region(staging, _region(start, extent), values) == values.nbytes
    np.testing.assert_array_equal(np.load(staging), want)


def test_fortran_order_file_is_read_right(tmp_path):
    data = np.asfortranarray(np.arange(64 * 32, dtype=np.float32).reshape(64, 32))
    np.save(tmp_path / "f.npy", data)
    out = np.empty((16, 8), np.float32)
    storage.read_region_into(tmp_path / "f.npy", _region((3, 5), (16, 8)), out)
    np.testing.assert_array_equal(out, data[3:19, 5:13])


@pytest.mark.parametrize("dtype", ["f16", "bf16", "i32"])
def test_tiles_in_their_storage_dtype_move_unconverted(tmp_path, dtype):
    np_dtype = storage.STORAGE_DTYPES[dtype]
    data = (np.arange(2048) % 251 - 100).astype(np_dtype).reshape(16, 128)
    np.save(tmp_path / "in.npy", data)
    out = np.empty((8, 128), np_dtype)
    storage.read_region_into(tmp_path / "in.npy", _region((4, 0), (8, 128)), out)
    np.testing.assert_array_equal(out, data[4:12])
    staging = storage.create_staging(tmp_path / "out.npy", (16, 128), dtype, "j")
    storage.write_region(staging, _region((8, 0), (8, 128)), out)
    stored = np.load(staging)
    if dtype == "bf16":
        stored = stored.view(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(stored[8:], data[4:12])
    assert not stored[:8].any()


def test_runs_cover_the_region_in_order():
    for shape in SHAPES:
        for start, extent in _regions(shape):
            runs = storage._runs(_region(start, extent), shape)
            if runs is None:
                continue
            flat = np.arange(np.prod(shape)).reshape(shape)
            want = flat[tuple(slice(a, a + n) for a, n in zip(start, extent, strict=True))].reshape(-1)
            got = list(itertools.chain.from_iterable(range(first, first + count) for first, count in runs))
            assert got == list(want)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_copy_regions_copies_only_those(tmp_path, dtype, monkeypatch):
    monkeypatch.setattr(storage, "COPY_PIECE_BYTES", 1000)  # several pieces per region
    np_dtype = storage.STORAGE_DTYPES[dtype]
    old = (np.arange(40 * 64) % 97).astype(np_dtype).reshape(40, 64)
    np.save(tmp_path / "o.npy", old)
    staging = storage.create_staging(tmp_path / "o.npy", (40, 64), dtype, "j")
    gaps = [_region((0, 0), (40, 16)), _region((30, 16), (10, 48))]
    copied = storage.copy_regions(tmp_path / "o.npy", staging, gaps)
    assert copied == (40 * 16 + 10 * 48) * np_dtype.itemsize
    stored = np.load(staging).view(np_dtype)
    want = np.zeros_like(old)
    want[:, :16], want[30:, 16:] = old[:, :16], old[30:, 16:]
    np.testing.assert_array_equal(stored, want)


@pytest.mark.parametrize("shape", SHAPES + [(5,), (1, 8), (0, 4)])
@pytest.mark.parametrize("piece_bytes", [1, 100, 4096, 1 << 30])
def test_row_pieces_cover_the_rows_once_within_the_size(shape, piece_bytes):
    """The pieces a GPU load or store moves through its two pinned buffers: every row once, in
    order, each piece within piece_bytes unless a single row is larger."""
    itemsize = 4
    pieces = storage.row_pieces(shape, itemsize, piece_bytes)
    rows = [first + i for first, count in pieces for i in range(count)]
    assert rows == list(range(shape[0] if 0 not in shape else 0))
    row_bytes = int(np.prod(shape[1:])) * itemsize
    assert all(count == 1 or count * row_bytes <= piece_bytes for _, count in pieces)


def test_region_rows_reads_back_as_the_slice(tmp_path):
    data = np.arange(40 * 64, dtype=np.float32).reshape(40, 64)
    np.save(tmp_path / "d.npy", data)
    region = _region((8, 16), (24, 32))
    for first, count in storage.row_pieces((24, 32), 4, 7 * 32 * 4):  # 7 rows, then a short 3
        out = np.empty((count, 32), np.float32)
        storage.read_region_into(tmp_path / "d.npy", storage.region_rows(region, first, count), out)
        np.testing.assert_array_equal(out, data[8 + first:8 + first + count, 16:48])
