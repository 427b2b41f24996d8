"""Which parts of an output a job does not write: the only parts its staging copy needs from the
old file (docs/runtime.md, "Writes cost what they must").

Every store writes its whole region into the staging copy, so the old contents matter only where
no unit stores. The regions the units write are cut along every boundary any of them has, per
axis; the cells of that grid no region covers are the unwritten parts, merged along the last axis
and returned as regions. A job that writes everything gets an empty list, and its outputs go
straight into new files without a copy of the old ones.
"""

from __future__ import annotations

import itertools

import numpy as np

from schemas.program import ClusterProgram, Region


def unwritten_regions(program: ClusterProgram, tensor: str, shape: tuple[int, ...]) -> list[Region]:
    """The parts of `tensor` (of `shape`) that no unit of the program writes."""
    return uncovered_boxes(*program.units.written(tensor, len(shape)), tensor, shape)


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values: np.unique's result, without its import of numpy.ma (10-15 ms
    of the command's start-up, on the thread that makes the staging copies beside the job)."""
    ordered = np.sort(values)
    keep = np.empty(len(ordered), dtype=bool)
    keep[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def uncovered_boxes(starts: np.ndarray, extents: np.ndarray, tensor: str, shape: tuple[int, ...]
                    ) -> list[Region]:
    """The parts of `tensor` (of `shape`) that none of the regions given as rows of their starts
    and extents covers, as regions."""
    if any(s == 0 for s in shape):
        return []
    rank = len(shape)
    ends = starts + extents
    starts, ends = np.minimum(starts, shape), np.minimum(ends, shape)
    cuts = [_distinct(np.concatenate(([0, size], starts[:, a], ends[:, a]))) for a, size in enumerate(shape)]
    covered = np.zeros([len(c) - 1 for c in cuts], dtype=bool)
    lo = [np.searchsorted(c, starts[:, a]) for a, c in enumerate(cuts)]
    hi = [np.searchsorted(c, ends[:, a]) for a, c in enumerate(cuts)]
    if all(((h - low) == 1).all() for low, h in zip(lo, hi, strict=True)):
        covered[tuple(lo)] = True  # every region is one cell (super-tiles on a grid): at once
    else:
        for i in range(len(starts)):
            covered[tuple(slice(lo[a][i], hi[a][i]) for a in range(rank))] = True
    if covered.all():
        return []
    out = []
    for outer in itertools.product(*(range(n) for n in covered.shape[:-1])):
        row = covered[outer]
        last = cuts[-1]
        start = None
        for j in range(len(row) + 1):
            free = j < len(row) and not row[j]
            if free and start is None:
                start = j
            elif not free and start is not None:
                begin = [int(cuts[a][i]) for a, i in enumerate(outer)] + [int(last[start])]
                extent = [int(cuts[a][i + 1] - cuts[a][i]) for a, i in enumerate(outer)]
                out.append(Region(tensor, tuple(begin), tuple(extent + [int(last[j] - last[start])])))
                start = None
    return out
