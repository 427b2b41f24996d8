"""The cluster program: what the cluster compiler hands the scheduler.

A cluster program is a super-tile grid, the units of work (one per output super-tile), the
tensor regions each launch reads and writes, and the leaf kernels that do the work. Leaves are
phobos source text (the user's kernel with `@cluster` removed, or a generated init/step kernel),
so every backend (reference interpreter, CUDA) runs them like any other kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# Region, Launch and Unit live in schemas/units.py with the columns of many units; imported from
# here as ever
from schemas.units import Launch as Launch
from schemas.units import Region as Region
from schemas.units import Unit as Unit
from schemas.units import UnitColumns

# inout: read and written (C with beta); partial: a split reduction's scratch, never in storage
TensorRole = Literal["input", "output", "inout", "partial"]


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # storage dtype: f32, f16, bf16, i32
    shape: tuple[int, ...]  # the whole tensor's shape in storage
    role: TensorRole


@dataclass(frozen=True)
class Leaf:
    """A kernel that runs on one node over one super-tile, one launch at a time.

    `source` is a complete phobos file holding the kernel `kernel` (no @cluster attribute).
    Its parameters have the same names as the user's kernel's; each tensor parameter is bound to
    a buffer holding exactly the launch's region for it. `dims` are the leaf's dimensions (the
    super-tile extents, or the whole extent for a tensor that is not split), `tile_values` the
    @autotune values it runs with, `grid` its CTA grid, `threads` its CTA size.
    """

    name: str  # "main" (no cluster loop), or "init" / "step" (cluster loop)
    kernel: str
    source: str
    dims: tuple[tuple[str, int], ...]
    tile_values: tuple[tuple[str, int], ...]
    grid: tuple[int, ...]
    threads: int
    tensors: tuple[str, ...]  # tensor parameters, in declaration order
    scalars: tuple[str, ...]  # scalar parameters, in declaration order
    flops: int = 0  # floating-point operations of one launch, estimated by the compiler


@dataclass(frozen=True)
class ClusterProgram:
    kernel: str
    source: str  # the user's whole source file
    dims: tuple[tuple[str, int], ...]  # the problem's dimensions
    cluster_values: tuple[tuple[str, int], ...]  # the @cluster values chosen
    tile_values: tuple[tuple[str, int], ...]  # the @autotune values the leaves use
    super_grid: tuple[int, ...]  # super-tiles along each grid axis (x, y, z)
    tensors: tuple[TensorInfo, ...]
    scalars: tuple[str, ...]  # scalar parameter names; values come with the job
    leaves: tuple[Leaf, ...]
    # given as a sequence of Units; held as UnitColumns (schemas/units.py: a Sequence of the
    # same Units, and their columns, which the planner reads)
    units: Sequence[Unit]
    reduction: Reduction | None = None  # set when the cluster loop is split over nodes

    def __post_init__(self):
        object.__setattr__(self, "units", UnitColumns.of(self.units))

    def leaf(self, name: str) -> Leaf:
        for leaf in self.leaves:
            if leaf.name == name:
                return leaf
        raise KeyError(name)


@dataclass(frozen=True)
class Reduction:
    """A cluster loop split over nodes: each unit's chunks are cut into `shares` contiguous shares,
    each reduced into its own partial, and the partials merged by `rounds` (compiler/cluster/tree.py):
    per round, (into, source) shares merged at once. `form` is "sum" (the linear accumulator; share
    0's partial is the output itself) or "softmax" (partials (m, l, acc), merged by the log-sum-exp
    rule, and a "finish" launch stores the output from share 0's). `tree` names the shape, `hosts`
    the shares per host of a tree by hosts."""

    form: Literal["sum", "softmax"]
    shares: int
    tree: str
    hosts: tuple[int, ...]
    rounds: tuple[tuple[tuple[int, int], ...], ...]
