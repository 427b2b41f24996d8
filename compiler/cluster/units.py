"""The units of work of a cluster program: one per output super-tile, with their regions.

Programs may hold 100,000 units, so everything per unit is plain tuple arithmetic: each tensor's
region is precomputed as a template (per axis: which super-grid coordinate or chunk index scales
its start, and its extent), regions that do not move are shared, and a region that depends only on
the unit is built once per unit.
"""

from __future__ import annotations

import gc
import itertools
import math
from contextlib import contextmanager

from common.errors import UserError
from compiler.cluster.access import AccessPlan, AxisRole
from compiler.cluster.accumulate import Accumulator
from compiler.cluster.tiling import DimCut, LeafVariants
from compiler.frontend import ir
from schemas.program import Launch, Region, Unit

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
    """Region of a tensor for a (unit coordinate, chunk) pair, built cheaply."""

    def __init__(self, name: str, axes):
        self.name, self.axes = name, axes
        self.fixed = all(src == FIXED for src, _ in axes)
        self.chunked = any(src == CHUNK for src, _ in axes)
        self.ragged = any(src != FIXED and cut.ragged for src, cut in axes)
        self.shape = tuple(cut if src == FIXED else cut.extent for src, cut in axes)
        self.const = Region(name, (0,) * len(axes), self.shape) if self.fixed else None

    def at(self, coord: tuple[int, ...], chunk: int) -> Region:
        if self.const is not None:
            return self.const
        where = tuple(0 if src == FIXED else (chunk if src == CHUNK else coord[src]) for src, _ in self.axes)
        pairs = tuple(zip(where, self.axes, strict=True))
        start = tuple(0 if src == FIXED else i * cut.extent for i, (src, cut) in pairs)
        if not self.ragged:
            return Region(self.name, start, self.shape)
        shape = tuple(cut if src == FIXED else cut.size_at(i) for i, (src, cut) in pairs)
        return Region(self.name, start, shape)


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


@contextmanager
def no_gc_pauses():
    """Units are acyclic tuples; letting the cycle collector rescan the growing heap every few
    thousand allocations made building 100,000 units five times slower."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# Every unit and every step of it is an object here and instructions in the plan: about 0.8 KiB
# of scheduler memory per step (measured: 2^21 steps of a matmul took 1.7 GB and 14 s to build).
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
) -> tuple[Unit, ...]:
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
    coords = itertools.product(*(range(n) for n in counts))
    touched = [t.name for t in kernel.tensors if t.name in plan.tensors]
    reads = [t for t in touched if plan.tensors[t].reads]
    writes = [t for t in touched if plan.tensors[t].writes]
    with no_gc_pauses():
        if acc is None:
            return tuple(
                _main_unit(i, c, regions, reads, writes, variants.name("main", edges.of(c)))
                for i, c in enumerate(coords)
            )
        out = acc.store.tensor
        chunks = cuts[acc.loop.stop.name].count
        init_reads = (out,) if acc.beta is not None else ()
        step_reads = tuple(t for t in touched if plan.tensors[t].reads or t == out)
        return tuple(
            _accumulator_unit(i, c, regions, out, (init_reads, step_reads), chunks,
                              lambda base, k=None, c=c: variants.name(base, edges.of(c, k)))
            for i, c in enumerate(coords)
        )


def _main_unit(index: int, coord: tuple[int, ...], regions: dict[str, _Regions], reads, writes,
               leaf: str) -> Unit:
    at = {t: regions[t].at(coord, 0) for t in {*reads, *writes}}
    launch = Launch(leaf, tuple((t, at[t]) for t in reads), tuple((t, at[t]) for t in writes))
    return Unit(coord, index, (launch,))


def _accumulator_unit(
    index: int,
    coord: tuple[int, ...],
    regions: dict[str, _Regions],
    out: str,
    reads: tuple[tuple[str, ...], tuple[str, ...]],
    chunks: int,
    leaf_name,
) -> Unit:
    init_reads, step_reads = reads
    out_region = regions[out].at(coord, 0)
    writes = ((out, out_region),)
    launches = [Launch(leaf_name("init"), tuple((t, out_region) for t in init_reads), writes)]
    steady = {t: regions[t].at(coord, 0) for t in step_reads if not regions[t].chunked}
    step, last_step = leaf_name("step"), leaf_name("step", chunks - 1)
    for k in range(chunks):
        bound = tuple((t, steady[t] if t in steady else regions[t].at(coord, k)) for t in step_reads)
        launches.append(Launch(last_step if k == chunks - 1 else step, bound, writes))
    return Unit(coord, index, tuple(launches))
