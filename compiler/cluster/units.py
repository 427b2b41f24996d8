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
from compiler.frontend import ir
from schemas.program import Launch, Region, Unit

# Per axis of a region template: (source, stride) where source is the position of the unit's
# coordinate that moves the axis, CHUNK for the cluster loop's chunk index, or FIXED.
CHUNK = -1
FIXED = -2


def _template(
    param: ir.TensorParam,
    roles: tuple[AxisRole, ...],
    positions: dict[str, int],
    full: dict[str, int],
    cv: dict[str, int],
):
    axes, shape = [], []
    for dim, role in zip(param.dims, roles, strict=True):
        if role.kind == "grid":
            axes.append((positions[role.axis], cv[role.tile]))
            shape.append(cv[role.tile])
        elif role.kind == "chunk":
            axes.append((CHUNK, cv[role.tile]))
            shape.append(cv[role.tile])
        else:
            axes.append((FIXED, 0))
            shape.append(dim if isinstance(dim, int) else full[dim])
    return tuple(axes), tuple(shape)


class _Regions:
    """Region of a tensor for a (unit coordinate, chunk) pair, built cheaply."""

    def __init__(self, name: str, axes, shape):
        self.name, self.axes, self.shape = name, axes, shape
        self.fixed = all(src == FIXED for src, _ in axes)
        self.chunked = any(src == CHUNK for src, _ in axes)
        self.const = Region(name, (0,) * len(axes), shape) if self.fixed else None

    def at(self, coord: tuple[int, ...], chunk: int) -> Region:
        if self.const is not None:
            return self.const
        start = tuple(
            0 if src == FIXED else (chunk if src == CHUNK else coord[src]) * stride
            for src, stride in self.axes
        )
        return Region(self.name, start, self.shape)


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
                        "(--set) or check the dimensions")


def build_units(
    kernel: ir.Kernel,
    plan: AccessPlan,
    acc: Accumulator | None,
    super_axes: list[tuple[str, int]],
    full: dict[str, int],
    cv: dict[str, int],
) -> tuple[Unit, ...]:
    positions = {axis: i for i, (axis, _) in enumerate(super_axes)}
    regions: dict[str, _Regions] = {}
    for t in kernel.tensors:
        roles = (
            plan.tensors[t.name].roles if t.name in plan.tensors else tuple(AxisRole("whole") for _ in t.dims)
        )
        regions[t.name] = _Regions(t.name, *_template(t, roles, positions, full, cv))
    counts = [n for _, n in super_axes] or [1]
    _check_work_count(counts, full[acc.loop.stop.name] // cv[acc.loop.step.name] if acc else 1)
    coords = itertools.product(*(range(n) for n in counts))
    touched = [t.name for t in kernel.tensors if t.name in plan.tensors]
    reads = [t for t in touched if plan.tensors[t].reads]
    writes = [t for t in touched if plan.tensors[t].writes]
    with no_gc_pauses():
        if acc is None:
            return tuple(_main_unit(i, c, regions, reads, writes) for i, c in enumerate(coords))
        out = acc.store.tensor
        chunks = full[acc.loop.stop.name] // cv[acc.loop.step.name]
        init_reads = (out,) if acc.beta is not None else ()
        step_reads = tuple(t for t in touched if plan.tensors[t].reads or t == out)
        return tuple(
            _accumulator_unit(i, c, regions, out, init_reads, step_reads, chunks)
            for i, c in enumerate(coords)
        )


def _main_unit(index: int, coord: tuple[int, ...], regions: dict[str, _Regions], reads, writes) -> Unit:
    at = {t: regions[t].at(coord, 0) for t in {*reads, *writes}}
    launch = Launch("main", tuple((t, at[t]) for t in reads), tuple((t, at[t]) for t in writes))
    return Unit(coord, index, (launch,))


def _accumulator_unit(
    index: int,
    coord: tuple[int, ...],
    regions: dict[str, _Regions],
    out: str,
    init_reads: tuple[str, ...],
    step_reads: tuple[str, ...],
    chunks: int,
) -> Unit:
    out_region = regions[out].at(coord, 0)
    writes = ((out, out_region),)
    launches = [Launch("init", tuple((t, out_region) for t in init_reads), writes)]
    steady = {t: regions[t].at(coord, 0) for t in step_reads if not regions[t].chunked}
    for k in range(chunks):
        step = tuple((t, steady[t] if t in steady else regions[t].at(coord, k)) for t in step_reads)
        launches.append(Launch("step", step, writes))
    return Unit(coord, index, tuple(launches))
