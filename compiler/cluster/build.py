"""compile_cluster: an @cluster kernel and concrete dims -> a ClusterProgram.

The stages, in the order compiler/pipeline.py CLUSTER_STAGES lists them, each
`stage(ClusterState) -> ClusterState` and dumped with PHOBOS_DUMP_STAGES:
  choose_values    choose the @cluster values and bind dims and tile values (user errors for bad
                   values);
  find_loop        find the cluster loop, if any, and check it has one of the two combinable forms
                   (combine.py): a linear accumulator (accumulate.py) or an online softmax (softmax.py);
  plan_accesses    classify every tensor axis as split by a grid axis, cut in chunks, or whole
                   (access.py) and reject what a leaf could not compute with the same meaning;
  check_multiples  super-tiles whole multiples of leaf tiles; cut each split dimension into
                   super-tiles, the last one smaller where the dimension is not a multiple (tiling.py);
  make_leaves      make the leaves as IR from the kernel's IR and check them (leaves.py), bind each
                   at its dims for its CTA grid
                   and flops, with a variant bound to the smaller extents for launches on the last
                   super-tiles;
  build_units      enumerate the units of work, one per output super-tile, with their regions
                   (units.py), split each one's cluster loop over shares merged by a tree when asked
                   (reductions.py), and write each unit's super-tile origin into the leaves that read
                   `ctx.origin` (origins.py).

find_loop, plan_accesses and the leaf kernels need no dimension: `analyze_cluster` runs them, and
`check` runs them through `check_cluster` for every @cluster kernel.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from common.errors import UserError
from compiler import builtins, pipeline
from compiler.cluster import units as unit_builder
from compiler.cluster.access import AccessPlan, AxisRole, ClusterLevel, check_value_uses, plan_accesses
from compiler.cluster.accumulate import find_cluster_loop
from compiler.cluster.flops import leaf_flops
from compiler.cluster.leaves import checked_leaf, laid_out, leaf_source, main_leaf
from compiler.cluster.origins import place_origins
from compiler.cluster.text import describe_stage
from compiler.cluster.tiling import DimCut, LeafVariants, cut_dimension
from compiler.cluster.tree import SplitRequest
from compiler.frontend import ir, walk
from compiler.frontend.affine import affine_of
from compiler.frontend.binding import bind, kernel_dims
from compiler.frontend.diagnostics import CompileError
from schemas.program import ClusterProgram, Leaf, TensorInfo

if TYPE_CHECKING:  # a kernel with a cluster loop imports them where they run: a plain one never does
    from compiler.cluster.combine import Combine


def cluster_space(kernel: ir.Kernel, pinned: dict[str, int] | None = None) -> list[dict[str, int]]:
    """Every combination of @cluster values, first values first (for the tuner); a `pinned` name
    takes only its pinned value, which may lie outside its search space."""
    cluster = _require_cluster(kernel)
    names = [d.name for d in cluster.dims]
    pinned = dict(pinned or {})
    for name in pinned:
        if name not in names:
            raise UserError(f"--cluster {name}: kernel {kernel.name} has no @cluster name {name} "
                            f"(it has: {', '.join(names)})")
    choices = [(pinned[d.name],) if d.name in pinned else d.values for d in cluster.dims]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]


def _require_cluster(kernel: ir.Kernel) -> ir.Cluster:
    if kernel.cluster is None:
        raise CompileError(
            kernel.span,
            f"kernel '{kernel.name}' has no @cluster attribute, so it has no "
            "cluster program; run it as an ordinary kernel",
        )
    return kernel.cluster


def _choose_cluster_values(kernel: ir.Kernel, given: dict[str, int] | None) -> dict[str, int]:
    """Each @cluster name's given value, else its first; a value outside the search space is
    accepted (see `values_outside_space` for the warning the programs print)."""
    space = {d.name: d.values for d in _require_cluster(kernel).dims}
    given = dict(given or {})
    for name, value in given.items():
        if name not in space:
            raise UserError(f"kernel {kernel.name} has no @cluster name {name} (it has: {', '.join(space)})")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"@cluster {name} = {value!r} must be a positive integer")
    return {name: given.get(name, values[0]) for name, values in space.items()}


def values_outside_space(kernel: ir.Kernel, given: dict[str, int] | None) -> list[str]:
    """One warning line per pinned @cluster value that is outside its search space."""
    space = {d.name: d.values for d in kernel.cluster.dims} if kernel.cluster else {}
    return [
        f"warning: @cluster {name} = {value} is outside its search space "
        f"({', '.join(str(v) for v in space[name])}); using it as given"
        for name, value in (given or {}).items()
        if name in space and value not in space[name]
    ]


def _check_attribute(kernel: ir.Kernel, level: ClusterLevel) -> None:
    dims = set(kernel_dims(kernel))
    sized = set(level.grid_tiles.values()) | ({level.loop_tile} if level.loop_tile else set())
    for d in kernel.cluster.dims:
        if d.name in dims:
            raise CompileError(
                d.span,
                f"@cluster '{d.name}' is a tensor dimension, not a search dimension: "
                "@cluster sizes super-tiles through @autotune tile names",
            )
        if d.name not in sized:
            raise CompileError(
                d.span,
                f"@cluster '{d.name}' sizes no super-tile: it is neither the tile of a "
                f"grid axis (`ctx.block.x * {d.name} :+ {d.name}`) nor the step of a loop",
            )


def _check_leaf_loops(kernel: ir.Kernel) -> None:
    for stmt in walk.iter_stmts(kernel.body):
        if not isinstance(stmt, ir.For):
            continue
        if not (
            isinstance(stmt.start, ir.Const)
            and stmt.start.value == 0
            and not isinstance(stmt.start.value, bool)
            and not stmt.start.origin
        ):
            raise CompileError(
                stmt.start.span,
                "a loop inside a leaf must start at 0: the leaf sees only its "
                "super-tile, whose positions count from 0",
            )
        if not (_is_dim(stmt.stop) or _is_min_with_dim(stmt.stop)):
            raise CompileError(
                stmt.stop.span,
                "a loop inside a leaf must run to a tensor dimension (such as "
                "`range(0, N, T)`), so that in the leaf it runs over the super-tile's share of it, "
                "or to `min(<absolute position>, N)` with N a dimension every unit reads whole",
            )


def _is_dim(e: ir.Expr) -> bool:
    return isinstance(e, ir.Name) and e.kind == "dim"


def _is_min_with_dim(e: ir.Expr) -> bool:
    """`min(x, N)`: causal attention's bound. The value checks reject x if it is not the same
    number in a leaf as in the plain kernel, and N if it is split."""
    return builtins.pairwise(e) == "min" and any(map(_is_dim, e.args))


def _dim_roles(
    kernel: ir.Kernel, plan: AccessPlan, loop: ir.For | None, level: ClusterLevel
) -> dict[str, AxisRole]:
    roles = {d: plan.dims.get(d, AxisRole("whole")) for d in kernel_dims(kernel)}
    if loop is not None:
        k = loop.stop.name
        chunk = AxisRole("chunk", "", level.loop_tile)
        if roles[k] != chunk and k in plan.dims:
            raise CompileError(
                loop.stop.span,
                f"the cluster loop cuts '{k}' into chunks, but '{k}' is "
                f"{roles[k].describe()} elsewhere; each step leaf sees only its chunk of '{k}'",
            )
        roles[k] = chunk
    return roles


def _check_tile_multiples(kernel: ir.Kernel, cv: dict[str, int], tv: dict[str, int]) -> None:
    entries = {d.name: d for d in kernel.cluster.dims}
    for s, value in cv.items():
        if value % tv[s]:
            raise CompileError(
                entries[s].span,
                f"super-tile {s} = {value} is not a whole multiple of the leaf's "
                f"tile {s} = {tv[s]} (@autotune)",
            )


def _tensor_roles(kernel: ir.Kernel, plan: AccessPlan, acc: Combine | None) -> dict[str, str]:
    out: dict[str, str] = {}
    grid = {(g.axis, g.dim, g.tile) for g in kernel.grid}
    for t in kernel.tensors:
        access = plan.tensors.get(t.name)
        if acc is not None and t.name == acc.store.tensor:
            out[t.name] = "inout" if acc.beta is not None else "output"
        elif access is None or not access.writes:
            out[t.name] = "input"
        elif access.reads or not _stores_cover(kernel, t, grid):
            out[t.name] = "inout"
        else:
            out[t.name] = "output"
    return out


def _stores_cover(kernel: ir.Kernel, tensor: ir.TensorParam, grid: set) -> bool:
    """Whether every store of `tensor` writes every element of its region (so the region's old
    contents need not be loaded): each axis `:` or `ctx.block.a * T :+ T` along a grid axis of
    that dimension and tile."""
    for stmt, env in walk.iter_stmts_with_env(kernel.body):
        if isinstance(stmt, ir.Store) and stmt.tensor == tensor.name:
            for item, dim in zip(stmt.index, tensor.dims, strict=True):
                if isinstance(item, ir.SliceAll):
                    continue
                tiled = _block_tiled(item, env)
                if tiled is None or (tiled[0], dim, tiled[1]) not in grid:
                    return False
    return True


def _block_tiled(item: ir.SliceItem, env) -> tuple[str, str] | None:
    """(axis, T) when `item` is exactly `ctx.block.axis * T :+ T` for a tile or @cluster name T."""
    if not isinstance(item, ir.SliceRange):
        return None
    start, ext = affine_of(item.start, env), affine_of(item.extent, env)
    if start is None or ext is None or not ext.is_constant or len(start.terms) != 1 or start.const.terms:
        return None
    key, coeff = start.terms[0]
    if (
        not key.startswith("block.")
        or coeff != ext.const
        or len(coeff.symbols) != 1
        or coeff.terms[0][1] != 1
    ):
        return None
    return key.removeprefix("block."), next(iter(coeff.symbols))


def _init_tiling(kernel: ir.Kernel, acc: Combine) -> tuple[tuple[str, str] | None, ...]:
    env = {s.name: s.value for s in kernel.body if isinstance(s, ir.Let)}
    grid = {g.axis for g in kernel.grid}
    out = []
    for item in acc.store.index:
        tiled = _block_tiled(item, env)
        out.append(tiled if tiled is not None and tiled[0] in grid else None)
    return tuple(out)


def _make_leaf(base: str, name: str, kernel: ir.Kernel, leaf_dims: dict[str, int],
               tv: dict[str, int]) -> Leaf:
    dims = {d: leaf_dims[d] for d in kernel_dims(kernel)}
    tuned = {d.name for d in kernel.autotune.dims} if kernel.autotune else set()
    tiles = {n: v for n, v in tv.items() if n in tuned}
    try:
        binding = bind(kernel, dims, tile_values=tiles)
    except UserError as err:
        raise RuntimeError(f"cluster compiler bug: leaf {name} does not bind: {err}") from err
    ctas = 1
    for g in binding.grid:
        ctas *= g
    return Leaf(
        name=name,
        kernel=kernel.name,
        source=leaf_source(kernel),
        dims=tuple(dims.items()),
        tile_values=tuple(tiles.items()),
        grid=binding.grid or (1,),
        threads=kernel.threads,
        tensors=tuple(t.name for t in kernel.tensors),
        scalars=tuple(s.name for s in kernel.scalars),
        flops=leaf_flops(kernel, binding.env, ctas),
    )


@dataclass(frozen=True)
class ClusterShape:
    """What the cluster compiler reads from an @cluster kernel before any dimension is known:
    the cluster loop and accumulator (if any), the cluster level, how every tensor is accessed,
    each dimension's role, and the leaves' checked kernels by base name."""

    loop: ir.For | None
    acc: Combine | None
    level: ClusterLevel
    plan: AccessPlan
    roles: dict[str, AxisRole]
    leaf_kernels: dict[str, ir.Kernel]


@dataclass(frozen=True)
class ClusterState:
    """What the cluster stages (compiler/pipeline.py CLUSTER_STAGES) know so far: the input, then
    what each stage adds. A stage returns a new state; `describe(stage)` is its dump."""

    kernel: ir.Kernel
    dims: dict[str, int] = field(default_factory=dict)
    given_cluster: dict[str, int] | None = None
    given_tiles: dict[str, int] | None = None
    split: SplitRequest | None = None  # cut each unit's cluster loop into shares (reductions.py)
    cluster_values: dict[str, int] | None = None  # choose_values: @cluster values, all dims, tiles
    full: dict[str, int] | None = None
    tile_values: dict[str, int] | None = None
    loop: ir.For | None = None  # find_loop: the cluster loop, its accumulator, the cluster level
    acc: Combine | None = None
    level: ClusterLevel | None = None
    plan: AccessPlan | None = None  # plan_accesses: every tensor's access, every dimension's role
    roles: dict[str, AxisRole] | None = None
    cuts: dict[str, DimCut] | None = None  # check_multiples: split dimensions cut in super-tiles
    leaf_dims: dict[str, int] | None = None
    leaf_kernels: dict[str, ir.Kernel] | None = None  # make_leaves: checked leaf IR, leaves by base and edge
    variants: LeafVariants | None = None
    program: ClusterProgram | None = None  # build_units

    def describe(self, stage: str) -> str:
        return describe_stage(self, stage)


@pipeline.cluster_stage("choose_values")
def choose_values(state: ClusterState) -> ClusterState:
    """The @cluster values (given, else each one's first) and the kernel bound at the dims."""
    cv = _choose_cluster_values(state.kernel, state.given_cluster)
    binding = pipeline.bind_stage(state.kernel, state.dims, tile_values=state.given_tiles, dump=False)
    return replace(state, cluster_values=cv, full=dict(binding.dims), tile_values=dict(binding.tile_values))


@pipeline.cluster_stage("find_loop")
def find_loop(state: ClusterState) -> ClusterState:
    """The cluster loop, if any, in one of the two combinable forms (combine.py); the @cluster
    attribute and the leaf's own loops checked against it."""
    kernel = state.kernel
    names = {d.name for d in _require_cluster(kernel).dims}
    loop = find_cluster_loop(kernel, names)
    acc = None
    if loop is not None:  # the combine forms (and the online softmax's) only for such a kernel
        from compiler.cluster.combine import check_cluster_loop

        acc = check_cluster_loop(kernel, loop)
    level = ClusterLevel(
        grid_tiles={g.axis: g.tile for g in kernel.grid if g.tile in names},
        loop_var=loop.var if loop else None,
        loop_tile=loop.step.name if loop else None,
    )
    _check_attribute(kernel, level)
    _check_leaf_loops(kernel)
    return replace(state, loop=loop, acc=acc, level=level)


@pipeline.cluster_stage("plan_accesses")
def plan_tensor_accesses(state: ClusterState) -> ClusterState:
    """Every tensor axis split by a grid axis, cut in chunks, or whole; what a leaf could not
    compute with the same meaning rejected."""
    plan = plan_accesses(state.kernel, state.level)
    check_value_uses(state.kernel, state.level, plan)
    return replace(state, plan=plan, roles=_dim_roles(state.kernel, plan, state.loop, state.level))


@pipeline.cluster_stage("check_multiples")
def check_multiples(state: ClusterState) -> ClusterState:
    """Super-tiles whole multiples of leaf tiles; each split dimension cut into super-tiles."""
    cv, full = state.cluster_values, state.full
    _check_tile_multiples(state.kernel, cv, state.tile_values)
    cuts = {d: cut_dimension(full[d], cv[r.tile]) for d, r in state.roles.items() if r.kind != "whole"}
    leaf_dims = {d: (cuts[d].extent if d in cuts else full[d]) for d in state.roles}
    return replace(state, cuts=cuts, leaf_dims=leaf_dims)


@pipeline.cluster_stage("make_leaves")
def make_leaves(state: ClusterState) -> ClusterState:
    """The leaf kernels, made from the kernel's IR and checked once, bound at the leaf dims (edge
    variants are made as build_units finds launches on smaller last super-tiles)."""
    kernels = _leaf_kernels(state.kernel, state.acc, state.split)  # only the leaves this program uses
    tv = state.tile_values
    variants = LeafVariants(
        lambda base, name, at: _make_leaf(base, name, kernels[base], at, tv),
        kernels, state.leaf_dims,
    )
    return replace(state, leaf_kernels=kernels, variants=variants)


@pipeline.cluster_stage("build_units")
def build_units(state: ClusterState) -> ClusterState:
    """The units of work, one per output super-tile with its launches' regions, and the program."""
    kernel, full, cuts = state.kernel, state.full, state.cuts
    tensor_roles = _tensor_roles(kernel, state.plan, state.acc)
    infos = tuple(
        TensorInfo(
            t.name, t.dtype, tuple(d if isinstance(d, int) else full[d] for d in t.dims), tensor_roles[t.name]
        )
        for t in kernel.tensors
    )
    # Indexed by grid axis (x, y, z) up to the last cluster axis; an axis the cluster does not
    # split counts one super-tile (the leaf's CTAs cover it whole).
    counts = {g.axis: cuts[g.dim].count for g in kernel.grid if g.axis in state.level.grid_tiles}
    last = max(("xyz".index(a) for a in counts), default=0)
    super_axes = [(a, counts.get(a, 1)) for a in "xyz"[: last + 1]]
    units = unit_builder.build_units(
        kernel, state.plan, state.acc, super_axes, (full, state.roles, cuts), state.variants
    )
    reduction = None
    if state.acc is not None:
        out = next(t for t in kernel.tensors if t.name == state.acc.store.tensor)

        def variant(base: str, region) -> str:  # a generated leaf at a ragged output super-tile
            edges = tuple((d, n) for d, n in zip(out.dims, region.shape, strict=True)
                          if isinstance(d, str) and n != state.leaf_dims.get(d, n))
            return state.variants.name(base, edges)

        from compiler.cluster.reductions import split_units

        units, partials, reduction = split_units(units, infos, kernel, state.acc, state.split, variant)
        infos += partials
    program = ClusterProgram(
        kernel=kernel.name,
        source=laid_out(kernel),
        dims=tuple(full.items()),
        cluster_values=tuple(state.cluster_values.items()),
        tile_values=tuple(state.tile_values.items()),
        super_grid=tuple(n for _, n in super_axes),
        tensors=infos,
        scalars=tuple(s.name for s in kernel.scalars),
        leaves=state.variants.leaves(),
        units=units,
        reduction=reduction,
    )
    return replace(state, program=place_origins(program, kernel, state.level.grid_tiles))


def _leaf_kernels(kernel: ir.Kernel, acc: Combine | None, split: SplitRequest | None) -> dict[str, ir.Kernel]:
    """Each leaf by base name, made from the kernel's IR and checked (no text, no parse)."""
    if acc is None:
        made = {"main": main_leaf(kernel)}
    else:
        from compiler.cluster.reductions import combine_leaves

        made = combine_leaves(kernel, acc, _init_tiling(kernel, acc), split)
    return {base: checked_leaf(leaf, kernel) for base, leaf in made.items()}


def analyze_cluster(kernel: ir.Kernel) -> ClusterShape:
    """Every cluster rejection that does not depend on the dimensions (run by `check` too): the
    stages find_loop and plan_accesses, and the leaves, checked."""
    state = plan_tensor_accesses(find_loop(ClusterState(kernel)))
    # every leaf the loop may need, those of a split included (for `check`)
    return ClusterShape(state.loop, state.acc, state.level, state.plan, state.roles,
                        _leaf_kernels(kernel, state.acc, SplitRequest(2)))


def check_cluster(kernel: ir.Kernel) -> ClusterShape:
    """`analyze_cluster` (the leaves checked) and each @cluster name's first value a whole
    multiple of its first @autotune value: what `check` reports for an @cluster kernel."""
    shape = analyze_cluster(kernel)
    first = {d.name: d.values[0] for d in kernel.autotune.dims} if kernel.autotune else {}
    _check_tile_multiples(kernel, {d.name: d.values[0] for d in kernel.cluster.dims}, first)
    return shape


def compile_cluster(
    kernel: ir.Kernel,
    dims: dict[str, int],
    *,
    cluster_values: dict[str, int] | None = None,
    tile_values: dict[str, int] | None = None,
    split: SplitRequest | None = None,
    dump: bool | str | None = None,
) -> ClusterProgram:
    """The cluster program of a checked @cluster kernel at concrete dims: the cluster stages of
    compiler/pipeline.py, in order (`dump` or PHOBOS_DUMP_STAGES prints them); `split` cuts each
    unit's cluster loop into shares merged by a tree (reductions.py)."""
    start = ClusterState(kernel, dict(dims), cluster_values, tile_values, split)
    return pipeline.run_cluster(start, dump=dump).program
