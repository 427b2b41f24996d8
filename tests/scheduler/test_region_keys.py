"""The planner numbers region keys (scheduler/plan_arrays.number_regions) by sorting hashes of
the regions' fields instead of a dict: equal regions one key, keys in order of first access,
whether equal regions are one object or several, and still right when unequal regions share a
hash (in CPython hash(-1) == hash(-2), so (-1,) and (-2,) collide as tuples)."""

from __future__ import annotations

import numpy as np

from scheduler.plan_arrays import number_regions
from schemas.program import Region


def _by_dict(regions: list[Region]) -> tuple[list[int], list[Region]]:
    ids: dict[Region, int] = {}
    return [ids.setdefault(r, len(ids)) for r in regions], list(ids)


def _check(regions: list[Region]) -> None:
    keys, firsts = number_regions(regions)
    want_keys, want_firsts = _by_dict(regions)
    assert keys.dtype == np.int64 and keys.tolist() == want_keys
    assert list(firsts) == want_firsts
    assert all(a is b for a, b in zip(firsts, want_firsts, strict=True))  # the first access's object


def test_distinct_regions_are_their_own_keys():
    _check([Region(t, (i * 16,), (16,)) for i in range(50) for t in "abc"])


def test_one_object_shared_between_accesses_is_one_key():
    a, b, c = Region("A", (0, 0), (16, 16)), Region("B", (0, 16), (16, 16)), Region("C", (16, 0), (16, 16))
    _check([c, a, b, c, a, b, c, c, a])


def test_equal_objects_are_one_key():
    _check([Region("A", (i % 3, 0), (4, 4)) for i in range(20)] + [Region("B", (0, 0), (4, 4))] * 3)


def test_unequal_regions_with_one_hash_get_two_keys():
    low, lower = Region("a", (-1,), (4,)), Region("a", (-2,), (4,))
    assert hash((low.tensor, low.start, low.shape)) == hash((lower.tensor, lower.start, lower.shape))
    _check([low, lower, Region("a", (0,), (4,)), Region("a", (-1,), (4,)), lower])


def test_no_regions():
    keys, firsts = number_regions([])
    assert len(keys) == 0 and list(firsts) == []
