"""Conditions that hold on a whole tile: one scalar test per tile instead of one per element.

Causal attention masks its scores with `where(cols <= rows and cols < N, s, -inf)`; only the key
blocks that cross the diagonal need it. For a condition made of comparisons (joined by `and`) of
affine index tiles (`arange`, `expand`, sums and differences of those and scalars, products by
positive constants), `all_true` gives a C expression, evaluated once per tile, that is true only
if the condition holds for every element: each comparison's bounds over the tile (the ends of
each `arange`) decide it. The emitter then writes the tile twice, with the mask and without, and
the test picks one (codegen.KernelGen.let). Anything outside that form gives None: per element.
"""

from __future__ import annotations

from compiler import builtins
from compiler.cuda import calls
from compiler.frontend import ir, walk

_CMP = {"<=": "<=", "<": "<", ">=": ">=", ">": ">"}


def all_true(gen, cond: ir.Expr) -> str | None:
    """A C expression true only when `cond` (a bool tile) holds at every element, or None."""
    if isinstance(cond, ir.BinOp) and cond.op == "and":
        a, b = all_true(gen, cond.lhs), all_true(gen, cond.rhs)
        return None if a is None or b is None else f"({a} && {b})"
    if not (isinstance(cond, ir.BinOp) and cond.op in _CMP):
        return None
    lhs, rhs = bounds(gen, cond.lhs), bounds(gen, cond.rhs)
    if lhs is None or rhs is None:
        return None
    (a_lo, a_hi), (b_lo, b_hi) = lhs, rhs
    if cond.op in ("<=", "<"):  # the largest left side against the smallest right side
        return f"({a_hi} {cond.op} {b_lo})"
    return f"({a_lo} {cond.op} {b_hi})"


def bounds(gen, e: ir.Expr) -> tuple[str, str] | None:
    """C expressions of the least and the greatest element of i32 tile or scalar `e`, or None."""
    if e.ty is None or e.ty.dtype != "i32":
        return None
    if not isinstance(e.ty, ir.TileType):
        s = gen.scalar(e)
        return s, s
    if isinstance(e, ir.Name):
        value = _single_let(gen, e.name)
        return None if value is None else bounds(gen, value)
    if builtins.is_positions(e) and len(e.args) == 1:
        return "0", f"({gen.scalar(e.args[0])} - 1)"
    if builtins.is_broadcast(e):
        return bounds(gen, e.args[0])
    if not isinstance(e, ir.BinOp) or e.op not in ("+", "-", "*"):
        return None
    a, b = bounds(gen, e.lhs), bounds(gen, e.rhs)
    if a is None or b is None:
        return None
    if e.op == "+":
        return f"({a[0]} + {b[0]})", f"({a[1]} + {b[1]})"
    if e.op == "-":
        return f"({a[0]} - {b[1]})", f"({a[1]} - {b[0]})"
    factor = next((x for x in (e.lhs, e.rhs) if isinstance(x, ir.Const) and x.value > 0), None)
    if factor is None:  # a product by anything but a positive constant may turn the order
        return None
    return f"({a[0]} * {b[0]})", f"({a[1]} * {b[1]})"


def _single_let(gen, name: str) -> ir.Expr | None:
    """The value of the kernel's only `let name`, or None (a parameter, a var, a name let twice,
    or a value that reads a var, which may have changed since the let)."""
    stmts = list(walk.iter_stmts(gen.plan.kernel.body))
    varying = {s.name for s in stmts if isinstance(s, ir.VarDecl)}
    lets = [s for s in stmts if isinstance(s, ir.Let) and s.name == name]
    if len(lets) != 1 or name in varying:
        return None
    value = lets[0].value
    if any(isinstance(x, ir.Name) and x.name in varying for x in walk.iter_exprs(value)):
        return None
    return value


def materialize_masked(gen, expr: ir.Expr, kind: str, name: str):
    """`let name = where(cond, a, b)` as two unrolled loops, `a` alone where `cond` holds on the
    whole tile (all_true) and the select elsewhere; the Val, or None where the condition has no
    such test (the caller materializes it as usual)."""
    if not builtins.is_select(expr):
        return None
    test = all_true(gen, expr.args[0])
    if test is None:
        return None
    shape = tuple(gen.size(s) for s in expr.ty.shape)
    ctx = gen.ctx_for(kind, shape)
    c, x, y = calls.where_parts(gen, expr, ctx)
    val = gen.declare(name, kind, shape, expr.ty.dtype, expr.ty.shape)
    flag = gen.fresh("whole")
    gen.out.line(f"const bool {flag} = {test};  // the condition holds on the whole tile")
    gen.out.open(f"if ({flag})")
    gen.emit_loop(ctx, [f"{gen.access(val, ctx)} = {x};"])
    gen.out.close(" else {")
    gen.out.depth += 1
    gen.emit_loop(ctx, [f"{gen.access(val, ctx)} = ({c} ? {x} : {y});"])
    gen.out.close()
    return val
