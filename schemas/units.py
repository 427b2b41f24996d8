"""A unit of work's objects (Region, Launch, Unit), and many units as columns (UnitColumns).

A million-unit program has three million (parameter, region) accesses. The planner
(scheduler/planning/plan_arrays.py) groups them with numpy, and walking the objects in Python to number
them took most of a plan's time (about 3 s of ~6 at a million units on the 2-core CI machine). So
a `ClusterProgram` holds its units as `UnitColumns`, and every plan and re-plan reads the columns
(a re-plan takes a subset: `take`). The cluster compiler makes a grid's units as columns directly
(compiler/cluster/units.py), and `UnitColumns` makes a `Unit` object from them only when someone
indexes or iterates the units (a block at a time; equal regions one object). Units given as
objects (a split reduction's, hand-built programs, tests) are walked into columns once, when the
program is made, and the objects kept. Either way `UnitColumns` reads as a `Sequence[Unit]`, so
every other consumer sees the same `Unit`s; the scheduler's own per-unit questions (a unit's
stores, each leaf's written parameters) have column answers here too.

Columns, in the units' order (each unit's launches in order, each launch's reads then writes):

    per unit    unit_index; launch_start (its launches: launch_start[u]:launch_start[u + 1]);
                coord (None where every object is made)
    per launch  leaf (into `names`), share; access_start (its accesses, likewise)
    per access  param (into `names`), write (False for the launch's reads), tensor (into
                `names`), ndim, start and shape (one column per axis, padded with zeros to the
                widest region)

`names` holds the parameter, leaf and tensor names; their order means nothing (the planner
numbers names in its own order of first use).
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import attrgetter, itemgetter

import numpy as np

from schemas.arrays import I64, excl, ragged, rows_runs, spans


@dataclass(frozen=True)
class Region:
    """A box of a tensor in storage: `shape` elements starting at `start`, one per axis."""

    tensor: str
    start: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass(frozen=True)
class Launch:
    """One launch of a leaf: which region of which tensor each tensor parameter is bound to."""

    leaf: str
    reads: tuple[tuple[str, Region], ...]  # (parameter, region) for every tensor it loads
    writes: tuple[tuple[str, Region], ...]  # (parameter, region) for every tensor it stores
    share: int = 0  # in a split reduction, the share (one node's part of the unit) that runs it


@dataclass(frozen=True)
class Unit:
    """One unit of work: everything that produces one output super-tile, launched in order.

    Without a cluster loop: one "main" launch. With one: an "init" launch then one "step"
    launch per chunk of the loop; the accumulator lives in the output's own buffer.
    `index` is the row-major index of the output super-tile, by which placement deals units.
    """

    coord: tuple[int, ...]
    index: int
    launches: tuple[Launch, ...]


@contextmanager
def no_gc_pauses():
    """Units are acyclic tuples; letting the cycle collector rescan the growing heap every few
    thousand allocations made building 100,000 units five times slower (and making a compiled
    program's 300k add units from its columns 2.2 times slower)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclass(frozen=True, eq=False)
class UnitColumns(Sequence[Unit]):
    # the units' objects where made: all of them when the columns were made from them, else each
    # made from the columns when first asked for (`coord` then holds every unit's coordinate)
    objects: list[Unit | None]
    coord: np.ndarray | None
    unit_index: np.ndarray
    launch_start: np.ndarray
    leaf: np.ndarray
    share: np.ndarray
    access_start: np.ndarray
    param: np.ndarray
    write: np.ndarray
    tensor: np.ndarray
    ndim: np.ndarray
    start: np.ndarray  # (accesses, widest) int64
    shape: np.ndarray
    names: tuple[str, ...]

    @classmethod
    def of(cls, units: Sequence[Unit]) -> UnitColumns:
        return units if isinstance(units, UnitColumns) else cls.from_units(units)

    @classmethod
    def from_units(cls, units: Sequence[Unit]) -> UnitColumns:
        """The columns of `units`, by one walk over their objects (C-level maps, no Python
        per access but the maps' own)."""
        units = tuple(units)
        launches = [launch for unit in units for launch in unit.launches]
        n_units, n_launches = len(units), len(launches)
        per_unit = np.fromiter(map(len, map(attrgetter("launches"), units)), I64, n_units)
        n_read = np.fromiter(map(len, map(attrgetter("reads"), launches)), I64, n_launches)
        n_access = n_read + np.fromiter(map(len, map(attrgetter("writes"), launches)), I64, n_launches)
        accesses = [pair for launch in launches for part in (launch.reads, launch.writes) for pair in part]
        count = len(accesses)
        numbers: dict[str, int] = {}
        number = numbers.setdefault
        counter = itertools.count()
        param = np.fromiter(map(number, map(itemgetter(0), accesses), counter), I64, count)
        leaf = np.fromiter(map(number, map(attrgetter("leaf"), launches), counter), I64, n_launches)
        regions = list(map(itemgetter(1), accesses))
        del accesses
        tensor = np.fromiter(map(number, map(attrgetter("tensor"), regions), counter), I64, count)
        starts = list(map(attrgetter("start"), regions))
        shapes = list(map(attrgetter("shape"), regions))
        del regions
        ndim = np.fromiter(map(len, starts), I64, count)
        if not np.array_equal(ndim, np.fromiter(map(len, shapes), I64, count)):
            raise ValueError("a region's start and shape have different lengths")
        access_start = excl(n_access)
        write = ragged(n_access) >= np.repeat(n_read, n_access)
        share = np.fromiter(map(attrgetter("share"), launches), I64, n_launches)
        return cls(list(units), None, np.fromiter(map(attrgetter("index"), units), I64, n_units),
                   excl(per_unit),
                   _dense_names(leaf, numbers), share, access_start, _dense_names(param, numbers), write,
                   _dense_names(tensor, numbers), ndim,
                   _padded(starts, ndim), _padded(shapes, ndim), tuple(numbers))

    @classmethod
    def from_columns(cls, coord: np.ndarray, *columns, names: tuple[str, ...]) -> UnitColumns:
        """Units given as columns (`coord`: per unit its coordinate, then the columns in the
        order of the fields); their objects are made when asked for."""
        return cls([None] * len(coord), coord, *columns, names)

    # ---- a Sequence of the units ----

    @property
    def units(self) -> tuple[Unit, ...]:
        return tuple(self)

    def __len__(self) -> int:
        return len(self.objects)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.take(np.arange(len(self), dtype=I64)[index])
        unit = self.objects[index]
        if unit is None:
            index = range(len(self))[index]
            unit = self._units_at(index, index + 1)[0]
        return unit

    def __iter__(self) -> Iterator[Unit]:
        if self.coord is None:
            return iter(self.objects)
        step = 4096  # units made at a time
        return (unit for lo in range(0, len(self), step)
                for unit in self._units_at(lo, min(len(self), lo + step)))

    def __eq__(self, other) -> bool:
        if isinstance(other, UnitColumns):
            return self.units == other.units
        if isinstance(other, tuple | list):
            return self.units == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.units)

    def __repr__(self) -> str:
        return f"UnitColumns({len(self)} units)"

    def _units_at(self, lo: int, hi: int) -> list[Unit]:
        """Units lo..hi-1, made from the columns where not made yet (equal regions one object,
        shared with the units made before)."""
        missing = [u for u in range(lo, hi) if self.objects[u] is None]
        if missing:
            with no_gc_pauses():
                self._fill(missing[0], missing[-1] + 1)
        return self.objects[lo:hi]

    def _fill(self, lo: int, hi: int) -> None:
        names = self.names
        launch_at = self.launch_start[lo:hi + 1].tolist()
        la0, la1 = launch_at[0], launch_at[-1]
        at = self.access_start[la0:la1 + 1]
        first, last = int(at[0]), int(at[-1])
        rows = slice(first, last)
        params = map(names.__getitem__, self.param[rows].tolist())
        pairs = list(zip(params, self.regions_at(rows), strict=True))
        reads = np.cumsum(~self.write[rows], dtype=I64)  # reads come first in a launch
        ends = (at - first).tolist()
        split = (np.concatenate([[0], reads])[at[1:] - first] - np.concatenate([[0], reads])[at[:-1] - first]
                 + at[:-1] - first).tolist()
        launches = [Launch(leaf, tuple(pairs[ends[i]:split[i]]), tuple(pairs[split[i]:ends[i + 1]]), share)
                    for i, (leaf, share) in enumerate(zip(map(names.__getitem__, self.leaf[la0:la1].tolist()),
                                                          self.share[la0:la1].tolist(), strict=True))]
        for u, coord, index in zip(range(lo, hi), self.coord[lo:hi].tolist(), self.unit_index[lo:hi].tolist(),
                                   strict=True):
            if self.objects[u] is None:
                self.objects[u] = Unit(tuple(coord), index, tuple(launches[launch_at[u - lo] - la0:
                                                                          launch_at[u - lo + 1] - la0]))

    def regions_at(self, rows: slice | np.ndarray) -> list[Region]:
        """The regions of the accesses at `rows` (a slice or positions) made from the columns:
        one object per distinct region, kept and handed to every unit or key made after."""
        shared = self.__dict__.setdefault("_regions", {})
        ndim = self.ndim[rows]
        if np.all(ndim == self.start.shape[1]):  # no padding to cut off
            starts, shapes = map(tuple, self.start[rows].tolist()), map(tuple, self.shape[rows].tolist())
        else:
            starts = (tuple(s[:n]) for s, n in zip(self.start[rows].tolist(), ndim.tolist(), strict=True))
            shapes = (tuple(s[:n]) for s, n in zip(self.shape[rows].tolist(), ndim.tolist(), strict=True))
        tensors = map(self.names.__getitem__, self.tensor[rows].tolist())
        regions = []
        for fields in zip(tensors, starts, shapes, strict=True):
            region = shared.get(fields)
            if region is None:
                region = shared[fields] = Region(*fields)
            regions.append(region)
        return regions

    def region_runs(self, accesses: np.ndarray, *leading: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`sort_runs` of the regions of `accesses` (equal when their tensor, start and shape
        are), after the `leading` columns (one value per access) if any."""
        # the start before the tensor: the codes of a grid's regions then come nearly in order,
        # which the stable sort (a merge of runs) takes in one pass
        return rows_runs([*leading, *self.start[accesses].T, *self.shape[accesses].T, self.ndim[accesses],
                           self.tensor[accesses]])

    def writes_per_unit(self, skip: set[str]) -> dict[int, int]:
        """unit index -> how many distinct regions its launches write, of tensors not in `skip`."""
        skipped = np.array([name in skip for name in self.names], bool)
        written = np.flatnonzero(self.write & ~skipped[self.tensor])
        launch = np.repeat(np.arange(len(self.leaf), dtype=I64), np.diff(self.access_start))[written]
        unit = np.repeat(np.arange(len(self), dtype=I64), np.diff(self.launch_start))[launch]
        by, starts = self.region_runs(written, unit)
        counts = np.bincount(unit[by[starts]], minlength=len(self))
        return dict(zip(self.unit_index.tolist(), counts.tolist(), strict=True))

    def positions_of(self, indices: Sequence[int]) -> np.ndarray:
        """Each unit index's position among these units (the first, should two units share it),
        -1 where none has it."""
        wanted = np.asarray(indices, I64)
        if not len(self):
            return np.full(len(wanted), -1, I64)
        order = np.argsort(self.unit_index, kind="stable")
        at = order[np.minimum(np.searchsorted(self.unit_index, wanted, sorter=order), len(order) - 1)]
        return np.where(self.unit_index[at] == wanted, at, -1)

    def unit_outputs(self, indices: Sequence[int]) -> list[tuple[tuple[int, ...], list[tuple]]]:
        """Per unit of `indices` (unit indices): its coordinate and the distinct regions its
        launches write, in order of first write, as (tensor, start, shape): what the trace records
        of every unit placed, without making the units' objects."""
        positions = self.positions_of(indices)
        if np.any(positions < 0):
            raise KeyError("a unit index that is not one of these units")
        launches = spans(self.launch_start, positions)
        per_launch = np.diff(self.access_start)[launches]
        accesses = spans(self.access_start, launches)
        unit_launch = np.repeat(np.arange(len(positions), dtype=I64), np.diff(self.launch_start)[positions])
        unit = np.repeat(unit_launch, per_launch)
        writes = np.flatnonzero(self.write[accesses])
        by, starts = self.region_runs(accesses[writes], unit[writes])
        firsts = np.sort(writes[by[starts]])  # each (unit, region) once, in access order
        outputs: list[list[tuple]] = [[] for _ in range(len(positions))]
        names, chosen = self.names, accesses[firsts]
        for u, t, n, start, shape in zip(unit[firsts].tolist(), self.tensor[chosen].tolist(),
                                         self.ndim[chosen].tolist(), self.start[chosen].tolist(),
                                         self.shape[chosen].tolist(), strict=True):
            outputs[u].append((names[t], start[:n], shape[:n]))
        if self.coord is None:
            coords = [self.objects[p].coord for p in positions.tolist()]
        else:
            coords = list(map(tuple, self.coord[positions].tolist()))
        return list(zip(coords, outputs, strict=True))

    def written(self, tensor: str, rank: int) -> tuple[np.ndarray, np.ndarray]:
        """The distinct regions of `tensor` (of `rank` axes) that the units write, in order of
        first write, as (start, shape) rows: a staging copy's coverage (scheduler/jobs/coverage.py)
        reads them as arrays, and a million regions made as objects would cost seconds."""
        number = self.names.index(tensor) if tensor in self.names else -1
        chosen = np.flatnonzero(self.write & (self.tensor == number))
        by, starts = self.region_runs(chosen)
        first = chosen[np.sort(by[starts])]
        if np.any(self.ndim[first] != rank):
            raise ValueError(f"a region of {tensor} written with other than its {rank} axes")
        if not len(first):  # the columns may be narrower than `rank`
            return np.zeros((0, rank), I64), np.zeros((0, rank), I64)
        return self.start[first, :rank], self.shape[first, :rank]

    def first_writes(self) -> dict[str, list[str]]:
        """leaf name -> the parameters that the first launch of it writes, leaves in order of
        their first launch."""
        out = {}
        for la in np.sort(np.unique(self.leaf, return_index=True)[1]).tolist():
            accesses = np.arange(self.access_start[la], self.access_start[la + 1])
            params = self.param[accesses[self.write[accesses]]].tolist()
            out[self.names[self.leaf[la]]] = [self.names[p] for p in params]
        return out

    def take(self, positions: np.ndarray) -> UnitColumns:
        """The units at `positions` (of this sequence), in that order."""
        positions = np.asarray(positions, I64)
        launches = spans(self.launch_start, positions)
        accesses = spans(self.access_start, launches)
        return UnitColumns(
            list(map(self.objects.__getitem__, positions.tolist())),
            None if self.coord is None else self.coord[positions], self.unit_index[positions],
            excl(np.diff(self.launch_start)[positions]), self.leaf[launches], self.share[launches],
            excl(np.diff(self.access_start)[launches]), self.param[accesses], self.write[accesses],
            self.tensor[accesses], self.ndim[accesses], self.start[accesses], self.shape[accesses],
            self.names)

    def take_units(self, units: Sequence[Unit]) -> UnitColumns:
        """`units` as columns: by `take` when every one of them is one of these units (a re-plan
        of some of a program's units), else by walking them."""
        if isinstance(units, UnitColumns):
            return units
        units = tuple(units)
        positions = self.positions_of([unit.index for unit in units]).tolist()
        if all(p >= 0 and self[p] is unit for p, unit in zip(positions, units, strict=True)):
            return self.take(np.array(positions, I64))
        return UnitColumns.from_units(units)

    def regions(self, accesses: np.ndarray) -> Sequence[Region]:
        """The regions of the accesses at `accesses` (positions among these units' accesses)."""
        return AccessRegions(self, accesses)


class AccessRegions(Sequence[Region]):
    """The regions of chosen accesses (positions among the units' accesses): the program's own
    `Region` objects, looked up when asked for, a block of them at a time (the planner's keys:
    a plan holds no object per region until its instructions are read, and decoding them hands
    out the objects the program already holds rather than making new ones). A block once looked
    up is kept: a node's instructions name keys all over the program (units are dealt round
    robin), so each node's decoding would otherwise look every block up again, and the regions
    are held anyway (by the program's units, or its `regions_at`)."""

    _SHIFT = 10  # 1024 regions a block

    def __init__(self, units: UnitColumns, accesses: np.ndarray):
        self.units, self.accesses = units, accesses
        self._blocks: list[list[Region] | None] = [None] * -(-len(accesses) >> self._SHIFT)

    def __len__(self) -> int:
        return len(self.accesses)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        block = self._blocks[i >> self._SHIFT] or self._block(i >> self._SHIFT)
        return block[i & ((1 << self._SHIFT) - 1)]

    def _block(self, number: int) -> list[Region]:
        units = self.units
        chosen = self.accesses[number << self._SHIFT:(number + 1) << self._SHIFT]
        launch = np.searchsorted(units.access_start, chosen, "right") - 1
        unit = np.searchsorted(units.launch_start, launch, "right") - 1
        at = chosen - units.access_start[launch]
        launch -= units.launch_start[unit]
        block: list[Region] = []
        missing = []  # places in the block of regions whose unit is not made: made from the columns
        for u, la, j in zip(unit.tolist(), launch.tolist(), at.tolist(), strict=True):
            held = units.objects[u]
            if held is None:
                missing.append(len(block))
                block.append(None)
                continue
            one = held.launches[la]
            reads = one.reads
            block.append((reads[j] if j < len(reads) else one.writes[j - len(reads)])[1])
        if missing:  # made together: one pass over their columns (a compiled program's every key)
            with no_gc_pauses():
                regions = units.regions_at(chosen[missing])
            for place, region in zip(missing, regions, strict=True):
                block[place] = region
        self._blocks[number] = block
        return block


def _dense_names(numbers: np.ndarray, names: dict[str, int]) -> np.ndarray:
    """`numbers` were drawn from one counter shared by every kind of name (a name seen again
    keeps its first number, and the dict's numbers grow in its order): as positions in `names`."""
    return np.searchsorted(np.fromiter(names.values(), I64, len(names)), numbers)


def _padded(tuples: list[tuple[int, ...]], ndim: np.ndarray) -> np.ndarray:
    """The tuples as rows of an int64 matrix, padded with zeros to the longest (`ndim` says
    where each row ends: a padded place is never read as a value)."""
    widest = int(ndim.max(initial=0))
    flat = np.fromiter(itertools.chain.from_iterable(tuples), I64, int(ndim.sum()))
    if np.all(ndim == widest):
        return flat.reshape(len(tuples), widest)
    out = np.zeros((len(tuples), widest), I64)
    rows = np.repeat(np.arange(len(tuples), dtype=I64), ndim)
    out[rows, np.arange(len(flat), dtype=I64) - np.repeat(excl(ndim)[:-1], ndim)] = flat
    return out
