"""Absolute positions in leaves: each leaf that reads `ctx.origin.<axis>` gets the origin of its
super-tile written into its text.

`ctx.origin.a` is the start, in elements, of the unit's super-tile along grid axis a: the unit's
super-tile coordinate times the @cluster tile of that axis (0 along an axis the cluster does not
split). A kernel launched on its own is its own one super-tile, so there it is the constant 0.
The access checks (access.py) admit it only in an absolute position, `ctx.origin.a + ctx.block.a
* S`, which is then the same number in the leaf and in the plain kernel.

The origin is written into the leaf as a literal, one leaf per distinct origin (named
`main@ctx.origin.x=4096`): the runtime runs leaves by name and needs no new argument, and a
super-tile grid has few points along one axis. A leaf without `ctx.origin` is left as it is.
"""

from __future__ import annotations

import dataclasses

from compiler.cluster.flops import leaf_flops
from compiler.cluster.leaves import KernelText, load_leaf
from compiler.frontend import ir, walk
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
            kernel, _ = load_leaf(leaf)
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
        # Laid out at the leaf kernel's own lines and columns, as every leaf text is.
        text = KernelText(kernel).edited([(c.span, str(origin[c.origin])) for c in consts])
        made = dataclasses.replace(leaf, name=name, source=text)
        special, binding = load_leaf(made)
        ctas = 1
        for g in binding.grid:
            ctas *= g
        return dataclasses.replace(made, flops=leaf_flops(special, binding.env, ctas, binding.grid))

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
