"""How a problem's dimensions are cut into super-tiles, and the leaf each cut needs.

A dimension need not be a whole multiple of its super-tile: it is cut into `count` super-tiles of
`extent` elements, the last of which holds only what is left (`last`). A dimension smaller than
its super-tile is one super-tile of its own size. A leaf is bound to the extents of its launch, so
a launch on a last, smaller super-tile runs a variant of the leaf bound to that smaller extent;
the language's masked edges make the leaf right for any extent, as on one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.frontend.binding import kernel_dims


@dataclass(frozen=True)
class DimCut:
    """One split dimension: `count` super-tiles of `extent` elements, the last one `last`."""

    extent: int
    count: int
    last: int

    @property
    def ragged(self) -> bool:
        return self.last != self.extent

    def size_at(self, index: int) -> int:
        return self.last if index == self.count - 1 else self.extent


def cut_dimension(full: int, super_tile: int) -> DimCut:
    extent = min(full, super_tile)
    count = -(-full // extent)
    return DimCut(extent, count, full - (count - 1) * extent)


def variant_name(base: str, edges: tuple[tuple[str, int], ...]) -> str:
    """The name of the leaf `base` bound to smaller extents at the edges: `main@N=4,M=8`."""
    if not edges:
        return base
    return base + "@" + ",".join(f"{d}={v}" for d, v in edges)


class LeafVariants:
    """Leaves by base name ("main", "init", "step") and edge extents, each made once.

    `make(base, dims)` builds a Leaf named `base` bound at `dims`; `dims_of[base]` lists the
    dimensions of that leaf's kernel, so an edge in a dimension the leaf lacks is no variant.
    """

    def __init__(self, make, kernels: dict, leaf_dims: dict[str, int]):
        self._make, self._leaf_dims = make, leaf_dims
        self._dims_of = {base: set(kernel_dims(k)) for base, k in kernels.items()}
        self._made: dict[str, object] = {}
        for base in kernels:
            self.name(base, ())

    def name(self, base: str, edges: tuple[tuple[str, int], ...]) -> str:
        mine = tuple((d, v) for d, v in edges if d in self._dims_of[base])
        name = variant_name(base, mine)
        if name not in self._made:
            self._made[name] = self._make(base, name, {**self._leaf_dims, **dict(mine)})
        return name

    def leaves(self) -> tuple:
        return tuple(self._made.values())
