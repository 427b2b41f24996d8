"""Array helpers shared by the units' columns (schemas/units.py) and the planner's passes
(scheduler/planning/plan_arrays.py and after): ragged rows held as one flat column plus their starts,
and grouping equal values (or rows) by one stable sort."""

from __future__ import annotations

import math

import numpy as np

I64 = np.int64


def excl(values: np.ndarray, dtype=I64) -> np.ndarray:
    """Exclusive cumulative sum with the total appended: len(values) + 1 entries (of `dtype`:
    the caller knows the total fits)."""
    out = np.zeros(len(values) + 1, dtype)
    np.cumsum(values, out=out[1:], dtype=dtype)
    return out


def ragged(counts: np.ndarray) -> np.ndarray:
    """0..counts[0]-1, 0..counts[1]-1, ... concatenated."""
    starts = excl(counts)
    return np.arange(starts[-1], dtype=I64) - np.repeat(starts[:-1], counts)


def sort_runs(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A stable sorting order of `code`, and per sorted place whether it starts a run of equal
    codes (the sorted codes are not kept: at a million units each such column is tens of MB of
    fresh memory)."""
    by = np.argsort(code, kind="stable")
    ordered = code[by]
    del code
    starts = np.empty(len(ordered), bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    return by, starts


def rows_runs(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """`sort_runs` of the rows of `columns`: one code per row, mixed radix over the columns'
    ranges (the last column least significant) when that fits 62 bits, else a lexical sort."""
    lows = [int(c.min(initial=0)) for c in columns]
    widths = [int(c.max(initial=0)) - low + 1 for c, low in zip(columns, lows, strict=True)]
    if math.prod(widths) < 1 << 62:
        code = np.zeros(len(columns[0]), I64)
        for column, low, span in zip(columns, lows, widths, strict=True):
            code *= span
            code += column
            code -= low
        return sort_runs(code)
    by = np.lexsort(columns[::-1])  # stable, the first column primary
    starts = np.zeros(len(by), bool)
    starts[:1] = True
    for column in columns:
        ordered = column[by]
        starts[1:] |= ordered[1:] != ordered[:-1]
    return by, starts


def spans(start: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """The positions start[c]:start[c + 1] of every chosen c, in order, concatenated."""
    lo, counts = start[chosen], start[chosen + 1] - start[chosen]
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=I64) + np.repeat(lo - (ends - counts), counts)
