"""The units of work of a cluster program: one per output super-tile, with their regions.

Programs may hold a million launches, so no object is made per unit here: every unit of a grid
has the same launches, so the units are made as columns (schemas/units.py, `UnitColumns`: per
access its tensor, start and shape) with numpy, from each tensor's region template (per axis:
which super-grid coordinate or chunk index scales its start, and its extent). The `Unit` objects
are made from the columns only where a consumer asks for them; the planner reads the columns.
"""

from __future__ import annotations

import math

import numpy as np

from common.errors import UserError
from compiler.cluster.access import AccessPlan, AxisRole
from compiler.cluster.accumulate import Accumulator
from compiler.cluster.tiling import DimCut, LeafVariants
from compiler.frontend import ir
from schemas.arrays import excl
from schemas.units import UnitColumns

# Per axis of a region template: (source, cut) where source is the position of the unit's
# coordinate that moves the axis, CHUNK for the cluster loop's chunk index, or FIXED (the axis is
# taken whole; cut is then its extent).
CHUNK = -1
FIXED = -2


def _template(param: ir.TensorParam, roles: tuple[AxisRole, ...], positions: dict[str, int],
              full: dict[str, int], cuts: dict[str, DimCut]):
    axes = []
    for dim, role in zip(param.dims, roles, strict=True):
        if role.kind == "grid":
            axes.append((positions[role.axis], cuts[dim]))
        elif role.kind == "chunk":
            axes.append((CHUNK, cuts[dim]))
        else:
            axes.append((FIXED, dim if isinstance(dim, int) else full[dim]))
    return tuple(axes)


class _Regions:
    """A tensor's regions for many (unit coordinate, chunk) pairs at once, as columns."""

    def __init__(self, name: str, axes):
        self.name, self.axes = name, axes
        self.chunked = any(src == CHUNK for src, _ in axes)

    def columns(self, coord: np.ndarray, chunk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, shape), one row per (coord row, chunk): a split axis starts at its super-tile
        or chunk index times the extent and has the extent, the last one of a ragged cut less."""
        start = np.zeros((len(chunk), len(self.axes)), np.int64)
        shape = np.empty((len(chunk), len(self.axes)), np.int64)
        for j, (src, cut) in enumerate(self.axes):
            if src == FIXED:
                shape[:, j] = cut
                continue
            at = chunk if src == CHUNK else coord[:, src]
            start[:, j] = at * cut.extent
            shape[:, j] = np.where(at == cut.count - 1, cut.last, cut.extent)
        return start, shape


class _Edges:
    """Which dimensions a unit (and a chunk) sees at their last, smaller super-tile."""

    def __init__(self, roles: dict[str, AxisRole], cuts: dict[str, DimCut], positions: dict[str, int]):
        self.grid = [(d, positions[r.axis], cuts[d]) for d, r in roles.items()
                     if r.kind == "grid" and cuts[d].ragged]
        self.chunk = next(((d, cuts[d]) for d, r in roles.items() if r.kind == "chunk" and cuts[d].ragged),
                          None)

    def of(self, coord: tuple[int, ...], chunk: int | None = None) -> tuple[tuple[str, int], ...]:
        edges = tuple((d, cut.last) for d, pos, cut in self.grid if coord[pos] == cut.count - 1)
        if chunk is not None and self.chunk is not None and chunk == self.chunk[1].count - 1:
            edges += ((self.chunk[0], self.chunk[1].last),)
        return edges


# Every step of a unit is instructions in the plan, and an object wherever the units' objects are
# made: about 0.8 KiB of scheduler memory per step as objects (measured: 2^21 steps of a matmul
# took 1.7 GB and 14 s to build).
# Beyond this bound a job is a typo in a dimension or a super-tile far too small, and enumerating
# it would exhaust the scheduler's memory (found by fuzzing: a tensor under the 2^36-element
# limit with 2^27 super-tiles).
MAX_UNIT_STEPS = 1 << 20


def _check_work_count(counts: list[int], steps: int) -> None:
    units = math.prod(counts)
    if units * steps > MAX_UNIT_STEPS:
        grid = " x ".join(str(n) for n in counts)
        raise UserError(f"the job has {units} units of work (super-grid {grid}) of {steps} step(s) each, "
                        f"more than {MAX_UNIT_STEPS} steps in all: choose larger @cluster values "
                        "(--cluster) or check the dimensions")


def build_units(
    kernel: ir.Kernel,
    plan: AccessPlan,
    acc: Accumulator | None,
    super_axes: list[tuple[str, int]],
    tiling: tuple[dict[str, int], dict[str, AxisRole], dict[str, DimCut]],
    variants: LeafVariants,
) -> UnitColumns:
    """`tiling` is (full dims, each dimension's role, each split dimension's cut)."""
    full, roles, cuts = tiling
    positions = {axis: i for i, (axis, _) in enumerate(super_axes)}
    regions: dict[str, _Regions] = {}
    for t in kernel.tensors:
        axis_roles = (
            plan.tensors[t.name].roles if t.name in plan.tensors else tuple(AxisRole("whole") for _ in t.dims)
        )
        regions[t.name] = _Regions(t.name, _template(t, axis_roles, positions, full, cuts))
    edges = _Edges(roles, cuts, positions)
    counts = [n for _, n in super_axes] or [1]
    _check_work_count(counts, cuts[acc.loop.stop.name].count if acc else 1)
    touched = [t.name for t in kernel.tensors if t.name in plan.tensors]
    reads = [t for t in touched if plan.tensors[t].reads]
    writes = [t for t in touched if plan.tensors[t].writes]
    coord = np.indices(counts).reshape(len(counts), -1).T  # row-major, as itertools.product
    if acc is None:
        launches = [("main", [(t, 0) for t in reads], [(t, 0) for t in writes])]
        return _grid_units(coord, regions, launches, [lambda c: variants.name("main", edges.of(c))], [0])
    out = acc.store.tensor
    chunks = cuts[acc.loop.stop.name].count
    init_reads = (out,) if acc.beta is not None else ()
    step_reads = tuple(t for t in touched if plan.tensors[t].reads or t == out)
    launches = [("init", [(t, 0) for t in init_reads], [(out, 0)])]
    launches += [("step", [(t, k) for t in step_reads], [(out, 0)]) for k in range(chunks)]
    names = [lambda c: variants.name("init", edges.of(c)), lambda c: variants.name("step", edges.of(c)),
             lambda c: variants.name("step", edges.of(c, chunks - 1))]
    return _grid_units(coord, regions, launches, names, [0] + [1] * (chunks - 1) + [2])


def _grid_units(coord: np.ndarray, regions: dict[str, _Regions], launches, names, leaf_of) -> UnitColumns:
    """The units of a grid as columns: every unit's launches alike, `launches` listing each one's
    leaf and its reads and writes as (tensor, chunk), a tensor's parameter named as it. A unit's
    leaves depend on which last (ragged) super-tiles it is at: `names` are the functions naming
    them from a coordinate, called for the first unit of each kind in order (that is when a
    variant is made), `leaf_of` picks one for every launch."""
    units, per_unit = len(coord), len(launches)
    pattern = [(t, k, write) for _, reads, writes in launches
               for part, write in ((reads, False), (writes, True)) for t, k in part]
    per_launch = np.array([len(r) + len(w) for _, r, w in launches], np.int64)
    tensors = list(dict.fromkeys(t for t, _, _ in pattern))
    kinds, first, unit_kind = np.unique(_edge_kind(coord), return_index=True, return_inverse=True)
    leaf_names: list[str] = []
    kind_leaves = np.empty((len(kinds), len(names)), np.int64)
    for i in np.argsort(first, kind="stable").tolist():
        c = tuple(coord[first[i]].tolist())
        for j, name in enumerate(names):
            variant = name(c)
            if variant not in leaf_names:
                leaf_names.append(variant)
            kind_leaves[i, j] = leaf_names.index(variant)
    text = tuple(dict.fromkeys([*tensors, *leaf_names]))
    lookup = {name: i for i, name in enumerate(text)}
    in_text = np.array([lookup[name] for name in leaf_names], np.int64)
    leaf = in_text[kind_leaves[unit_kind.reshape(-1)][:, list(leaf_of)]]
    widest = max((len(regions[t].axes) for t in tensors), default=0)
    count = units * len(pattern)
    start, shape = np.zeros((count, widest), np.int64), np.zeros((count, widest), np.int64)
    ndim = np.zeros(count, np.int64)
    columns_at: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}  # (tensor, chunk) -> its columns
    for slot, (t, k, _) in enumerate(pattern):  # a tensor recurs in many slots: its columns made once
        rows = slice(slot, count, len(pattern))
        axes = len(regions[t].axes)
        at = (t, k if regions[t].chunked else 0)  # the chunk moves only a chunked tensor's regions
        if at not in columns_at:
            columns_at[at] = regions[t].columns(coord, np.full(units, k, np.int64))
        start[rows, :axes], shape[rows, :axes] = columns_at[at]
        ndim[rows] = axes
    slots = np.array([lookup[t] for t, _, _ in pattern], np.int64)
    return UnitColumns.from_columns(
        coord, np.arange(units, dtype=np.int64), np.arange(units + 1, dtype=np.int64) * per_unit,
        leaf.reshape(-1), np.zeros(units * per_unit, np.int64),
        excl(np.tile(per_launch, units)),
        np.tile(slots, units), np.tile(np.array([w for _, _, w in pattern], bool), units),
        np.tile(slots, units), ndim, start, shape, names=text)


def _edge_kind(coord: np.ndarray) -> np.ndarray:
    """Per unit, which grid axes it is at the last super-tile of (bits): units alike in this
    have the same leaves."""
    kind = np.zeros(len(coord), np.int64)
    for src in range(coord.shape[1]):
        kind |= (coord[:, src] == coord[:, src].max(initial=0)).astype(np.int64) << src
    return kind
