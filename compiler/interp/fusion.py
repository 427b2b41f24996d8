"""Recognising the one loop shape worth collapsing: a K-loop that only accumulates a `dot`.

    for kt in range(start, stop, TILE_K) {
      let a = A[..., kt :+ TILE_K]       // optional lets of plain loads
      let b = B[kt :+ TILE_K, ...]
      acc += dot(a, b)
    }

Summed over all iterations this is `acc += dot(A[..., s :+ T*TILE_K], B[s :+ T*TILE_K, ...])`
with T the trip count: the chunks tile the contraction axis exactly, elements past the tensor
read the same fill either way, so one large GEMM gives the same sum (in another order, within
f32 rounding). The interpreter then runs one GEMM instead of T thin ones. The runtime side
(interpreter.py) also checks what only values can tell: a uniform trip count and extent == step.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import builtins
from compiler.frontend import ir


@dataclass(frozen=True)
class DotLoop:
    var: str  # the accumulator
    lhs: ir.Load
    rhs: ir.Load
    lhs_item: int  # position in lhs.index of the `kt :+ step` window (the contraction axis)
    rhs_item: int
    mode: str = "f32"  # the dot's precision mode (rounding to TF32 is per element: fusing keeps it)


def mentions(node, name: str) -> bool:
    """Whether an expression (or slice item) uses `name`."""
    if isinstance(node, ir.Name):
        return node.name == name
    if isinstance(node, ir.BinOp):
        return mentions(node.lhs, name) or mentions(node.rhs, name)
    if isinstance(node, ir.UnaryOp):
        return mentions(node.operand, name)
    if isinstance(node, ir.Call):
        return any(mentions(a, name) for a in node.args) or any(mentions(v, name) for _, v in node.kwargs)
    if isinstance(node, ir.ShapeList):
        return any(mentions(i, name) for i in node.items)
    if isinstance(node, ir.Load):
        in_fill = node.fill is not None and mentions(node.fill, name)
        return in_fill or any(mentions(i, name) for i in node.index)
    if isinstance(node, ir.SliceRange):
        return mentions(node.start, name) or mentions(node.extent, name)
    if isinstance(node, ir.SliceIndex):
        return mentions(node.index, name)
    return False  # Const, BlockIndex, SliceAll


def _is_loop_var_plus(expr: ir.Expr, var: str) -> bool:
    """`kt`, `kt + e` or `e + kt` with e free of kt."""
    if isinstance(expr, ir.Name):
        return expr.name == var
    if isinstance(expr, ir.BinOp) and expr.op == "+":
        if isinstance(expr.lhs, ir.Name) and expr.lhs.name == var:
            return not mentions(expr.rhs, var)
        if isinstance(expr.rhs, ir.Name) and expr.rhs.name == var:
            return not mentions(expr.lhs, var)
    return False


def _contraction_item(load: ir.Load, var: str, kept_position: int) -> int | None:
    """The index position of the loop's window in `load`, if it is the `kept_position`-th kept
    axis of a rank-2 tile and the only place the loop variable appears."""
    kept = [i for i, item in enumerate(load.index) if not isinstance(item, ir.SliceIndex)]
    if len(kept) != 2:
        return None
    position = kept[kept_position]
    item = load.index[position]
    if not isinstance(item, ir.SliceRange) or not _is_loop_var_plus(item.start, var):
        return None
    if mentions(item.extent, var) or (load.fill is not None and mentions(load.fill, var)):
        return None
    if any(mentions(other, var) for i, other in enumerate(load.index) if i != position):
        return None
    return position


def match_dot_loop(loop: ir.For) -> DotLoop | None:
    *lets, last = loop.body if loop.body else (None,)
    if not isinstance(last, ir.Assign) or last.op != "+=" or not isinstance(last.value, ir.Call):
        return None
    call = last.value
    if not builtins.is_contraction(call) or len(call.args) != 2 or call.kwargs:
        return None
    bound: dict[str, ir.Load] = {}
    for stmt in lets:
        if not isinstance(stmt, ir.Let) or not isinstance(stmt.value, ir.Load) or stmt.name in bound:
            return None
        bound[stmt.name] = stmt.value
    if last.name in bound or last.name == loop.var:
        return None
    operands = []
    for arg in call.args:
        if isinstance(arg, ir.Load):
            operands.append(arg)
        elif isinstance(arg, ir.Name) and arg.name in bound:
            operands.append(bound[arg.name])
        else:
            return None
    lhs, rhs = operands
    if any(mentions(load, name) for load in operands for name in bound):
        return None
    lhs_item = _contraction_item(lhs, loop.var, 1)
    rhs_item = _contraction_item(rhs, loop.var, 0)
    if lhs_item is None or rhs_item is None:
        return None
    mode = call.precision.mode if call.precision is not None else "f32"
    return DotLoop(last.name, lhs, rhs, lhs_item, rhs_item, mode)
