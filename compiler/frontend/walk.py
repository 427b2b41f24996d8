"""Traversal helpers over checked (or unchecked) kernel bodies."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from compiler.frontend import ir
from compiler.frontend.source import UNKNOWN_SPAN, Span


def iter_stmts(body: tuple[ir.Stmt, ...]) -> Iterator[ir.Stmt]:
    """Every statement in pre-order, descending into loop bodies."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ir.For):
            yield from iter_stmts(stmt.body)


def iter_stmts_with_env(
    body: tuple[ir.Stmt, ...], env: dict[str, ir.Expr] | None = None
) -> Iterator[tuple[ir.Stmt, dict[str, ir.Expr]]]:
    """Every statement in pre-order with the lets visible at it (name -> value), the `env` that
    `affine.affine_of` wants. Lets inside a loop body are visible only inside that body."""
    env = dict(env or {})
    for stmt in body:
        yield stmt, env
        if isinstance(stmt, ir.Let):
            env = {**env, stmt.name: stmt.value}
        elif isinstance(stmt, ir.For):
            yield from iter_stmts_with_env(stmt.body, env)


def slice_exprs(index: tuple[ir.SliceItem, ...]) -> Iterator[ir.Expr]:
    for item in index:
        if isinstance(item, ir.SliceRange):
            yield item.start
            yield item.extent
        elif isinstance(item, ir.SliceIndex):
            yield item.index


def child_exprs(node: ir.Stmt | ir.Expr) -> tuple[ir.Expr, ...]:
    """The expressions directly inside a node (for a For: its bounds, not its body)."""
    if isinstance(node, ir.Let):
        return (node.value,)
    if isinstance(node, ir.VarDecl):
        return (node.init,)
    if isinstance(node, ir.Assign):
        return (node.value,)
    if isinstance(node, ir.Store):
        return (*slice_exprs(node.index), node.value)
    if isinstance(node, ir.For):
        return (node.start, node.stop, node.step)
    if isinstance(node, ir.BinOp):
        return (node.lhs, node.rhs)
    if isinstance(node, ir.UnaryOp):
        return (node.operand,)
    if isinstance(node, ir.Load):
        return (*slice_exprs(node.index), *((node.fill,) if node.fill is not None else ()))
    if isinstance(node, ir.Call):
        return (*node.args, *(v for _, v in node.kwargs))
    if isinstance(node, ir.ShapeList):
        return node.items
    return ()


def iter_exprs(node: ir.Stmt | ir.Expr) -> Iterator[ir.Expr]:
    """Pre-order over the expressions of a statement or expression: into slices, kwargs, loads'
    fill values and loop bounds; a For's body is not entered (use iter_body_exprs)."""
    if not isinstance(node, ir.Let | ir.VarDecl | ir.Assign | ir.Store | ir.For):
        yield node
    for child in child_exprs(node):
        yield from iter_exprs(child)


def iter_body_exprs(body: tuple[ir.Stmt, ...]) -> Iterator[ir.Expr]:
    """Every expression of every statement of a body, loops included."""
    if not isinstance(body, tuple):  # a list may change: walked afresh each time
        return (expr for stmt in iter_stmts(body) for expr in iter_exprs(stmt))
    return iter(_body_exprs(body))


# The CUDA generator's analyses walk the same kernel body many times for one compile (a third of
# a compile's time went to it). The IR is frozen, so one body's walk is always the same: kept for
# the last few bodies, by identity; the body itself is held too, so its id cannot be reused.
_WALKED: dict[int, tuple[tuple[ir.Stmt, ...], tuple[ir.Expr, ...]]] = {}
_WALKED_MAX = 64


def _body_exprs(body: tuple[ir.Stmt, ...]) -> tuple[ir.Expr, ...]:
    hit = _WALKED.get(id(body))
    if hit is not None and hit[0] is body:
        return hit[1]
    exprs = tuple(expr for stmt in iter_stmts(body) for expr in iter_exprs(stmt))
    if len(_WALKED) >= _WALKED_MAX:
        _WALKED.clear()
    _WALKED[id(body)] = (body, exprs)
    return exprs


def _unique(names) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def stored_tensors(kernel: ir.Kernel) -> tuple[str, ...]:
    """Tensors the kernel writes, in order of first store."""
    return _unique(s.tensor for s in iter_stmts(kernel.body) if isinstance(s, ir.Store))


def loaded_tensors(kernel: ir.Kernel) -> tuple[str, ...]:
    """Tensors the kernel reads through loads, in order of first load. A compound store
    (`T[..] += v`) also reads T: see read_tensors."""
    return _unique(e.tensor for e in iter_body_exprs(kernel.body) if isinstance(e, ir.Load))


def read_tensors(kernel: ir.Kernel) -> tuple[str, ...]:
    """Tensors whose contents the kernel depends on: loads and compound stores."""
    compound = (s.tensor for s in iter_stmts(kernel.body) if isinstance(s, ir.Store) and s.op != "=")
    return _unique((*loaded_tensors(kernel), *compound))


def first_old_value_read(kernel: ir.Kernel, tensor: str) -> Span | None:
    """Where the kernel reads `tensor`'s old contents, or None when it writes before it reads.

    Statements are taken in source order: a load of `tensor` (or a compound store to it) in a
    statement at or before its first plain store reads what the tensor held before the kernel
    ran, so that tensor's file must exist; a tensor only ever stored to, or read after it was
    stored, can be created."""
    for stmt in iter_stmts(kernel.body):
        for expr in iter_exprs(stmt):
            if isinstance(expr, ir.Load) and expr.tensor == tensor:
                return expr.span
        if isinstance(stmt, ir.Store) and stmt.tensor == tensor:
            return stmt.span if stmt.op != "=" else None
    return None


def dot_modes(kernel: ir.Kernel) -> tuple[str, ...]:
    """The precision modes of the kernel's dots (checked IR), sorted: ("bf16", "f32"), say."""
    return tuple(sorted({e.precision.mode for e in iter_body_exprs(kernel.body)
                         if isinstance(e, ir.Call) and e.precision is not None}))


def block_axes_used(kernel: ir.Kernel) -> tuple[str, ...]:
    return tuple(sorted({e.axis for e in iter_body_exprs(kernel.body) if isinstance(e, ir.BlockIndex)}))


def without_spans(node):
    """The same IR with every span blanked (and kernels' source text, modules' file and text
    dropped): two trees are structurally equal exactly when their `without_spans` are."""
    if isinstance(node, Span):
        return UNKNOWN_SPAN
    if isinstance(node, tuple):
        return tuple(without_spans(x) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type | ir.Size):
        changes = {f.name: without_spans(getattr(node, f.name)) for f in dataclasses.fields(node)}
        if isinstance(node, ir.Kernel):
            changes["source"] = ""
        if isinstance(node, ir.Module):
            changes.update(text="", file="")
        return dataclasses.replace(node, **changes)
    return node
