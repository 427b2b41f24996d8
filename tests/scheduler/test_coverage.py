"""scheduler/jobs/coverage.py: the parts of an output no unit writes, against a boolean mask."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.jobs.coverage import uncovered_boxes
from schemas.program import Region


def uncovered(regions, tensor, shape):
    rows = (len(regions), len(shape))
    starts = np.array([r.start for r in regions], np.int64).reshape(rows)
    extents = np.array([r.shape for r in regions], np.int64).reshape(rows)
    return uncovered_boxes(starts, extents, tensor, shape)


def _mask(regions, shape):
    mask = np.zeros(shape, bool)
    for r in regions:
        mask[tuple(slice(a, a + n) for a, n in zip(r.start, r.shape, strict=True))] = True
    return mask


def _check(regions, shape):
    gaps = uncovered(regions, "c", shape)
    written = _mask(regions, shape)
    filled = _mask(gaps, shape)
    assert not (written & filled).any(), "a gap overlaps a written region"
    assert (written | filled).all(), "part of the tensor is neither written nor copied"
    assert sum(g.size for g in gaps) == (~written).sum(), "gaps overlap each other"
    return gaps


def test_everything_written_needs_no_copy():
    tiles = [Region("c", (i * 4, j * 8), (4, 8)) for i in range(4) for j in range(2)]
    assert _check(tiles, (16, 16)) == []
    assert _check([Region("c", (0,), (100,))], (100,)) == []


def test_a_missing_tile_is_the_only_gap():
    tiles = [Region("c", (i * 4, j * 8), (4, 8)) for i in range(4) for j in range(2) if (i, j) != (2, 1)]
    assert _check(tiles, (16, 16)) == [Region("c", (8, 8), (4, 8))]


@pytest.mark.parametrize("seed", range(20))
def test_random_overlapping_regions(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(1, 12, size=rank))
    regions = []
    for _ in range(int(rng.integers(0, 6))):
        start = tuple(int(rng.integers(0, s)) for s in shape)
        extent = tuple(int(rng.integers(1, s - a + 1)) for a, s in zip(start, shape, strict=True))
        regions.append(Region("c", start, extent))
    _check(regions, shape)


def test_a_hundred_thousand_tiles():
    tiles = [Region("c", (i * 16,), (16,)) for i in range(100_000)]
    assert uncovered(tiles, "c", (1_600_000,)) == []
