"""Facts about a bound kernel that the code generator needs before it emits anything.

- `IntRange`: bounds and a known divisor of every i32 scalar (block indices, loop variables,
  lets), so that loads and stores whose slices provably stay inside the tensor drop their
  bounds checks and 16-byte vector accesses are used where a slice start is a multiple of 4.
- `layout_hints`: whether each 1-D tile variable is a row vector, a column vector or a
  free-standing vector, from how it is used (expand's axis, reductions' axes).
- `shared_lets`: lets bound to a 2-D tensor load whose every use is an operand of `dot`; those
  are staged straight into shared memory and never held in registers.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from compiler import builtins
from compiler.frontend import ir, walk


@dataclass(frozen=True)
class IntRange:
    lo: int
    hi: int
    divisor: int  # every value is a multiple of this (0: the value is exactly 0)

    @staticmethod
    def exact(v: int) -> IntRange:
        return IntRange(v, v, abs(v))

    def __add__(self, o: IntRange) -> IntRange:
        return IntRange(self.lo + o.lo, self.hi + o.hi, gcd(self.divisor, o.divisor))

    def __sub__(self, o: IntRange) -> IntRange:
        return IntRange(self.lo - o.hi, self.hi - o.lo, gcd(self.divisor, o.divisor))

    def __mul__(self, o: IntRange) -> IntRange:
        c = (self.lo * o.lo, self.lo * o.hi, self.hi * o.lo, self.hi * o.hi)
        return IntRange(min(c), max(c), self.divisor * o.divisor)


UNKNOWN = IntRange(-(2**31), 2**31 - 1, 1)


def int_range(expr: ir.Expr, env: dict[str, IntRange]) -> IntRange:
    """Bounds of an i32 scalar expression; `env` holds names (dims, tiles, block axes as
    '%x', loop variables, lets)."""
    if isinstance(expr, ir.Const) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return IntRange.exact(expr.value)
    if isinstance(expr, ir.Name):
        return env.get(expr.name, UNKNOWN)
    if isinstance(expr, ir.BlockIndex):
        return env.get("%" + expr.axis, UNKNOWN)
    if isinstance(expr, ir.BinOp) and expr.op in ("+", "-", "*"):
        a, b = int_range(expr.lhs, env), int_range(expr.rhs, env)
        if UNKNOWN in (a, b):
            return UNKNOWN
        return a + b if expr.op == "+" else a - b if expr.op == "-" else a * b
    if builtins.pairwise(expr):
        a, b = int_range(expr.args[0], env), int_range(expr.args[1], env)
        if UNKNOWN in (a, b):
            return UNKNOWN
        pick = builtins.PYTHON_COMBINE[builtins.pairwise(expr)]
        return IntRange(pick(a.lo, b.lo), pick(a.hi, b.hi), gcd(a.divisor, b.divisor))
    return UNKNOWN


def loop_range(start: IntRange, stop: IntRange, step: int) -> IntRange:
    """The values a loop variable takes (empty loops give an empty-but-harmless range)."""
    if start == UNKNOWN or stop == UNKNOWN:
        return IntRange(start.lo, stop.hi, gcd(start.divisor, step))
    hi = stop.hi - 1
    if start.lo == start.hi:  # exact start: the last value is on the step grid
        hi = start.lo + step * ((stop.hi - 1 - start.lo) // step) if stop.hi > start.lo else start.lo
    return IntRange(start.lo, max(hi, start.lo), gcd(start.divisor, step))


# ---------------------------------------------------------------------------------------------
# Row / column / flat roles of 1-D tiles
# ---------------------------------------------------------------------------------------------



def _is_tile(e: ir.Expr) -> bool:
    return isinstance(e.ty, ir.TileType)


def natural_kind(expr: ir.Expr, hints: dict[str, str]) -> str | None:
    """The layout a 1-D tile expression prefers by itself (None: any layout will do)."""
    if not _is_tile(expr) or expr.ty.rank != 1:
        return None
    if isinstance(expr, ir.Name):
        return hints.get(expr.name)
    if isinstance(expr, ir.Call):
        axis = dict(expr.kwargs).get("axis")
        if builtins.is_reduction(expr) and expr.args[0].ty.rank == 2:
            return "row" if axis.value == 1 else "col"
        if not builtins.is_elementwise(expr):
            return None
        for a in expr.args:
            k = natural_kind(a, hints)
            if k:
                return k
        return None
    if isinstance(expr, ir.BinOp):
        return natural_kind(expr.lhs, hints) or natural_kind(expr.rhs, hints)
    if isinstance(expr, ir.UnaryOp):
        return natural_kind(expr.operand, hints)
    return None


def _want(expr: ir.Expr, kind: str, hints: dict[str, str]) -> bool:
    """Ask an elementwise 1-D expression's unhinted names to take `kind`; True if any changed."""
    if not _is_tile(expr) or expr.ty.rank != 1:
        return False
    if isinstance(expr, ir.Name):
        if expr.name not in hints:
            hints[expr.name] = kind
            return True
        return False
    changed = False
    if isinstance(expr, ir.BinOp):
        changed |= _want(expr.lhs, kind, hints)
        changed |= _want(expr.rhs, kind, hints)
    elif isinstance(expr, ir.UnaryOp):
        changed |= _want(expr.operand, kind, hints)
    elif builtins.is_elementwise(expr):
        for a in expr.args:
            changed |= _want(a, kind, hints)
    return changed


def layout_hints(body: tuple[ir.Stmt, ...]) -> dict[str, str]:
    """name -> 'row' | 'col' | 'flat' for every 1-D tile let / var."""
    hints: dict[str, str] = {}
    one_d: list[str] = []
    for stmt in walk.iter_stmts(body):
        if isinstance(stmt, ir.Let) and _is_tile(stmt.value) and stmt.value.ty.rank == 1:
            one_d.append(stmt.name)
        if (
            isinstance(stmt, ir.VarDecl)
            and isinstance(stmt.declared, ir.TileType)
            and stmt.declared.rank == 1
        ):
            one_d.append(stmt.name)
    for _ in range(8):
        changed = False
        for stmt in walk.iter_stmts(body):
            value = getattr(stmt, "value", None)
            name = getattr(stmt, "name", None)
            if isinstance(stmt, ir.Let | ir.Assign) and name in one_d:
                k = hints.get(name) or natural_kind(value, hints)
                if k:
                    if name not in hints:
                        hints[name] = k
                        changed = True
                    changed |= _want(value, k, hints)
            for e in walk.iter_exprs(stmt):
                if (
                    builtins.is_broadcast(e)
                    and e.args[0].ty.rank == 1
                    and isinstance(e.ty, ir.TileType)
                    and e.ty.rank == 2
                ):
                    axis = dict(e.kwargs)["axis"].value
                    changed |= _want(e.args[0], "row" if axis == 1 else "col", hints)
        if not changed:
            break
    for name in one_d:
        hints.setdefault(name, "flat")
    return hints


# ---------------------------------------------------------------------------------------------
# Lets that live only in shared memory
# ---------------------------------------------------------------------------------------------


def dot_operand_name(e: ir.Expr) -> str | None:
    if isinstance(e, ir.Name):
        return e.name
    if builtins.is_transpose(e) and isinstance(e.args[0], ir.Name):
        return e.args[0].name
    return None


def is_plain_2d_load(e: ir.Expr) -> bool:
    return (
        isinstance(e, ir.Load)
        and isinstance(e.ty, ir.TileType)  # a load of one element is a scalar
        and e.ty.rank == 2
        and all(isinstance(i, ir.SliceRange | ir.SliceAll | ir.SliceIndex) for i in e.index)
        and sum(not isinstance(i, ir.SliceIndex) for i in e.index) == 2
    )


def dot_operand_uses(body: tuple[ir.Stmt, ...], names) -> dict[str, list[tuple[ir.Call, str, bool]]]:
    """name -> its uses as a dot operand in order, (dot, role 'a' or 'b', transposed) each, for
    the names of `names` that nothing but dots reads (an unused one has no uses)."""
    uses: dict[str, list] = {n: [] for n in names}
    reads: dict[str, int] = {n: 0 for n in names}
    for e in walk.iter_body_exprs(body):
        if isinstance(e, ir.Name) and e.name in reads:
            reads[e.name] += 1
        if builtins.is_contraction(e):
            for role, arg in zip("ab", e.args, strict=True):
                n = dot_operand_name(arg)
                if n in uses:
                    uses[n].append((e, role, isinstance(arg, ir.Call)))
    return {n: u for n, u in uses.items() if reads[n] == len(u)}


def shared_lets(body: tuple[ir.Stmt, ...]) -> dict[str, str]:
    """let name -> 'a' or 'b' (the dot operand role it plays) for lets of 2-D tensor loads used
    only as dot operands, always in the same role and the same orientation."""
    candidates = {
        s.name for s in walk.iter_stmts(body) if isinstance(s, ir.Let) and is_plain_2d_load(s.value)
    }
    ways = {n: {(role, tr) for _, role, tr in u} for n, u in dot_operand_uses(body, candidates).items()}
    return {n: next(iter(w))[0] for n, w in ways.items() if len(w) == 1}


def shared_let_transposed(body: tuple[ir.Stmt, ...], name: str) -> bool:
    for e in walk.iter_body_exprs(body):
        if builtins.is_contraction(e):
            for arg in e.args:
                if dot_operand_name(arg) == name:
                    return isinstance(arg, ir.Call)
    return False


# ---------------------------------------------------------------------------------------------
# Which block axes to launch longest-first
# ---------------------------------------------------------------------------------------------


def _combine(a: int | None, b: int | None) -> int | None:
    """Trend of a sum of two terms with trends a and b (+1 grows, -1 shrinks, 0 flat, None unknown)."""
    if a is None or b is None:
        return None
    if a == 0 or a == b:
        return b
    return a if b == 0 else None


def _trend(e: ir.Expr, axis: str, lets: dict[str, ir.Expr | None], positive: dict[str, int]) -> int | None:
    """How the i32 expression `e` moves as block index `axis` grows (every other block axis held)."""
    if isinstance(e, ir.Const):
        return 0
    if isinstance(e, ir.BlockIndex):
        return 1 if e.axis == axis else 0
    if isinstance(e, ir.Name):
        if e.kind == "let":
            value = lets.get(e.name)
            return None if value is None else _trend(value, axis, lets, positive)
        return 0 if e.kind in ("dim", "tile", "scalar") else None
    if isinstance(e, ir.BinOp) and e.op in ("+", "-"):
        b = _trend(e.rhs, axis, lets, positive)
        return _combine(_trend(e.lhs, axis, lets, positive), b if e.op == "+" or b is None else -b)
    if isinstance(e, ir.BinOp) and e.op == "*":
        for x, c in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            # x * c with c a positive compile-time constant keeps x's trend
            if _positive_constant(c, positive):
                return _trend(x, axis, lets, positive)
        return None
    if builtins.pairwise(e):
        out: int | None = 0
        for a in e.args:
            out = _combine(out, _trend(a, axis, lets, positive))
        return out
    if not any(isinstance(x, ir.BlockIndex | ir.Name) for x in walk.iter_exprs(e)):
        return 0
    return None


def _positive_constant(e: ir.Expr, env: dict[str, int]) -> bool:
    if isinstance(e, ir.Const):
        return not isinstance(e.value, bool) and e.value > 0
    return isinstance(e, ir.Name) and e.kind in ("dim", "tile") and env.get(e.name, 0) > 0


def longest_first_axes(body: tuple[ir.Stmt, ...], env: dict[str, int]) -> tuple[str, ...]:
    """Block axes along which some loop's trip count grows and none shrinks (causal attention's
    key loop stops at the block's diagonal). Launching those axes in reverse order starts the CTAs
    with the most work first, so the short ones fill the tail of the grid instead of the long ones
    running alone at the end. CTAs are independent, so the order changes no result."""
    lets: dict[str, ir.Expr | None] = {}
    for s in walk.iter_stmts(body):
        if isinstance(s, ir.Let):
            lets[s.name] = None if s.name in lets else s.value  # a rebound name: unknown
    loops = [s for s in walk.iter_stmts(body) if isinstance(s, ir.For)]
    axes = []
    for axis in "xyz":
        trends = [
            _combine(_trend(f.stop, axis, lets, env), _negate(_trend(f.start, axis, lets, env)))
            for f in loops
        ]
        if 1 in trends and all(t in (0, 1) for t in trends):
            axes.append(axis)
    return tuple(axes)


def _negate(t: int | None) -> int | None:
    return None if t is None else -t


def tc_dots_at(tc_dots, s: ir.For) -> list[tuple[int, ir.Call]]:
    """(statement index, dot) of the loop body's tensor-core dots (of `tc_dots`), in order."""
    ids = set(map(id, tc_dots))
    return [
        (i, e)
        for i, st in enumerate(s.body)
        for e in walk.iter_body_exprs((st,))
        if isinstance(e, ir.Call) and id(e) in ids
    ]


def touches(stmt: ir.Stmt, name: str) -> bool:
    """The statement (loops included) reads or assigns variable `name`."""
    if any(isinstance(x, ir.Assign | ir.VarDecl) and x.name == name for x in walk.iter_stmts((stmt,))):
        return True
    return any(isinstance(x, ir.Name) and x.name == name for x in walk.iter_body_exprs((stmt,)))
