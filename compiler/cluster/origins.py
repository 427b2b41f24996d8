"""Absolute positions in leaves: each leaf that reads `ctx.origin.<axis>` gets the origin of its
super-tile written into its IR.

`ctx.origin.a` is the start, in elements, of the unit's super-tile along grid axis a: the unit's
super-tile coordinate times the @cluster tile of that axis (0 along an axis the cluster does not
split). A kernel launched on its own is its own one super-tile, so there it is the constant 0.
The access checks (access.py) admit it only in an absolute position, `ctx.origin.a + ctx.block.a
* S`, which is then the same number in the leaf and in the plain kernel.

The origin is written into the leaf as a literal (a Const for each `ctx.origin.a`), one leaf per
distinct origin (named `main@ctx.origin.x=4096`): the runtime runs leaves by name and needs no
new argument, and a super-tile grid has few points along one axis. A leaf without `ctx.origin`
is left as it is.
"""

from __future__ import annotations

import dataclasses

from compiler import pipeline
from compiler.cluster.flops import leaf_flops
from compiler.cluster.leaves import checked_leaf, leaf_kernel, leaf_source
from compiler.frontend import ir, rewrite, walk
from schemas.program import ClusterProgram, Leaf, Unit


def _origin_consts(kernel: ir.Kernel) -> list[ir.Const]:
    return [e for e in walk.iter_body_exprs(kernel.body) if isinstance(e, ir.Const) and e.origin]


def _variant_name(base: str, origin: tuple[tuple[str, int], ...]) -> str:
    sep = "," if "@" in base else "@"
    return base + sep + ",".join(f"ctx.origin.{a}={v}" for a, v in origin)


class _OriginLeaves:
    """The leaves of a program by name, with a variant made once per (leaf, origin) used."""

    def __init__(self, leaves: tuple[Leaf, ...]):
        self.leaves = {leaf.name: leaf for leaf in leaves}
        self.sites: dict[str, tuple[ir.Kernel, list[ir.Const]]] = {}
        for leaf in leaves:
            kernel = leaf_kernel(leaf)  # the IR the cluster compiler just made: nothing is parsed
            consts = _origin_consts(kernel)
            if consts:
                self.sites[leaf.name] = (kernel, consts)
        self.made: dict[str, Leaf] = {}

    def name(self, base: str, origin: dict[str, int]) -> str:
        if base not in self.sites:
            return base
        kernel, consts = self.sites[base]
        used = tuple(sorted((a, origin.get(a, 0)) for a in {c.origin for c in consts}))
        name = _variant_name(base, used)
        if name not in self.made:
            self.made[name] = self._make(base, name, kernel, consts, dict(used))
        return name

    def _make(self, base: str, name: str, kernel: ir.Kernel, consts: list[ir.Const], origin) -> Leaf:
        leaf = self.leaves[base]

        def literal(e: ir.Expr) -> ir.Expr:
            if isinstance(e, ir.Const) and e.origin:
                return ir.Const(origin[e.origin], e.span)
            return e

        written = dataclasses.replace(kernel, body=rewrite.map_exprs(kernel.body, literal))
        special = checked_leaf(written, kernel)
        binding = pipeline.bind_stage(special, dict(leaf.dims), tile_values=dict(leaf.tile_values))
        ctas = 1
        for g in binding.grid:
            ctas *= g
        flops = leaf_flops(special, binding.env, ctas, binding.grid)
        return dataclasses.replace(leaf, name=name, source=leaf_source(special), flops=flops)

    def all(self) -> tuple[Leaf, ...]:
        kept = tuple(leaf for name, leaf in self.leaves.items() if name not in self.sites)
        return kept + tuple(self.made.values())


def place_origins(program: ClusterProgram, kernel: ir.Kernel, grid_tiles: dict[str, str]) -> ClusterProgram:
    """`program` (of the user's `kernel`) with every launch of a leaf that reads `ctx.origin`
    renamed to the leaf written for its unit's origin. `grid_tiles` maps each cluster grid axis to
    its @cluster tile name."""
    if not _origin_consts(kernel):
        return program  # the common case: no leaf is parsed again
    leaves = _OriginLeaves(program.leaves)
    if not leaves.sites:
        return program
    cv = dict(program.cluster_values)
    axes = "xyz"[: len(program.super_grid)]

    def unit_with_origin(unit: Unit) -> Unit:
        origin = {a: unit.coord[i] * cv[grid_tiles[a]] for i, a in enumerate(axes) if a in grid_tiles}
        launches = tuple(dataclasses.replace(la, leaf=leaves.name(la.leaf, origin)) for la in unit.launches)
        return dataclasses.replace(unit, launches=launches)

    units = tuple(unit_with_origin(u) for u in program.units)
    return dataclasses.replace(program, units=units, leaves=leaves.all())
