"""The planner numbers region keys (scheduler/planning/plan_arrays.number_keys) from the units' columns
(schemas/units.py) by sorting codes packed from each region's tensor, start and shape
instead of a dict: equal regions one key, keys in order of first access, whether equal regions
are one object or several; still right where the fields' ranges are too wide to pack (a lexical
sort then) and where regions of one tensor differ in their number of axes."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.planning.plan_arrays import number_keys
from schemas.arrays import rows_runs
from schemas.units import Launch, Region, Unit, UnitColumns


def _by_dict(regions: list[Region]) -> tuple[list[int], list[Region]]:
    ids: dict[Region, int] = {}
    return [ids.setdefault(r, len(ids)) for r in regions], list(ids)


def _check(regions: list[Region]) -> None:
    launch = Launch("main", tuple((f"p{i}", r) for i, r in enumerate(regions)), ())
    units = UnitColumns.from_units([Unit((0,), 0, (launch,))])
    keys, firsts = number_keys(units, np.arange(len(regions), dtype=np.int64))
    want_keys, want_firsts = _by_dict(regions)
    assert keys.dtype == np.int64 and keys.tolist() == want_keys
    assert list(units.regions(firsts)) == want_firsts
    # the first access's object
    assert all(a is b for a, b in zip(units.regions(firsts), want_firsts, strict=True))


def test_distinct_regions_are_their_own_keys():
    _check([Region(t, (i * 16,), (16,)) for i in range(50) for t in "abc"])


def test_one_object_shared_between_accesses_is_one_key():
    a, b, c = Region("A", (0, 0), (16, 16)), Region("B", (0, 16), (16, 16)), Region("C", (16, 0), (16, 16))
    _check([c, a, b, c, a, b, c, c, a])


def test_equal_objects_are_one_key():
    _check([Region("A", (i % 3, 0), (4, 4)) for i in range(20)] + [Region("B", (0, 0), (4, 4))] * 3)


def test_negative_starts_are_keys_of_their_own():
    low, lower = Region("a", (-1,), (4,)), Region("a", (-2,), (4,))
    _check([low, lower, Region("a", (0,), (4,)), Region("a", (-1,), (4,)), lower])


def test_fields_too_wide_to_pack_are_sorted_together():
    big = 1 << 40
    regions = [Region("a", (big * (i % 4), i % 3, 0), (big, 3, big)) for i in range(30)]
    _check(regions + [Region("b", (0, 0, 0), (big, 3, big)), regions[7]])


def test_regions_of_one_tensor_with_fewer_axes_are_not_padded_into_equals():
    _check([Region("a", (0,), (4,)), Region("a", (0, 0), (4, 0)), Region("a", (0,), (4,)),
            Region("a", (), ())])


def test_no_regions():
    _check([])


@pytest.mark.parametrize("widths, low", [
    ((1 << 31, (1 << 31) - 1), 0),  # the product just under 2**62: packed
    ((1 << 31, 1 << 31), 0),  # 2**62: sorted together
    ((1 << 31, (1 << 31) - 1), -(1 << 40)),  # negative, far from zero: the range from it is wide
    ((3, 1 << 61), -5),
    ((1 << 40, 1 << 30), 0),  # would overflow int64 if packed
])
def test_rows_at_the_ends_of_their_ranges_group_as_tuples_do(widths, low):
    """The packed code is exact up to its 62-bit bound and the lexical sort beyond it: rows at
    the extremes of each column's range sort (stably) and group as their tuples do."""
    rng = np.random.default_rng(1)
    a = (rng.integers(0, 2, 200) * (widths[0] - 1) + low).astype(np.int64)
    b = (rng.integers(0, 2, 200) * (widths[1] - 1)).astype(np.int64)
    extremes = np.array([2**63 - 1, -2**63, 0, 2**63 - 1, -2**63], np.int64)
    for columns in ([a, b], [b, a], [extremes, extremes[::-1].copy()]):
        by, starts = rows_runs(columns)
        rows = list(zip(*(c.tolist() for c in columns), strict=True))
        want = sorted(range(len(rows)), key=rows.__getitem__)
        assert by.tolist() == want
        assert starts.tolist() == [i == 0 or rows[want[i]] != rows[want[i - 1]] for i in range(len(rows))]
