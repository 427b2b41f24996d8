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


# ---- the cluster compiler's stages, as text (compiler/cluster/build.py ClusterState.describe) ------


def _describe_values(s) -> str:
    return (f"@cluster values: {_pairs(s.cluster_values.items())}\ndims: {_pairs(s.full.items())}\n"
            f"tile values: {_pairs(s.tile_values.items())}")


def _describe_loop(s) -> str:
    axes = ", ".join(f"{axis} by {tile}" for axis, tile in sorted(s.level.grid_tiles.items())) or "none"
    if s.loop is None:
        return f"super-tile grid axes: {axes}\ncluster loop: none"
    if hasattr(s.acc, "var"):  # an accumulator (accumulate.py)
        combine = f"accumulating {s.acc.var}"
    else:  # an online softmax (softmax.py)
        combine = f"an online softmax of {s.acc.m.name}, {s.acc.l.name} and {s.acc.acc.name}"
    return (f"super-tile grid axes: {axes}\ncluster loop: {s.loop.var} in steps of {s.level.loop_tile}, "
            f"{combine} into {s.acc.store.tensor}")


def _describe_accesses(s) -> str:
    lines = [f"{d}: {role.describe()}" for d, role in s.roles.items()]
    for name, access in s.plan.tensors.items():
        use = " and ".join(w for w, on in (("read", access.reads), ("written", access.writes)) if on)
        lines.append(f"tensor {name}: {use}")
    return "\n".join(lines)


def _describe_multiples(s) -> str:
    lines = [f"{d}: {c.count} super-tile(s) of {c.extent}" + (f", the last {c.last}" if c.ragged else "")
             for d, c in s.cuts.items()]
    return "\n".join([*lines, f"leaf dims: {_pairs(s.leaf_dims.items())}"])


def _describe_leaves(s) -> str:
    return "\n".join(format_leaf(leaf) for leaf in s.variants.leaves())


_DESCRIBE = {
    "choose_values": _describe_values,
    "find_loop": _describe_loop,
    "plan_accesses": _describe_accesses,
    "check_multiples": _describe_multiples,
    "make_leaves": _describe_leaves,
    "build_units": lambda s: format_program(s.program, units_shown=4),
}


def describe_stage(state, stage: str) -> str:
    """What the cluster stage `stage` added to `state` (a ClusterState), as text."""
    return _DESCRIBE[stage](state)
