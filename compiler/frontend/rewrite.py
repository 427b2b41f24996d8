"""Rewriting IR into new IR: the frozen nodes are rebuilt along the path to what changes, and
everything else is shared. The cluster compiler makes its leaves this way (compiler/cluster/
leaves.py), so a leaf keeps the user's spans wherever it keeps the user's nodes.

    replace_stmt(body, old, new)   `old` (found by identity, in loop bodies too) -> the statements `new`
    map_exprs(body, fn)            every expression e, innermost first, -> fn(e) (e itself to keep it)
    replace_expr(body, old, new)   the expression `old` (by identity) -> `new`
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from compiler.frontend import ir

ExprFn = Callable[[ir.Expr], ir.Expr]


def replace_stmt(body: tuple[ir.Stmt, ...], old: ir.Stmt, new: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    out: list[ir.Stmt] = []
    for stmt in body:
        if stmt is old:
            out += new
        elif isinstance(stmt, ir.For):
            out.append(dataclasses.replace(stmt, body=replace_stmt(stmt.body, old, new)))
        else:
            out.append(stmt)
    return tuple(out)


def _index(index: tuple[ir.SliceItem, ...], visit: ExprFn) -> tuple[ir.SliceItem, ...]:
    items = []
    for item in index:
        if isinstance(item, ir.SliceRange):
            item = dataclasses.replace(item, start=visit(item.start), extent=visit(item.extent))
        elif isinstance(item, ir.SliceIndex):
            item = dataclasses.replace(item, index=visit(item.index))
        items.append(item)
    return tuple(items)


def _children(e: ir.Expr, visit: ExprFn) -> ir.Expr:
    """`e` with `visit` applied to each of its direct sub-expressions."""
    if isinstance(e, ir.BinOp):
        return dataclasses.replace(e, lhs=visit(e.lhs), rhs=visit(e.rhs))
    if isinstance(e, ir.UnaryOp):
        return dataclasses.replace(e, operand=visit(e.operand))
    if isinstance(e, ir.Load):
        fill = None if e.fill is None else visit(e.fill)
        return dataclasses.replace(e, index=_index(e.index, visit), fill=fill)
    if isinstance(e, ir.Call):
        kwargs = tuple((k, visit(v)) for k, v in e.kwargs)
        return dataclasses.replace(e, args=tuple(visit(a) for a in e.args), kwargs=kwargs)
    if isinstance(e, ir.ShapeList):
        return dataclasses.replace(e, items=tuple(visit(x) for x in e.items))
    return e  # Const, Name, BlockIndex: no children


def _stmt(s: ir.Stmt, visit: ExprFn) -> ir.Stmt:
    """`s` with `visit` applied to each of its top expressions (a loop's body too)."""
    if isinstance(s, ir.Let | ir.Assign):
        return dataclasses.replace(s, value=visit(s.value))
    if isinstance(s, ir.VarDecl):
        return dataclasses.replace(s, init=visit(s.init))
    if isinstance(s, ir.Store):
        return dataclasses.replace(s, index=_index(s.index, visit), value=visit(s.value))
    if isinstance(s, ir.For):
        body = tuple(_stmt(x, visit) for x in s.body)
        return dataclasses.replace(s, start=visit(s.start), stop=visit(s.stop), step=visit(s.step), body=body)
    raise TypeError(f"not a statement: {s!r}")


def map_exprs(body: tuple[ir.Stmt, ...], fn: ExprFn) -> tuple[ir.Stmt, ...]:
    """The body with every expression replaced by `fn` of it, its children mapped first. A
    declared var type keeps its shape (Sizes, not expressions)."""

    def bottom_up(e: ir.Expr) -> ir.Expr:
        return fn(_children(e, bottom_up))

    return tuple(_stmt(s, bottom_up) for s in body)


def replace_expr(body: tuple[ir.Stmt, ...], old: ir.Expr, new: ir.Expr) -> tuple[ir.Stmt, ...]:
    """`old` must be a node of `body` itself (not an equal copy): the search runs top-down and
    matches by identity."""

    def top_down(e: ir.Expr) -> ir.Expr:
        return new if e is old else _children(e, top_down)

    return tuple(_stmt(s, top_down) for s in body)
