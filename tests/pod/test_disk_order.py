"""pod/storage/disk_order.py: the order a node reads its loads' bytes in, and when its stores' chunks go
to the disk. Pure: byte runs in, chunks out."""

import numpy as np

from common import storage
from pod.storage import disk_order
from pod.storage.disk_order import WriteBack, read_order
from schemas.instructions import Region

N, T = 64, 32  # a 64 x 64 f32 matrix in 32 x 32 tiles: rows of 256 bytes, a tile 128 bytes per row
LAYOUT = storage.Layout(128, (N, N), 4)
CHUNK = 2048  # 8 rows of the matrix


def runs(name, row, col, rows=T, cols=T):
    """The tile's runs counted from the file's data, as pod/storage/disk.py hands them over."""
    starts, run = storage.byte_runs(LAYOUT, Region(0, (row, col), (rows, cols)))
    return name, starts - LAYOUT.offset, run


def matmul_loads():
    """One node's loads of a 2 x 2 x 2 matmul, in the planner's order (unit by unit)."""
    return [runs("A", 0, 0), runs("B", 0, 0), runs("A", 0, T), runs("B", T, 0), runs("C", 0, 0),
            runs("B", 0, T), runs("B", T, T), runs("C", 0, T),
            runs("A", T, 0), runs("A", T, T), runs("C", T, 0), runs("C", T, T)]


def covered(chunks, name):
    got = np.zeros(N * N * 4, int)
    for c in chunks:
        if c.file == name:
            got[c.start:c.end] += 1
    return got


def test_bands_are_read_whole_once_in_the_order_of_their_first_load():
    chunks = read_order(matmul_loads(), chunk=CHUNK)
    for name in "ABC":
        assert (covered(chunks, name) == 1).all()  # every byte once, nothing else
    assert all(c.end - c.start == CHUNK and c.start % CHUNK == 0 for c in chunks)
    bands = []
    for c in chunks:
        band = (c.file, c.start // (T * N * 4))
        if not bands or bands[-1] != band:
            bands.append(band)
    # A's first band (its first tile, then the tile beside it), B's two bands, C's first band,
    # then the second bands of A and C: each read whole, at the time its first tile is needed
    assert bands == [("A", 0), ("B", 0), ("B", 1), ("C", 0), ("A", 1), ("C", 1)]
    assert [c.rank for c in chunks] == sorted(c.rank for c in chunks)


def test_a_tile_of_a_quarter_of_the_rows_is_left_to_its_load():
    narrow = runs("A", 0, 0, cols=N // 4)  # 64 bytes of every 256: too sparse to read through
    half = runs("B", 0, 0)  # half of every row: read with its gaps (a memory map would read them too)
    chunks = read_order([narrow, half], chunk=CHUNK)
    assert {c.file for c in chunks} == {"B"}
    got, needed = covered(chunks, "B"), np.zeros(N * N * 4, int)
    for start in half[1]:
        needed[start:start + half[2]] = 1
    assert (got >= needed).all() and got.max() == 1
    assert got.sum() == 4 * (CHUNK - T * 4)  # each chunk from its first needed byte to its last


def test_a_budget_keeps_the_first_chunks_in_reading_order():
    every = read_order(matmul_loads(), chunk=CHUNK)
    kept = read_order(matmul_loads(), chunk=CHUNK, budget=5 * CHUNK + 1)
    assert kept == every[:5]
    assert read_order(matmul_loads(), chunk=CHUNK, budget=0) == []


def test_ranges_are_cut_at_the_grid_and_summed_per_chunk():
    lows = np.array([100, 300, 5000], np.int64)
    highs = np.array([200, 3100, 8000], np.int64)
    number, low, high, nbytes = disk_order._per_chunk(lows, highs, 2048)
    assert number.tolist() == [0, 1, 2, 3]
    assert low.tolist() == [100, 2048, 5000, 6144] and high.tolist() == [2048, 3100, 6144, 8000]
    assert nbytes.tolist() == [100 + 1748, 1052, 1144, 1856]


def test_write_back_waits_for_both_tiles_of_a_band():
    stores = [runs("C", 0, 0), runs("C", 0, T), runs("C", T, 0), runs("C", T, T)]
    back = WriteBack(stores, chunk=CHUNK)
    assert back.add(*runs("C", 0, 0, rows=8)) == []  # half of each row of the first chunk
    assert back.add(*runs("C", 0, T, rows=8)) == [(0, CHUNK)]  # the other half: whole now
    assert back.add(*runs("C", 0, T, rows=8)) == []  # each chunk is answered once
    assert back.add(*runs("C", 8, 0, rows=24)) == []
    assert back.add(*runs("C", 8, T, rows=24)) == [(CHUNK, 2 * CHUNK), (2 * CHUNK, 3 * CHUNK),
                                                         (3 * CHUNK, 4 * CHUNK)]


def test_write_back_of_a_tile_whose_neighbour_another_node_writes_is_at_once():
    back = WriteBack([runs("C", 0, 0)], chunk=CHUNK)  # this node stores the left tile only
    first, last = 0, 7 * N * 4 + T * 4  # the first 8 rows' left halves: the chunk's bytes of this node
    assert back.add(*runs("C", 0, 0, rows=8)) == [(first, last)]


def test_write_back_counts_a_byte_two_stores_write_once():
    back = WriteBack([runs("C", 0, 0, rows=8, cols=N), runs("C", 0, 0, rows=4, cols=N)], chunk=CHUNK)
    assert back.add(*runs("C", 0, 0, rows=4, cols=N)) == []
    assert back.add(*runs("C", 4, 0, rows=4, cols=N)) == [(0, CHUNK)]


def test_write_back_ignores_files_and_chunks_it_was_not_told_of():
    back = WriteBack([runs("C", 0, 0)], chunk=CHUNK)
    assert back.add(*runs("D", 0, 0)) == []
    assert back.add(*runs("C", T, T, rows=8)) == []

