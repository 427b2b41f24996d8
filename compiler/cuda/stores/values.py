"""Which values a store can write straight from the accumulator's registers, shared by the
pair stores (stores/emit.py) and the TMA store (mainloops/tma_ws/store.py): element-wise expressions of the
accumulator layout's register tiles, rows or columns of it (a bias through `expand`), scalars and
constants; and a column pair's two values, written as one 8-byte (f32) or 4-byte (two 16-bit
values packed) store: both store the pair the same way, each in its own loop order."""

from __future__ import annotations

from compiler import builtins
from compiler.cuda.values import Ctx, Val
from compiler.frontend import ir

_PACK = {"bf16": "pack_bf16x2", "f16": "pack_f16x2"}


def pair_values(gen, value: ir.Expr, ctx: Ctx) -> tuple[str, str]:
    """The f32 values of `value` at columns `_c` and `_c + 1` of row `_r` (register `_j`, `_j + 1`
    of `_i`): the caller's loops name them so, in the order that suits it."""
    second = Ctx(ctx.shape, ctx.kind, ("_i", "_j + 1"), ("_r", "_c + 1"), ctx.native)
    lo, hi = (gen.cast(gen.tile_elem(value, c), value, "f32") for c in (ctx, second))
    return lo, hi


def pair_write(dtype: str, address: str, lo: str, hi: str) -> str:
    """One store of the pair at `address` (a pointer to the first element) into a `dtype` tensor."""
    if dtype == "f32":
        return f"*reinterpret_cast<float2*>({address}) = make_float2({lo}, {hi});"
    return f"*reinterpret_cast<unsigned*>({address}) = {_PACK[dtype]}({lo}, {hi});"


def pure(gen, e: ir.Expr, shape) -> bool:
    """An element of `e` is a C expression with no code before it: constants, scalars, loads,
    register tiles already in this layout, and element-wise operations on those."""
    if isinstance(e, ir.Const | ir.Load):
        return True
    if isinstance(e, ir.Name):
        v = gen.scope.vals.get(e.name)
        return e.name in gen.scope.scalars or isinstance(v, Val) and v.kind == "2d" and v.shape == shape
    if isinstance(e, ir.BinOp):
        return pure(gen, e.lhs, shape) and pure(gen, e.rhs, shape)
    if isinstance(e, ir.UnaryOp):
        return pure(gen, e.operand, shape)
    if builtins.is_broadcast(e):  # a row or column
        kind = "row" if dict(e.kwargs)["axis"].value == 1 else "col"
        return _pure_vector(gen, e.args[0], kind, shape)
    if builtins.is_elementwise(e):
        return all(pure(gen, a, shape) for a in e.args)
    return False


def _pure_vector(gen, e: ir.Expr, kind: str, shape) -> bool:
    """A 1-D operand of `expand` read in a 2-D tile of `shape`: a register row or column in that
    layout, or element-wise operations on those, constants, scalars and 1-D loads (a bias: read
    element by element, since no axis of the layout holds 4-wide vectors to load at once)."""
    if isinstance(e, ir.Const):
        return True
    if isinstance(e, ir.Load):
        return all(d.vector == 1 for d in gen.dists("2d", shape))
    if isinstance(e, ir.Name):
        v = gen.scope.vals.get(e.name)
        return e.name in gen.scope.scalars or isinstance(v, Val) and v.kind == kind
    if isinstance(e, ir.BinOp):
        return _pure_vector(gen, e.lhs, kind, shape) and _pure_vector(gen, e.rhs, kind, shape)
    if isinstance(e, ir.UnaryOp):
        return _pure_vector(gen, e.operand, kind, shape)
    if builtins.is_elementwise(e):
        return all(_pure_vector(gen, a, kind, shape) for a in e.args)
    return False
