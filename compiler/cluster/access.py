"""How a unit of work touches each tensor: every tensor axis is split by a grid axis, cut into
chunks by the cluster loop, or taken whole.

The cluster compiler reads the kernel at the cluster level: a block index of a cluster grid axis
counts super-tiles, the cluster loop's variable counts chunks. A slice along an axis is therefore
one of

    ctx.block.a * S :+ S      (S the @cluster tile of grid axis a)  -> "grid": the unit's super-tile
    kt :+ S                   (kt the cluster loop's variable)       -> "chunk": one chunk per step
    anything else             (`:`, a leaf loop, a constant)        -> "whole": the axis is not split

and every axis of one dimension must be cut the same way in every access, because the leaf sees
one value per dimension. Positions at the cluster level (those block indices, the cluster loop
variable) may only start slices: inside a leaf they count CTAs or chunk elements, so any other use
would silently change meaning. The one exception is an absolute position, the sum
`ctx.origin.a + ctx.block.a * S` (through lets, other summands allowed): in a leaf the origin is
its super-tile's start, in the plain kernel 0, so the sum is the same number at both levels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from compiler import builtins
from compiler.frontend import ir, walk
from compiler.frontend.affine import Affine, affine_of
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import Size


@dataclass(frozen=True)
class AxisRole:
    """How one tensor axis (or one dimension) is cut: `axis` is the grid axis of a "grid" role,
    `tile` the @cluster name of a "grid" or "chunk" role."""

    kind: Literal["whole", "grid", "chunk"]
    axis: str = ""
    tile: str = ""

    def describe(self) -> str:
        if self.kind == "grid":
            return f"split into super-tiles by ctx.block.{self.axis} * {self.tile}"
        if self.kind == "chunk":
            return f"cut into chunks of {self.tile} by the cluster loop"
        return "taken whole"


WHOLE = AxisRole("whole")


@dataclass(frozen=True)
class ClusterLevel:
    """What counts as a position at the cluster level: the grid axes whose tile is an @cluster
    name (axis -> that name) and the cluster loop (its variable and step), if any."""

    grid_tiles: dict[str, str]
    loop_var: str | None = None
    loop_tile: str | None = None

    def position_keys(self) -> set[str]:
        keys = {"block." + a for a in self.grid_tiles}
        if self.loop_var:
            keys.add(self.loop_var)
        return keys


@dataclass(frozen=True)
class TensorAccess:
    """All accesses of one tensor agree on `roles` (one per axis); `reads`/`writes` say whether
    the kernel loads it (or compound-stores it) and stores it."""

    name: str
    roles: tuple[AxisRole, ...]
    reads: bool
    writes: bool


@dataclass(frozen=True)
class AccessPlan:
    tensors: dict[str, TensorAccess]  # every tensor the kernel touches
    dims: dict[str, AxisRole]  # every symbolic dimension of a touched tensor axis


def _line(span) -> str:
    return f"line {span.line}"


def _slice_parts(item: ir.SliceItem) -> tuple[ir.Expr | None, ir.Expr | None]:
    if isinstance(item, ir.SliceRange):
        return item.start, item.extent
    if isinstance(item, ir.SliceIndex):
        return item.index, None
    return None, None


def classify_slice(
    tensor: str, item: ir.SliceItem, env: dict[str, ir.Expr], level: ClusterLevel, verb: str
) -> AxisRole:
    start, extent = _slice_parts(item)
    if start is None:
        return WHOLE
    if origin_axes(start, env):
        if absolute_parts(start, env, level) is None:
            raise CompileError(item.span, lone_origin_message(start, env))
        # An absolute position (`ctx.origin.x + row`) is the same number in a leaf and in the
        # plain kernel: it may index an axis that every unit reads whole, never a split one.
        return WHOLE
    keys = level.position_keys()
    aff = affine_of(start, env)
    if aff is None:
        if mentions_position(start, env, level):
            raise CompileError(
                item.span,
                f"'{tensor}' is {verb} at a position the cluster compiler cannot "
                "place: a super-tile's slice must start at `ctx.block.<axis> * S` (or at the "
                "cluster loop's variable)",
            )
        return WHOLE
    hits = [k for k, _ in aff.terms if k in keys]
    if not hits:
        return WHOLE
    ext = affine_of(extent, env) if extent is not None else None
    ext_size = ext.const if ext is not None and ext.is_constant else None
    key = hits[0]
    if key.startswith("block."):
        axis = key.removeprefix("block.")
        tile = level.grid_tiles[axis]
        role = AxisRole("grid", axis, tile)
        expected = f"ctx.block.{axis} * {tile} :+ {tile}"
    else:
        tile = level.loop_tile or ""
        role = AxisRole("chunk", "", tile)
        expected = f"{level.loop_var} :+ {tile}"
    exact = Affine(((key, Size.sym(tile) if role.kind == "grid" else Size.const(1)),), Size())
    if aff != exact or ext_size != Size.sym(tile):
        raise CompileError(
            item.span,
            f"'{tensor}' is {verb} outside its own super-tile: along a split axis a "
            f"unit of work touches only `{expected}`; reaching into a neighbour's super-tile "
            "would need an exchange of halos between nodes",
        )
    return role


def mentions_position(expr: ir.Expr, env: dict[str, ir.Expr], level: ClusterLevel,
                      chunk_dim: str | None = None) -> bool:
    return first_position_use(expr, env, level, chunk_dim=chunk_dim) is not None


def origin_axes(expr: ir.Expr, env: dict[str, ir.Expr], _seen: frozenset[str] = frozenset()) -> set[str]:
    """The axes of every `ctx.origin.<axis>` in `expr`, through lets."""
    found: set[str] = set()
    for e in walk.iter_exprs(expr):
        if isinstance(e, ir.Const) and e.origin:
            found.add(e.origin)
        elif isinstance(e, ir.Name) and e.kind == "let" and e.name in env and e.name not in _seen:
            found |= origin_axes(env[e.name], env, _seen | {e.name})
    return found


def _summands(expr: ir.Expr) -> list[ir.Expr]:
    if isinstance(expr, ir.BinOp) and expr.op == "+":
        return _summands(expr.lhs) + _summands(expr.rhs)
    return [expr]


def absolute_parts(expr: ir.Expr, env: dict[str, ir.Expr], level: ClusterLevel) -> list[ir.Expr] | None:
    """The summands of `expr` other than its absolute position, if `expr` is one: a sum holding
    `ctx.origin.a` and exactly `ctx.block.a * S` (S the @cluster tile of grid axis a) for every
    cluster grid axis a it names, through lets. None when it is not such a sum."""
    value = expr
    while isinstance(value, ir.Name) and value.kind == "let" and value.name in env:
        value = env[value.name]
    terms = _summands(value)
    origins = {t.origin for t in terms if isinstance(t, ir.Const) and t.origin}
    split = origins & set(level.grid_tiles)
    if not split or len(origins) != sum(1 for t in terms if isinstance(t, ir.Const) and t.origin):
        return None
    rest = [t for t in terms if not (isinstance(t, ir.Const) and t.origin)]
    for axis in split:
        exact = Affine((("block." + axis, Size.sym(level.grid_tiles[axis])),), Size())
        hit = [t for t in rest if affine_of(t, env) == exact]
        if len(hit) != 1:
            return None
        rest.remove(hit[0])
    return rest


def lone_origin_message(expr: ir.Expr, env: dict[str, ir.Expr]) -> str:
    axis = sorted(origin_axes(expr, env))[0]
    return (
        f"ctx.origin.{axis} is the start of the super-tile, 0 when the kernel runs on its own: use it "
        f"only in an absolute position, added to the CTA's start (`ctx.origin.{axis} + "
        f"ctx.block.{axis} * S`, S the @cluster tile of axis {axis}), and never to start a slice of "
        "a tensor split along that axis"
    )


def first_position_use(
    expr: ir.Expr, env: dict[str, ir.Expr], level: ClusterLevel, _seen: frozenset[str] = frozenset(),
    chunk_dim: str | None = None,
) -> ir.Expr | None:
    """The first node of `expr` that stands for a cluster-level position (a cluster grid axis's
    block index, the cluster loop's variable, or a let defined from one of them), outside the
    absolute positions (`ctx.origin.x + row`) and, given `chunk_dim`, the chunk edge masks
    (`j + arange(BS) < S`), which mean the same at both levels."""
    for e in _value_nodes(expr, env, level, chunk_dim):
        if isinstance(e, ir.BlockIndex | ir.Const) and _names_split_axis(e, level):
            return e
        if isinstance(e, ir.Name):
            if e.kind == "loop" and e.name == level.loop_var:
                return e
            if e.kind == "let" and e.name in env and e.name not in _seen:
                if first_position_use(env[e.name], env, level, _seen | {e.name}, chunk_dim) is not None:
                    return e
    return None


def _accesses(body: tuple[ir.Stmt, ...]):
    """(tensor, index, env, is_store, is_compound, store op or "") for every load and store, in
    source order."""
    for stmt, env in walk.iter_stmts_with_env(body):
        if isinstance(stmt, ir.For):
            exprs = (stmt.start, stmt.stop, stmt.step)
        elif isinstance(stmt, ir.Store):
            exprs = (*walk.slice_exprs(stmt.index), stmt.value)
        else:
            exprs = walk.child_exprs(stmt)
        for top in exprs:
            for e in walk.iter_exprs(top):
                if isinstance(e, ir.Load):
                    yield e.tensor, e.index, env, False, False, ""
        if isinstance(stmt, ir.Store):
            yield stmt.tensor, stmt.index, env, True, stmt.op != "=", stmt.op


def _check_store_is_owned(tensor: str, index, roles: tuple[AxisRole, ...], level: ClusterLevel,
                          op: str = "=") -> None:
    """Units run on different nodes at once, so each must write only its own super-tile: a store
    not split along some cluster grid axis would be written by every unit along that axis. An
    atomic is no exception: each node would combine its units' contributions into its own copy
    of the region, and nothing adds the copies up; an atomic output is reduced on the node that
    owns its super-tile (by the CTAs of that unit's leaf), never across nodes."""
    split = {r.axis for r in roles if r.kind == "grid"}
    for axis, tile in level.grid_tiles.items():
        if axis not in split:
            span = index[0].span.to(index[-1].span)
            if op in ir.ATOMIC_OPS:
                raise CompileError(
                    span,
                    f"{op} into '{tensor}' is not split along ctx.block.{axis}: the units of work along "
                    "that axis run on different nodes, each would combine into its own copy of this "
                    "region, and the cluster layer does not reduce atomic outputs across nodes; split "
                    f"'{tensor}' along ctx.block.{axis} (`ctx.block.{axis} * {tile} :+ {tile}`) so that "
                    "each unit reduces its own region, or run the kernel without @cluster",
                )
            raise CompileError(
                span,
                f"'{tensor}' is not split along ctx.block.{axis} here, so every unit of "
                f"work along that axis would write this same region; an output must be "
                f"split along every cluster grid axis (`ctx.block.{axis} * {tile} :+ {tile}`)",
            )


def plan_accesses(kernel: ir.Kernel, level: ClusterLevel) -> AccessPlan:
    params = {t.name: t for t in kernel.tensors}
    seen: dict[str, tuple[tuple[AxisRole, ...], ir.Span]] = {}  # first cut of each tensor, and where
    reads: set[str] = set()
    writes: set[str] = set()
    dims: dict[str, tuple[AxisRole, ir.Span]] = {}
    absolute_slices: set[ir.Span] = set()  # slices started at an absolute position
    for tensor, index, env, is_store, compound, op in _accesses(kernel.body):
        verb = "written" if is_store else "read"
        roles = tuple(classify_slice(tensor, item, env, level, verb) for item in index)
        starts = [(item, _slice_parts(item)[0]) for item in index]
        absolute_slices.update(item.span for item, start in starts if start and origin_axes(start, env))
        if is_store:
            writes.add(tensor)
            _check_store_is_owned(tensor, index, roles, level, op)
        if not is_store or compound:
            reads.add(tensor)
        _check_same_cut(tensor, index, roles, seen.get(tensor), verb)
        seen.setdefault(tensor, (roles, index[0].span))
        _cut_dims(tensor, index, params[tensor], roles, dims, absolute_slices)
    tensors = {
        name: TensorAccess(name, seen[name][0], name in reads, name in writes)
        for name in params
        if name in seen
    }
    return AccessPlan(tensors=tensors, dims={d: r for d, (r, _) in dims.items()})


def _check_same_cut(tensor: str, index, roles: tuple[AxisRole, ...], first, verb: str) -> None:
    """Every access of a tensor in one unit of work takes the same super-tile coordinates as its
    first (`first`: its roles and where, None for the first access itself)."""
    if first is None or first[0] == roles:
        return
    before, before_span = first
    axis = next(i for i, (a, b) in enumerate(zip(before, roles, strict=True)) if a != b)
    raise CompileError(
        index[axis].span,
        f"'{tensor}' is {verb} at two different super-tile coordinates "
        f"in one unit of work: its axis {axis} is {roles[axis].describe()} here but "
        f"{before[axis].describe()} at {_line(before_span)}; that would need an "
        "exchange of halos between nodes",
    )


def _cut_dims(tensor: str, index, param: ir.TensorParam, roles: tuple[AxisRole, ...],
              dims: dict[str, tuple[AxisRole, ir.Span]], absolute_slices: set[ir.Span]) -> None:
    """Record how this access cuts each dimension of the tensor (`dims`: the first cut of each
    and where), refusing a fixed-size axis split into super-tiles and a dimension cut two ways."""
    for item, dim, role in zip(index, param.dims, roles, strict=True):
        if isinstance(dim, int):
            if role.kind != "whole":
                raise CompileError(
                    item.span,
                    f"axis of '{tensor}' has the fixed size {dim}; it cannot be split into super-tiles",
                )
            continue
        # The leaf sees one extent per dimension: the same tile along two grid axes is fine.
        if dim in dims and (dims[dim][0].kind, dims[dim][0].tile) != (role.kind, role.tile):
            other, other_span = dims[dim]
            absolute = next((sp for sp in (item.span, other_span) if sp in absolute_slices), None)
            if absolute is not None:
                raise CompileError(
                    absolute,
                    f"an absolute position (`ctx.origin...`) starts a slice of dimension '{dim}', "
                    f"which is split into super-tiles elsewhere: a leaf's slices of a split "
                    "dimension count from its super-tile's start, so start it at `ctx.block.<axis> * S`",
                )
            raise CompileError(
                item.span,
                f"dimension '{dim}' is {role.describe()} here but "
                f"{other.describe()} at {_line(other_span)}; the leaf sees one value per "
                "dimension, so every axis of one dimension must be cut the same way",
            )
        dims.setdefault(dim, (role, item.span))


# ---- uses of positions and split dimensions outside slices -----------------------------------


def _value_exprs(stmt: ir.Stmt) -> tuple[tuple[ir.Expr, bool], ...]:
    """The expressions of a statement evaluated as values, each with whether it is a loop stop
    (where a split dimension is allowed: the leaf's loop then runs over its share)."""
    if isinstance(stmt, ir.For):
        return ((stmt.start, False), (stmt.stop, True))
    if isinstance(stmt, ir.Store):
        return ((stmt.value, False),)
    return tuple((e, False) for e in walk.child_exprs(stmt))


def _value_nodes(expr: ir.Expr, env: dict[str, ir.Expr] | None = None, level: ClusterLevel | None = None,
                 chunk_dim: str | None = None):
    """Pre-order over the nodes of `expr` evaluated as values: slice starts and extents, sizes
    (arange's argument, full's shape) are skipped, but a load's fill and index-free parts are kept.
    Given `env` and `level`, an absolute position (`ctx.origin.x + row + ..`) yields only its
    other summands: the origin and the CTA's start it pairs are the same at both levels; given
    `chunk_dim`, so does a chunk's edge mask (`_chunk_mask_parts`)."""
    if level is not None and (origin_axes(expr, env) if isinstance(expr, ir.BinOp) else False):
        rest = absolute_parts(expr, env, level)
        if rest is not None:
            for part in rest:
                yield from _value_nodes(part, env, level, chunk_dim)
            return
    mask = _chunk_mask_parts(expr, level, chunk_dim)
    if mask is not None:
        for part in mask:
            yield from _value_nodes(part, env, level, chunk_dim)
        return
    yield expr
    if isinstance(expr, ir.Load):
        if expr.fill is not None:
            yield from _value_nodes(expr.fill, env, level, chunk_dim)
        return
    if isinstance(expr, ir.Call):
        if builtins.is_positions(expr):
            return
        args = expr.args[1:] if builtins.takes_shape(expr) else expr.args
        for a in args:
            yield from _value_nodes(a, env, level, chunk_dim)
        for _, v in expr.kwargs:
            yield from _value_nodes(v, env, level, chunk_dim)
        return
    if isinstance(expr, ir.ShapeList):
        return
    for child in walk.child_exprs(expr):
        yield from _value_nodes(child, env, level, chunk_dim)


def _chunk_mask_parts(expr: ir.Expr, level: ClusterLevel | None, chunk_dim: str | None):
    """The other summands of a chunk's edge mask `j + x < N`, j the cluster loop's variable and N
    the dimension it runs to; None for anything else. In a step leaf j counts from the chunk's start
    and N is the chunk's extent (the last chunk's smaller one), so the comparison is the plain
    kernel's `j + x < N` element for element: true inside the dimension, false past its end."""
    if chunk_dim is None or level is None or not level.loop_var:
        return None
    if not (isinstance(expr, ir.BinOp) and expr.op == "<"):
        return None
    if not (isinstance(expr.rhs, ir.Name) and expr.rhs.kind == "dim" and expr.rhs.name == chunk_dim):
        return None
    terms = _summands(expr.lhs)
    loop = [t for t in terms if isinstance(t, ir.Name) and t.kind == "loop" and t.name == level.loop_var]
    if len(loop) != 1:
        return None
    return [t for t in terms if t is not loop[0]]


def check_value_uses(kernel: ir.Kernel, level: ClusterLevel, plan: AccessPlan) -> None:
    """Reject positions and split dimensions used as values, where a leaf would see other numbers
    than the plain kernel: a leaf does not know where its super-tile lies."""
    split_dims = {d: r for d, r in plan.dims.items() if r.kind != "whole"}
    loop = next((s for s in kernel.body if isinstance(s, ir.For) and s.var == level.loop_var), None)
    chunk_dim = loop.stop.name if loop is not None and isinstance(loop.stop, ir.Name) else None
    for stmt, env in walk.iter_stmts_with_env(kernel.body):
        if isinstance(stmt, ir.Let) and affine_of(stmt.value, env) is not None:
            continue  # an index let (`let row = ctx.block.x * BR`): checked where it is used
        for top, is_stop in _value_exprs(stmt):
            for e in _value_nodes(top, env, level, chunk_dim):
                hit = _position_node(e, env, level, chunk_dim)
                if hit is not None:
                    raise CompileError(hit.span, _position_message(hit, level))
                if (
                    isinstance(e, ir.Name)
                    and e.kind == "dim"
                    and e.name in split_dims
                    and not (is_stop and e is top)
                ):
                    raise CompileError(
                        e.span,
                        f"dimension '{e.name}' is {split_dims[e.name].describe()}, so "
                        f"inside a leaf it holds the super-tile's extent, not the whole "
                        f"{e.name}; it may be used only as a loop bound or a slice extent",
                    )
                dim = _split_dim_behind_let(e, env, split_dims)
                if dim is not None:
                    raise CompileError(
                        e.span,
                        f"'{e.name}' is computed from dimension '{dim}', which is "
                        f"{split_dims[dim].describe()}; inside a leaf '{dim}' holds the super-tile's "
                        "extent, so it may be used only as a loop bound or a slice extent",
                    )


def _split_dim_behind_let(e: ir.Expr, env: dict[str, ir.Expr], split_dims) -> str | None:
    """The split dimension an index let (`let n = N - 1`) used as a value is computed from."""
    if not (isinstance(e, ir.Name) and e.kind == "let" and e.name in env):
        return None
    aff = affine_of(env[e.name], env)
    if aff is None:
        return None
    symbols = set(aff.const.symbols).union(*(c.symbols for _, c in aff.terms))
    return next((d for d in sorted(symbols) if d in split_dims), None)


def _names_split_axis(e: ir.BlockIndex | ir.Const, level: ClusterLevel) -> bool:
    """`ctx.block.a` or `ctx.origin.a` for a grid axis a the cluster splits."""
    axis = e.axis if isinstance(e, ir.BlockIndex) else e.origin
    return axis in level.grid_tiles


def _position_node(e: ir.Expr, env: dict[str, ir.Expr], level: ClusterLevel,
                   chunk_dim: str | None = None) -> ir.Expr | None:
    if isinstance(e, ir.BlockIndex | ir.Const) and _names_split_axis(e, level):
        return e
    if isinstance(e, ir.Name):
        if e.kind == "loop" and e.name == level.loop_var:
            return e
        if e.kind == "let" and e.name in env and mentions_position(env[e.name], env, level, chunk_dim):
            return e
    return None


def _position_message(hit: ir.Expr, level: ClusterLevel) -> str:
    if isinstance(hit, ir.Const):
        return lone_origin_message(hit, {})
    if isinstance(hit, ir.Name) and hit.kind == "loop":
        return (
            f"'{hit.name}' is the cluster loop's variable; inside a step leaf it counts from the chunk's "
            f"start, so it may only start a slice `{hit.name} :+ {level.loop_tile}` or mask the chunk's "
            f"edge, `{hit.name} + .. < N` with N the dimension the loop runs to"
        )
    what = f"ctx.block.{hit.axis}" if isinstance(hit, ir.BlockIndex) else f"'{hit.name}'"
    return (
        f"{what} is a super-tile position here, but inside a leaf it would count CTAs within the "
        "super-tile: a super-tile position may only start a slice `ctx.block.<axis> * S :+ S`, or be "
        "added to `ctx.origin.<axis>`, the super-tile's start, to make an absolute position"
    )
