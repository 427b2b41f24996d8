"""An estimate of a leaf launch's floating-point work, for the scheduler's cost model.

Counted per CTA and multiplied by the CTA count: `dot` of [M, K] x [K, N] is 2*M*N*K, every other
f32 elementwise operation or reduction is one operation per element it reads or makes; index
arithmetic (i32), comparisons, loads, stores, layout changes (transpose, expand) count nothing.
Loops multiply their body by their trip count. A trip count that depends on the CTA (causal
attention's `min(ctx.origin.x + row + BR, N)`) is averaged over the first and the last CTA of the
grid: exact when it grows linearly along the grid, as causal bounds do.
"""

from __future__ import annotations

from collections.abc import Mapping

from compiler import builtins
from compiler.frontend import ir, walk


def _numel(ty: ir.Type | None, env: Mapping[str, int]) -> int:
    if isinstance(ty, ir.TileType):
        n = 1
        for s in ty.shape:
            n *= s.evaluate(env)
        return n
    return 1


def _is_f32(ty: ir.Type | None) -> bool:
    return ty is not None and ty.dtype == "f32"


def _expr_flops(expr: ir.Expr, env: Mapping[str, int]) -> int:
    total = 0
    for e in walk.iter_exprs(expr):
        if isinstance(e, ir.BinOp | ir.UnaryOp) and _is_f32(e.ty):
            total += _numel(e.ty, env)
        elif isinstance(e, ir.Call) and not builtins.moves_data_only(e):
            if builtins.is_contraction(e):
                a, b = e.args[0].ty, e.args[1].ty
                m, k = (s.evaluate(env) for s in a.shape)
                n = b.shape[1].evaluate(env)
                total += 2 * m * n * k
            elif builtins.is_reduction(e):
                total += _numel(e.args[0].ty, env)
            elif _is_f32(e.ty):
                total += _numel(e.ty, env)
    return total


def _int_value(e: ir.Expr, env: Mapping[str, int]) -> int | None:
    if isinstance(e, ir.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return e.value
    if isinstance(e, ir.Name) and e.name in env:
        return env[e.name]
    if isinstance(e, ir.BlockIndex):
        return env.get("block." + e.axis)
    if builtins.pairwise(e):
        a, b = _int_value(e.args[0], env), _int_value(e.args[1], env)
        return None if a is None or b is None else builtins.PYTHON_COMBINE[builtins.pairwise(e)](a, b)
    if isinstance(e, ir.BinOp) and e.op in "+-*/":
        a, b = _int_value(e.lhs, env), _int_value(e.rhs, env)
        if a is None or b is None:
            return None
        return {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b else 0}[e.op]
    return None


def _trips(loop: ir.For, env: Mapping[str, int]) -> int:
    start, stop, step = (_int_value(x, env) for x in (loop.start, loop.stop, loop.step))
    if start is None or stop is None or not step:
        return 1  # an estimate: bounds that depend on the CTA count their body once
    return max(0, -(-(stop - start) // step))


def _body_flops(body: tuple[ir.Stmt, ...], env: Mapping[str, int], var_types: dict[str, ir.Type]) -> int:
    total = 0
    env = dict(env)
    for stmt in body:
        if isinstance(stmt, ir.Let):
            value = _int_value(stmt.value, env)
            if value is not None:
                env[stmt.name] = value
        if isinstance(stmt, ir.For):
            total += _trips(stmt, env) * _body_flops(stmt.body, env, var_types)
            continue
        if isinstance(stmt, ir.VarDecl):
            var_types[stmt.name] = stmt.declared
        for e in walk.child_exprs(stmt):
            total += _expr_flops(e, env)
        if isinstance(stmt, ir.Assign) and stmt.op != "=":
            total += _numel(var_types.get(stmt.name), env)
        if isinstance(stmt, ir.Store) and stmt.op != "=":
            total += _numel(stmt.value.ty, env)
    return total


def leaf_flops(kernel: ir.Kernel, env: Mapping[str, int], ctas: int, grid: tuple[int, ...] = ()) -> int:
    """Floating-point operations of one launch of `kernel` over `ctas` CTAs, its CTA grid `grid`
    (without it, a bound that depends on the CTA counts its loop's body once)."""
    if not grid:
        return ctas * _body_flops(kernel.body, env, {})
    first = {**env, **{f"block.{a}": 0 for a in "xyz"}}
    last = {**env, **{f"block.{a}": g - 1 for a, g in zip("xyz", grid, strict=False)}}
    return ctas * (_body_flops(kernel.body, first, {}) + _body_flops(kernel.body, last, {})) // 2
