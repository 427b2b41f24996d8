"""Leaves of a combinable cluster loop whose partials live apart from the output: the online
softmax's (m, l, acc), and the merge of two partials of either form. Each is IR made from the
user's checked kernel (as leaves.py makes the others):

    softmax init     m_p = -inf, l_p = 0, acc_p = 0 over the output's super-tile
    softmax step     the user's kernel, its vars starting from the partials' buffers and its final
                     store replaced by stores of the vars back into them (one chunk per launch)
    softmax merge    (m, l, acc) <- the log-sum-exp combination of this share's and another's
    softmax finish   the user's store, its vars read from share 0's partial
    sum merge        C <- C + C_from (the linear accumulator: partials add)

Generated kernels are split among CTAs like the user's store (`tiled`: per axis of the output, the
grid axis and tile that split it, or None), as the init leaf of leaves.py is.

The merge of two partials is described once, as IR (`softmax_merge`, `sum_merge`), for every
level: nodes of a cluster here, CTAs of a leaf in compiler/cuda/mainloops/split_loop/transform.py (the same
IR). `softmax_merge_lines` and `sum_merge_line` print the same statements for a caller that writes phobos
source (the split's merge tree, compiler/cuda/mainloops/split_loop/tree.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from compiler.cluster.leaves import generated_kernel, main_leaf, tiled_index
from compiler.cluster.softmax import OnlineSoftmax
from compiler.frontend import ir, rewrite
from compiler.frontend.ir_print import format_stmt
from compiler.frontend.source import UNKNOWN_SPAN, Span

MERGE_LETS = ("m_a", "m_b", "m_ab", "c_a", "c_b")  # the merge's let names in a generated leaf


@dataclass(frozen=True)
class PartialNames:
    """Parameter (and tensor) names of the softmax partials, and of the other share's in a merge."""

    m: str
    l: str
    acc: str

    def other(self, taken: set[str]) -> PartialNames:
        return PartialNames(*(fresh(n + "_from", taken) for n in (self.m, self.l, self.acc)))


def fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


# ---- the merge, the one description of it ----------------------------------------------------


@dataclass(frozen=True)
class Place:
    """Where one part of a partial lives, to be read and assigned: a var (`index` None) or a
    tensor slice `name[index]`."""

    name: str
    span: Span
    index: tuple[ir.SliceItem, ...] | None = None

    def read(self) -> ir.Expr:
        if self.index is None:
            return ir.Name(self.name, self.span)
        return ir.Load(self.name, self.index, self.span)

    def write(self, value: ir.Expr) -> ir.Stmt:
        if self.index is None:
            return ir.Assign(self.name, "=", value, self.span)
        return ir.Store(self.name, self.index, "=", value, self.span)


def softmax_merge(mine: tuple[Place, Place, Place], theirs: tuple[Place, Place, Place], axis: int,
                  lets: tuple[str, str, str, str, str], span: Span) -> tuple[ir.Stmt, ...]:
    """The log-sum-exp merge of two online-softmax partials: `mine` (m, l, acc) becomes the merge
    of itself and `theirs` (read once each). `lets` are five fresh let names; the accumulator's
    last axis is `axis`. A side whose maximum is -inf (no key took part yet) contributes nothing:
    its scale is 0, not exp(-inf + inf)."""
    m_a, m_b, m_ab, c_a, c_b = lets
    (m, l, acc), (m2, l2, acc2) = mine, theirs

    def name(n: str) -> ir.Name:
        return ir.Name(n, span)

    def scale(side: str) -> ir.Expr:
        empty = ir.BinOp("==", name(side), ir.Const(float("-inf"), span), span)
        exp = ir.Call("exp", (ir.BinOp("-", name(side), name(m_ab), span),), span)
        return ir.Call("where", (empty, ir.Const(0.0, span), exp), span)

    def times(x: ir.Expr, c: str, expand: bool = False) -> ir.Expr:
        factor: ir.Expr = name(c)
        if expand:
            factor = ir.Call("expand", (factor,), span, kwargs=(("axis", ir.Const(axis, span)),))
        return ir.BinOp("*", x, factor, span)

    return (
        ir.Let(m_a, m.read(), span),
        ir.Let(m_b, m2.read(), span),
        ir.Let(m_ab, ir.Call("max", (name(m_a), name(m_b)), span), span),
        ir.Let(c_a, scale(m_a), span),
        ir.Let(c_b, scale(m_b), span),
        l.write(ir.BinOp("+", times(l.read(), c_a), times(l2.read(), c_b), span)),
        acc.write(ir.BinOp("+", times(acc.read(), c_a, True), times(acc2.read(), c_b, True), span)),
        m.write(name(m_ab)),
    )


def sum_merge(mine: Place, theirs: Place) -> ir.Stmt:
    """The merge of two partials of a linear accumulator: they add."""
    return mine.write(ir.BinOp("+", mine.read(), theirs.read(), mine.span))


def _text_place(text: str) -> Place:
    return Place(text, UNKNOWN_SPAN)  # printed as written: a var or a whole `T[..]` slice


def softmax_merge_lines(mine: tuple[str, str, str], theirs: tuple[str, str, str], axis: int,
                        lets: tuple[str, str, str, str, str]) -> list[str]:
    """`softmax_merge` as source lines, for a caller that writes text:
    the places are written as text, vars or tensor slices."""
    stmts = softmax_merge(tuple(map(_text_place, mine)), tuple(map(_text_place, theirs)), axis, lets,
                          UNKNOWN_SPAN)
    return [line for s in stmts for line in format_stmt(s, indent="")]


def sum_merge_line(mine: str, theirs: str) -> str:
    """`sum_merge` as a source line (as softmax_merge_lines)."""
    return format_stmt(sum_merge(_text_place(mine), _text_place(theirs)), indent="")[0]


# ---- the leaves ------------------------------------------------------------------------------


def _tensor(name: str, out: ir.TensorParam, drop_last: bool = False, dtype: str = "f32") -> ir.TensorParam:
    return ir.TensorParam(name, dtype, out.dims[:-1] if drop_last else out.dims, out.span)


def _partials(out: ir.TensorParam, names: PartialNames) -> tuple[ir.TensorParam, ...]:
    return _tensor(names.m, out, True), _tensor(names.l, out, True), _tensor(names.acc, out)


def _places(names: PartialNames, tiled, span: Span) -> tuple[Place, Place, Place]:
    r, r1 = tiled_index(tiled, span), tiled_index(tiled, span, drop_last=True)
    return Place(names.m, span, r1), Place(names.l, span, r1), Place(names.acc, span, r)


def softmax_init(kernel: ir.Kernel, sm: OnlineSoftmax, out: ir.TensorParam, tiled, names: PartialNames
                 ) -> ir.Kernel:
    span = sm.store.span
    m, l, acc = _places(names, tiled, span)
    body = (m.write(ir.Const(float("-inf"), span)), l.write(ir.Const(0.0, span)),
            acc.write(ir.Const(0.0, span)))
    return generated_kernel(kernel, out, tiled, _partials(out, names), body)


def softmax_merge_leaf(kernel: ir.Kernel, sm: OnlineSoftmax, out: ir.TensorParam, tiled, names: PartialNames,
                       other: PartialNames) -> ir.Kernel:
    """(m, l, acc) <- the combination of two partials (`softmax_merge`)."""
    span = sm.store.span
    body = softmax_merge(_places(names, tiled, span), _places(other, tiled, span), len(out.dims) - 1,
                         MERGE_LETS, span)
    return generated_kernel(kernel, out, tiled, _partials(out, names) + _partials(out, other), body)


def softmax_finish(kernel: ir.Kernel, sm: OnlineSoftmax, out: ir.TensorParam, tiled, names: PartialNames
                   ) -> ir.Kernel:
    """The user's store of share 0's partial, its vars now lets read from the partial's buffers."""
    span = sm.store.span
    params = (_tensor(out.name, out, dtype=out.dtype), *_partials(out, names), *kernel.scalars)
    m, l, acc = _places(names, tiled, span)
    body = (
        ir.Let(sm.m.name, m.read(), span),
        ir.Let(sm.l.name, l.read(), span),
        ir.Let(sm.acc.name, acc.read(), span),
        ir.Store(out.name, tiled_index(tiled, span), "=", sm.store.value, span),
    )
    return generated_kernel(kernel, out, tiled, params, body)


def softmax_step(kernel: ir.Kernel, sm: OnlineSoftmax, names: PartialNames) -> ir.Kernel:
    """The user's kernel on one chunk, resuming from the partial and leaving it updated: the
    partials' buffers follow the last tensor parameter, the vars start from them, and the store
    becomes stores of the vars (at the store's span)."""
    leaf = main_leaf(kernel)
    store = sm.store
    r, r1 = store.index, store.index[:-1]
    out = next(t for t in kernel.tensors if t.name == store.tensor)
    at = leaf.params.index(kernel.tensors[-1]) + 1
    params = leaf.params[:at] + _partials(out, names) + leaf.params[at:]
    body = leaf.body
    for decl, name, index in ((sm.m, names.m, r1), (sm.l, names.l, r1), (sm.acc, names.acc, r)):
        start = ir.Load(name, index, decl.init.span)
        body = rewrite.replace_stmt(body, decl, (dataclasses.replace(decl, init=start),))
    stores = tuple(
        ir.Store(name, index, "=", ir.Name(var.name, store.span), store.span)
        for var, name, index in ((sm.m, names.m, r1), (sm.l, names.l, r1), (sm.acc, names.acc, r))
    )
    return dataclasses.replace(leaf, params=params, body=rewrite.replace_stmt(body, store, stores))


def sum_merge_leaf(kernel: ir.Kernel, store: ir.Store, out: ir.TensorParam, tiled, other: str) -> ir.Kernel:
    span = store.span
    r = tiled_index(tiled, span)
    body = (sum_merge(Place(out.name, span, r), Place(other, span, r)),)
    return generated_kernel(kernel, out, tiled, (_tensor(out.name, out), _tensor(other, out)), body)
