"""The rules of atomic stores, `atomic_add(T[items], v)`, `atomic_max`, `atomic_min`
(docs/language.md §6.4): what they may write, and how their target may be used elsewhere.

An atomic combines every CTA's contribution into each element, in an order nobody chooses; the
result is well defined only when nothing else touches the target during the launch: no load of
it (which would see some contributions and not others), no plain or compound store (which would
race with the atomics), and one atomic operation only (adds and maxes do not commute).
"""

from __future__ import annotations

from compiler.frontend import ir, walk
from compiler.frontend.check_types import INTEGERS, check_assignable_dtype, describe
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.source import Span

ATOMIC_DTYPES = ("f32", "i32", "i64", "u32")  # what the GPU's atom instructions (or a CAS loop) take


def check_atomic_value(param: ir.TensorParam, op: str, value: ir.Expr, tensor_span: Span) -> None:
    """An atomic into `param` of `value` (typed): the tensor's dtype has atomics, the value fits."""
    if param.dtype not in ATOMIC_DTYPES:
        raise CompileError(
            tensor_span,
            f"{op} needs a tensor of {', '.join(ATOMIC_DTYPES)}; '{param.name}' holds {param.dtype}",
        )
    if value.ty.dtype == "bool":
        raise CompileError(value.span, f"{op} needs numbers, found {describe(value.ty)}")
    if param.dtype in INTEGERS:
        check_assignable_dtype(param.dtype, value, f"tensor '{param.name}' holds {param.dtype}", op)


def check_atomic_targets(body: tuple[ir.Stmt, ...]) -> None:
    """Each atomic target is written only by atomics of one kind and never loaded."""
    first: dict[str, ir.Store] = {}
    for stmt in walk.iter_stmts(body):
        if isinstance(stmt, ir.Store) and stmt.op in ir.ATOMIC_OPS:
            first.setdefault(stmt.tensor, stmt)
    if not first:
        return
    for stmt in walk.iter_stmts(body):
        if isinstance(stmt, ir.Store) and stmt.tensor in first:
            atomic = first[stmt.tensor]
            if stmt.op != atomic.op:
                doing = f"{stmt.op}" if stmt.op in ir.ATOMIC_OPS else f"a store ('{stmt.op}')"
                raise CompileError(
                    stmt.span,
                    f"'{stmt.tensor}' is the target of {atomic.op} at line {atomic.span.line}; "
                    f"{doing} into it in the same kernel would race with it",
                )
        for e in walk.iter_exprs(stmt):
            if isinstance(e, ir.Load) and e.tensor in first:
                atomic = first[e.tensor]
                raise CompileError(
                    e.span,
                    f"'{e.tensor}' is the target of {atomic.op} at line {atomic.span.line}; reading it "
                    "in the same kernel would see some CTAs' contributions and not others",
                )
