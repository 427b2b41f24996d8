"""The readable text form of a cluster program (what `//compiler -- cluster` prints)."""

from __future__ import annotations

from schemas.program import ClusterProgram, Launch, Leaf, Reduction, Region

UNITS_SHOWN = 16  # units listed in full; the rest are counted
LAUNCHES_SHOWN = 6  # launches listed per unit; the rest are counted


def _pairs(pairs) -> str:
    return ", ".join(f"{n}={v}" for n, v in pairs) or "none"


def format_region(region: Region) -> str:
    box = ", ".join(f"{s}:{s + n}" for s, n in zip(region.start, region.shape, strict=True))
    return f"{region.tensor}[{box}]"


def _bound(pairs) -> str:
    return " ".join(format_region(r) if p == r.tensor else f"{p}={format_region(r)}" for p, r in pairs) or "-"


def format_launch(launch: Launch, shares: bool = False) -> str:
    share = f"share {launch.share}: " if shares else ""
    return f"{share}{launch.leaf:<5} reads {_bound(launch.reads)}  writes {_bound(launch.writes)}"


def format_tree(reduction: Reduction) -> list[str]:
    """The reduction tree, one line per round of merges (`into <- source`)."""
    hosts = f", hosts of {'+'.join(map(str, reduction.hosts))} shares" if reduction.hosts else ""
    out = [f"  reduction: {reduction.form} over {reduction.shares} share(s), {reduction.tree} tree{hosts}"]
    for i, merges in enumerate(reduction.rounds, 1):
        out.append(f"    round {i}: " + "   ".join(f"{a} <- {b}" for a, b in merges))
    return out


def format_leaf(leaf: Leaf) -> str:
    grid = " x ".join(str(g) for g in leaf.grid)
    return (
        f"{leaf.name}: kernel {leaf.kernel}; dims {_pairs(leaf.dims)}; tiles {_pairs(leaf.tile_values)}; "
        f"CTA grid {grid}; {leaf.threads} threads; ~{leaf.flops:.3g} flops per launch"
    )


def format_program(program: ClusterProgram, units_shown: int = UNITS_SHOWN) -> str:
    axes = "xyz"[: len(program.super_grid)]
    grid = " x ".join(str(n) for n in program.super_grid)
    out = [
        f"cluster program of kernel {program.kernel}",
        f"  dims: {_pairs(program.dims)}",
        f"  @cluster values: {_pairs(program.cluster_values)}",
        f"  leaf tile values (@autotune): {_pairs(program.tile_values)}",
        f"  super-tile grid: {grid} ({', '.join(axes)}) = {len(program.units)} units of work",
        "  tensors:",
    ]
    width = max((len(t.name) for t in program.tensors), default=1)
    for t in program.tensors:
        shape = ", ".join(str(s) for s in t.shape)
        out.append(f"    {t.name:<{width}}  {t.dtype}[{shape}]  {t.role}")
    if program.reduction is not None:
        out += format_tree(program.reduction)
    out.append("  leaves:")
    out += [f"    {format_leaf(leaf)}" for leaf in program.leaves]
    out.append("  units (coordinate: launches in order):")
    for unit in program.units[:units_shown]:
        head = f"    #{unit.index} {unit.coord}: "
        pad = " " * len(head)
        for i, launch in enumerate(unit.launches[:LAUNCHES_SHOWN]):
            out.append((head if i == 0 else pad) + format_launch(launch, program.reduction is not None))
        hidden = len(unit.launches) - LAUNCHES_SHOWN
        if hidden > 0:
            out.append(f"{pad}... and {hidden} more launches")
    hidden = len(program.units) - units_shown
    if hidden > 0:
        out.append(f"    ... and {hidden} more units")
    return "\n".join(out)
