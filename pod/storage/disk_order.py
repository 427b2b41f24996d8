"""In which order a node reads its plan's inputs from disk, and when it starts writing its outputs
back: pure functions of the plan's byte ranges, no I/O (pod/storage/disk.py carries them out).

A tile of a wider matrix is one short run per row (a 4096-column f32 tile of an 8192-column file:
16 KiB runs 32 KiB apart). Read tile by tile from several threads, a disk sees many short
requests from several places at once; written tile by tile, each store's write-back is as many
short writes with gaps between them. Both run slower than one stream of long requests (docs/
performance.md, "Issue 15's targets"). Most plans read, between their tiles, the whole of a band
(the tiles of one row of units), and most write whole bands of their outputs. So:

- Reads: the bytes a node's loads need, per file, cut into chunks of CHUNK_BYTES on a grid of
  the file's offsets, each chunk read as one range (from its first needed byte to its last)
  where the loads need at least MIN_DENSITY of that range, in the order of the first load (in
  plan order) that needs a byte of it. The read-ahead takes them in that order, so a chunk
  that two tiles share is read once, whole, at the time the first of them needs it.
- Write-back: a chunk of an output file is handed to the disk once every byte of it that this
  node's stores write has been written, so the disk gets long writes instead of one per run. A
  chunk some of whose bytes another node writes is handed over once this node's are in.

Neither changes what is read or written, only when the disk is asked for it: the commit's fsync
still makes every byte durable (docs/runtime.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

CHUNK_BYTES = 8 << 20  # the disk probes' best request size (benchmarks/results/nvidia-h200/...-s4-cold)
MIN_DENSITY = 0.5  # a chunk is read whole only where the loads need at least this share of it

# One load's or store's bytes in one file: (file key, run offsets in bytes, run length in bytes)
Runs = tuple[object, np.ndarray, int]


@dataclass(frozen=True)
class Chunk:
    file: object  # the file's key (its path, for the pod)
    start: int  # bytes [start, end) of the file
    end: int
    rank: int  # plan position of the first load that needs it


def read_order(loads: Iterable[Runs], chunk: int = CHUNK_BYTES, budget: int | None = None) -> list[Chunk]:
    """The chunks to read ahead, in the order to read them. `loads` in plan order; at most
    `budget` bytes (the first chunks in that order), None for all."""
    per_file: dict[object, list[tuple[np.ndarray, ...]]] = {}
    for rank, (key, starts, length) in enumerate(loads):
        if length and len(starts):
            number, low, high, need = _per_chunk(starts, starts + length, chunk)
            per_file.setdefault(key, []).append((number, low, high, need, np.full(len(number), rank)))
    chunks: list[Chunk] = []
    for key, parts in per_file.items():
        number, low, high, need, rank = (np.concatenate(column) for column in zip(*parts, strict=True))
        grid, at = np.unique(number, return_inverse=True)
        first, last = _fold(np.minimum, at, low), _fold(np.maximum, at, high)
        earliest = _fold(np.minimum, at, rank)
        need = np.bincount(at, need, len(grid))  # bytes two loads share count twice: a hint
        dense = need >= MIN_DENSITY * (last - first)
        chunks += [Chunk(key, int(a), int(b), int(r))
                   for a, b, r in zip(first[dense], last[dense], earliest[dense], strict=True)]
    chunks.sort(key=lambda c: (c.rank, str(c.file), c.start))
    if budget is None:
        return chunks
    total = np.cumsum([c.end - c.start for c in chunks])
    return chunks[:int(np.searchsorted(total, budget, side="right"))]


class WriteBack:
    """When to hand each chunk of this node's output files to the disk: once every byte this
    node's stores write in it is written. The bytes due count a byte two stores write once; the
    bytes written count each write, so a byte written twice can only start a chunk's write-back
    early (when, never what, the commit's fsync makes durable). `add` is told each piece a store
    wrote and answers the chunks now complete. Thread-safe (stores run in several threads)."""

    def __init__(self, stores: Iterable[Runs], chunk: int = CHUNK_BYTES):
        self.chunk = chunk
        self._lock = threading.Lock()
        per_file: dict[object, list[tuple[np.ndarray, np.ndarray]]] = {}
        for key, starts, length in stores:
            if length and len(starts):
                starts = np.asarray(starts, np.int64)
                per_file.setdefault(key, []).append((starts, starts + length))
        # per file: the chunk numbers (sorted), and per chunk [first byte, end byte, bytes this
        # node writes in it, bytes written so far]
        self._files = {key: self._table(runs) for key, runs in per_file.items()}

    def _table(self, runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
        starts, ends = np.concatenate([s for s, _ in runs]), np.concatenate([e for _, e in runs])
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
        reach = np.maximum.accumulate(ends)  # the union of the runs
        heads = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
        number, low, high, due = _per_chunk(starts[heads], np.maximum.reduceat(reach, heads), self.chunk)
        grid, at = np.unique(number, return_inverse=True)
        table = np.zeros((len(grid), 4), np.int64)
        table[:, 0] = _fold(np.minimum, at, low)
        table[:, 1] = _fold(np.maximum, at, high)
        table[:, 2] = np.bincount(at, due, len(grid))
        return grid, table

    def __contains__(self, key) -> bool:
        return key in self._files

    def add(self, key, starts: np.ndarray, length: int) -> list[tuple[int, int]]:
        """A store wrote these runs of file `key`: the byte ranges [start, end) of the chunks now
        complete, each answered once."""
        entry = self._files.get(key)
        if entry is None or not length or not len(starts):
            return []
        grid, table = entry
        starts = np.asarray(starts, np.int64)
        number, _, _, nbytes = _per_chunk(starts, starts + length, self.chunk)
        at = np.minimum(np.searchsorted(grid, number), len(grid) - 1)
        known = grid[at] == number
        with self._lock:
            before = table[:, 3] >= table[:, 2]
            np.add.at(table[:, 3], at[known], nbytes[known])
            done = np.flatnonzero((table[:, 3] >= table[:, 2]) & ~before)
            return [(int(table[i, 0]), int(table[i, 1])) for i in done]


def _per_chunk(lows: np.ndarray, highs: np.ndarray, chunk: int) -> tuple[np.ndarray, ...]:
    """Ranges [lows, highs) (in increasing order, as a region's runs are) cut at the chunk grid
    and summed per chunk: (chunk number, first byte, end byte, bytes) of each chunk they touch."""
    lows = np.asarray(lows, np.int64)
    highs = np.asarray(highs, np.int64)
    first, last = lows // chunk, (highs - 1) // chunk
    counts = last - first + 1
    which = np.repeat(np.arange(len(lows)), counts)
    number = first[which] + np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    low = np.maximum(lows[which], number * chunk)
    high = np.minimum(highs[which], (number + 1) * chunk)
    if len(number) > 1 and (np.diff(number) < 0).any():  # not in increasing order after all
        order = np.argsort(number, kind="stable")
        number, low, high = number[order], low[order], high[order]
    heads = np.flatnonzero(np.r_[True, number[1:] != number[:-1]])
    return (number[heads], np.minimum.reduceat(low, heads), np.maximum.reduceat(high, heads),
            np.add.reduceat(high - low, heads))


def _fold(ufunc, at: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`ufunc` (minimum or maximum) of `values` grouped by `at` (np.unique's inverse: every
    group from 0 on has members)."""
    order = np.argsort(at, kind="stable")
    heads = np.flatnonzero(np.r_[True, np.diff(at[order]) != 0])
    return ufunc.reduceat(values[order], heads)
