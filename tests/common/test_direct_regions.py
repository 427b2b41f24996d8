"""Direct stores (write_region with `direct`, common/fileio.py write_runs) against numpy, on random
regions: every dtype, 1-D to 3-D, runs long enough to go to the disk directly with heads and tails
off the disk's blocks, memory on a page or off it, and neighbouring regions stored at once from
threads (their runs sharing blocks). The committed file must be numpy's result, every byte
outside the stored regions the old file's."""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest

from common import fileio, storage
from pod.backends.host_buffers import HostBuffers
from schemas.program import Region

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32}
MIB = 1 << 20


def _old_file(path, shape, dtype, rng):
    values = rng.integers(-1000, 1000, shape).astype(DTYPES[dtype])
    staging = storage.create_staging(path, shape, dtype, "old")
    storage.write_region(staging, Region("t", (0,) * len(shape), shape), values)
    storage.commit(staging, path)
    return values


def _random_shape(rng, itemsize: int) -> tuple[int, ...]:
    """1-D to 3-D, the last axis 1-2.3 MiB long plus an odd count: rows of one direct run each,
    starting off the disk's blocks."""
    inner = int(rng.integers(MIB, MIB * 23 // 10)) // itemsize + int(rng.integers(1, 200))
    return tuple(int(n) for n in rng.integers(1, 4, int(rng.integers(0, 3)))) + (inner,)


def _random_region(rng, shape):
    start = tuple(int(rng.integers(0, n)) for n in shape)
    start = (*start[:-1], int(rng.integers(0, 1000)))  # long runs stay possible along the last axis
    extents = tuple(int(rng.integers(1, n - s + 1)) for n, s in zip(shape, start, strict=True))
    return Region("t", start, extents)


def _values(rng, region, dtype, memory: str, file_offset: int = 0):
    """Values for `region`, their memory: "buffer", a pod's buffer (on a page); "matched", as far
    off a page as the region's first byte in the file is off a block (its runs can go to the disk
    directly); "shifted", one element off that (they cannot)."""
    values = rng.integers(-1000, 1000, region.shape).astype(DTYPES[dtype])
    if memory == "buffer":
        held = HostBuffers().take(region.shape, values.dtype)
        held[...] = values
        return held
    skip = file_offset % fileio.DIRECT_ALIGN + (values.itemsize if memory == "shifted" else 0)
    raw = HostBuffers().take((values.nbytes + 2 * fileio.DIRECT_ALIGN,), np.dtype(np.uint8))
    placed = raw[skip:skip + values.nbytes].view(values.dtype).reshape(region.shape)
    placed[...] = values
    return placed


def _first_byte(staging, region, shape, itemsize: int) -> int:
    return storage.layout(staging).offset + int(np.ravel_multi_index(region.start, shape)) * itemsize


@pytest.fixture
def direct_bytes(monkeypatch):
    """Bytes written to the disk directly, counted, and the direct writes."""
    counted = [0, 0]
    real = fileio._pwrite_direct

    def counting(fd, data, at):
        wrote = real(fd, data, at)
        counted[0] += wrote
        counted[1] += 1
        return wrote

    monkeypatch.setattr(fileio, "_pwrite_direct", counting)
    return counted


@pytest.mark.parametrize("seed", range(12))
def test_direct_stores_of_random_regions_match_numpy(tmp_path, seed, direct_bytes):
    rng = np.random.default_rng(seed)
    dtype = list(DTYPES)[seed % 4]
    shape = _random_shape(rng, np.dtype(DTYPES[dtype]).itemsize)
    final = tmp_path / "t.npy"
    expected = _old_file(final, shape, dtype, rng)
    staging = storage.create_staging(final, shape, dtype, "j", copy_existing=True)
    assert storage.layout(staging).offset % fileio.DIRECT_ALIGN == 0
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    for memory in ("matched", *rng.choice(["buffer", "matched", "shifted"], 3)):
        region = _random_region(rng, shape)
        if memory == "matched" and not direct_bytes[0]:  # one row whole, at least: a direct run
            region = Region("t", region.start[:-1] + (0,), region.shape[:-1] + (shape[-1],))
        values = _values(rng, region, dtype, memory, _first_byte(staging, region, shape, itemsize))
        storage.write_region(staging, region, values, writeback=bool(rng.integers(0, 2)), direct=True)
        expected[tuple(slice(s, s + n) for s, n in zip(region.start, region.shape, strict=True))] = values
    assert direct_bytes[0] >= MIB
    storage.commit(staging, final)
    got = np.load(final)
    assert got.shape == shape
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))
    got_ours = storage.read_region(final, Region("t", (0,) * len(shape), shape))  # our reader, as f32
    np.testing.assert_array_equal(got_ours, expected.astype(np.float32))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_neighbouring_regions_stored_at_once_share_their_blocks_untouched(tmp_path, dtype, direct_bytes):
    """Two stores at once, one row each side of a cut inside a disk block: each writes its block
    ends through the page cache and the middle directly, and neither clobbers the other's
    bytes of the block they share."""
    rng = np.random.default_rng(7)
    itemsize = np.dtype(DTYPES[dtype]).itemsize
    shape = (4, (3 * MIB + 4096 * 3 + 36) // itemsize)
    final = tmp_path / "t.npy"
    expected = _old_file(final, shape, dtype, rng)
    staging = storage.create_staging(final, shape, dtype, "j", copy_existing=True)
    cut = (MIB + 3 * 4096 + 100) // itemsize  # inside a block, one side's run of 1 MiB and more
    stores = []
    for row in range(4):
        for start, stop in ((0, cut), (cut, shape[1])):
            region = Region("t", (row, start), (1, stop - start))
            values = _values(rng, region, dtype, "matched", _first_byte(staging, region, shape, itemsize))
            expected[row, start:stop] = values[0]
            stores.append((region, values))
    gate = threading.Barrier(len(stores))

    def store(region, values):
        gate.wait()
        storage.write_region(staging, region, values, direct=True)

    threads = [threading.Thread(target=store, args=pair) for pair in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert direct_bytes[1] == len(stores) and direct_bytes[0] >= len(stores) * MIB  # every middle
    storage.commit(staging, final)
    np.testing.assert_array_equal(np.load(final).view(np.uint8), expected.view(np.uint8))
