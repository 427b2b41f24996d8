"""The second shape a cluster loop is accepted in: an online softmax, as examples/flash_attention.phk
writes it.

    var m: tile<f32>[R] = -inf               the running maximum
    var l: tile<f32>[R] = 0.0                the running sum
    var acc: tile<f32>[R, D] = 0.0           the accumulator
    for j in range(0, N, S) {
      let ..                                 (reading no var)
      let m_new = max(m, <no var>)
      let correction = exp(m - m_new)
      l = l * correction + <no var>
      acc = acc * expand(correction, axis = 1) + <no var>
      m = m_new
    }
    O[r] = <acc, l, m, scalars and literals only>

A part of the loop's chunks gives a partial (m, l, acc) unnormalised; two partials combine by the
log-sum-exp rule (m = max(m1, m2), each side's l and acc scaled by exp(m_i - m)), so chunks may run
on different launches and nodes in any grouping, and the store runs once on the combined partial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.frontend import ir, walk


@dataclass(frozen=True)
class OnlineSoftmax:
    loop: ir.For
    m: ir.VarDecl
    l: ir.VarDecl
    acc: ir.VarDecl
    store: ir.Store  # the one store of the output, after the loop (resumed: acc's store)
    rank: int  # rank of m and l; acc has one axis more, the store's last
    resumed: tuple[ir.Store, ...] = ()  # a resumed partial's stores of m, l, acc (below)
    beta = None  # as for an accumulator without `beta * c_old`: the output's old value is never read


class NotSoftmax(Exception):
    """Why a loop is not an online softmax, and where (turned into the user's error by the caller)."""

    def __init__(self, span, why: str):
        super().__init__(why)
        self.span, self.why = span, why


def _is_const(e: ir.Expr, value: float) -> bool:
    return isinstance(e, ir.Const) and not e.origin and not isinstance(e.value, bool) and e.value == value


def _var(e: ir.Expr, name: str) -> bool:
    return isinstance(e, ir.Name) and e.kind == "var" and e.name == name


def _let_value(e: ir.Expr, env: dict[str, ir.Expr]) -> ir.Expr:
    while isinstance(e, ir.Name) and e.kind == "let" and e.name in env:
        e = env[e.name]
    return e


def _rank(decl: ir.VarDecl) -> int:
    return len(decl.declared.shape) if isinstance(decl.declared, ir.TileType) else 0


def _decls(pre: tuple[ir.Stmt, ...], loop: ir.For) -> tuple[ir.VarDecl, ir.VarDecl, ir.VarDecl]:
    decls = [s for s in pre if isinstance(s, ir.VarDecl)]
    for stmt in pre:
        if isinstance(stmt, ir.Store | ir.For | ir.Assign):
            raise NotSoftmax(stmt.span, "only lets and the three vars' declarations may come before the loop")
    m = [d for d in decls if _is_const(d.init, -math.inf)]
    zeros = [d for d in decls if _is_const(d.init, 0)]
    if len(decls) != 3 or len(m) != 1 or len(zeros) != 2:
        raise NotSoftmax(
            (decls[0] if decls else loop).span,
            f"it needs exactly three vars before the loop, a running maximum starting at -inf and a "
            f"running sum and an accumulator starting at 0 (found {len(decls)} var(s))",
        )
    m = m[0]
    l, acc = sorted(zeros, key=_rank)
    if not all(isinstance(d.declared, ir.TileType) for d in (m, l, acc)) or not (
        _rank(m) == _rank(l) and _rank(acc) == _rank(m) + 1
    ):
        raise NotSoftmax(
            acc.span, f"'{acc.name}' must be a tile with one axis more than '{m.name}' and '{l.name}'"
        )
    return m, l, acc


def _assignments(loop: ir.For, names: set[str]) -> dict[str, ir.Assign]:
    found: dict[str, ir.Assign] = {}
    for stmt in loop.body:
        if isinstance(stmt, ir.Store | ir.VarDecl | ir.For):
            raise NotSoftmax(stmt.span, "its loop may hold only lets and the three vars' updates")
        if isinstance(stmt, ir.Assign):
            if stmt.name not in names or stmt.name in found or stmt.op != "=":
                raise NotSoftmax(stmt.span, f"'{stmt.name}' is updated other than once with `=`")
            found[stmt.name] = stmt
    for name in sorted(names - set(found)):
        raise NotSoftmax(loop.span, f"the loop never updates '{name}'")
    return found


def _sum_of(e: ir.Expr) -> tuple[ir.Expr, ir.Expr] | None:
    return (e.lhs, e.rhs) if isinstance(e, ir.BinOp) and e.op == "+" else None


def _scaled(e: ir.Expr, var: str, env) -> ir.Expr | None:
    """`var * c` or `c * var`: the factor c."""
    if isinstance(e, ir.BinOp) and e.op == "*":
        for a, b in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            if _var(a, var):
                return b
    return None


def _correction_of(factor: ir.Expr, m: str, m_new: ir.Expr, env) -> bool:
    """`factor` is `exp(m - m_new)` (through lets), m_new the same let or expression."""
    value = _let_value(factor, env)
    if not (isinstance(value, ir.Call) and value.func == "exp" and len(value.args) == 1):
        return False
    diff = value.args[0]
    return (
        isinstance(diff, ir.BinOp)
        and diff.op == "-"
        and _var(diff.lhs, m)
        and _let_value(diff.rhs, env) is _let_value(m_new, env)
    )


def check_online_softmax(kernel: ir.Kernel, loop: ir.For) -> OnlineSoftmax:
    """The loop's online softmax, or NotSoftmax saying why it is not one."""
    body = kernel.body
    at = next(i for i, s in enumerate(body) if s is loop)
    pre, post = body[:at], body[at + 1 :]
    m, l, acc = _decls(pre, loop)
    decls = (m, l, acc)
    return _checked_loop(kernel, loop, pre, decls, lambda: _check_store(kernel, post, loop, decls))


def check_resumed_softmax(kernel: ir.Kernel, loop: ir.For) -> OnlineSoftmax:
    """A loop that resumes an online softmax from a partial and leaves the partial updated (the
    cluster's step leaf, partial_leaves.softmax_step): the three vars start from any values (the
    partial's), the loop is the online softmax's, and exactly the three stores `T[..] = var` of
    the vars follow it, acc's a whole tile. Its chunks split as the plain form's do, starting at
    the identity, and merge into the vars' starting values. NotSoftmax when it is not one."""
    body = kernel.body
    at = next(i for i, s in enumerate(body) if s is loop)
    pre, post = body[:at], body[at + 1 :]
    m, l, acc = _resumed_decls(pre, loop)
    sm = _checked_loop(kernel, loop, pre, (m, l, acc), lambda: None)
    stores = _resumed_stores(post, loop, (m, l, acc))
    written = {s.tensor for s in stores}
    for e in walk.iter_exprs(loop):
        if isinstance(e, ir.Load) and e.tensor in written:
            raise NotSoftmax(e.span, f"the loop reads '{e.tensor}', which the partial's stores write")
    return OnlineSoftmax(loop=loop, m=m, l=l, acc=acc, store=stores[2], rank=sm.rank, resumed=stores)


def _resumed_decls(pre, loop: ir.For) -> tuple[ir.VarDecl, ir.VarDecl, ir.VarDecl]:
    decls = [s for s in pre if isinstance(s, ir.VarDecl)]
    if len(decls) != 3 or any(isinstance(s, ir.Store | ir.For | ir.Assign) for s in pre):
        raise NotSoftmax(loop.span, "a resumed partial needs exactly three vars and lets before the loop")
    grows = {a.name for a in loop.body if isinstance(a, ir.Assign) and isinstance(a.value, ir.Name)}
    m = [d for d in decls if d.name in grows]
    if len(m) != 1:
        raise NotSoftmax(loop.span, "a resumed partial needs one running maximum, updated `m = m_new`")
    l, acc = sorted((d for d in decls if d is not m[0]), key=_rank)
    return m[0], l, acc


def _resumed_stores(post, loop: ir.For, decls) -> tuple[ir.Store, ir.Store, ir.Store]:
    stores = {}
    for stmt in post:
        if not (isinstance(stmt, ir.Store) and stmt.op == "=" and isinstance(stmt.value, ir.Name)
                and stmt.value.kind == "var" and stmt.value.name not in stores):
            raise NotSoftmax(stmt.span, "only the three vars' stores may follow a resumed partial's loop")
        stores[stmt.value.name] = stmt
    if set(stores) != {d.name for d in decls}:
        raise NotSoftmax(loop.span, "each of the three vars is stored once after a resumed partial's loop")
    acc = stores[decls[2].name]
    if len(acc.index) != _rank(decls[2]) or any(isinstance(i, ir.SliceIndex) for i in acc.index):
        raise NotSoftmax(acc.span, f"the store must write one whole tile the shape of '{decls[2].name}'")
    return tuple(stores[d.name] for d in decls)


def _checked_loop(kernel: ir.Kernel, loop: ir.For, pre, decls, check_store) -> OnlineSoftmax:
    """The loop's updates checked for the online softmax's form, then `check_store()`."""
    m, l, acc = decls
    updates = _assignments(loop, {m.name, l.name, acc.name})
    env: dict[str, ir.Expr] = {s.name: s.value for s in pre if isinstance(s, ir.Let)}
    order = {id(s): i for i, s in enumerate(loop.body)}
    for stmt in loop.body:
        if isinstance(stmt, ir.Let):
            env[stmt.name] = stmt.value
    allowed = _check_max(updates[m.name], m.name, env)
    m_new = updates[m.name].value
    allowed |= _check_rescaled(updates[l.name], l.name, m.name, m_new, env, expand_axis=None)
    allowed |= _check_rescaled(updates[acc.name], acc.name, m.name, m_new, env, expand_axis=_rank(m))
    for name in (l.name, acc.name):
        if order[id(updates[name])] > order[id(updates[m.name])]:
            raise NotSoftmax(
                updates[name].span,
                f"'{name}' is rescaled after '{m.name}' is updated, so its correction would use "
                "the new maximum",
            )
    _check_no_other_var_reads(loop, allowed, m.name, order[id(updates[m.name])])
    store = check_store()
    return OnlineSoftmax(loop=loop, m=m, l=l, acc=acc, store=store, rank=_rank(m))


def _check_max(assign: ir.Assign, m: str, env) -> set[int]:
    value = _let_value(assign.value, env)
    if isinstance(value, ir.Call) and value.func == "max" and len(value.args) == 2 and not value.kwargs:
        for a, _ in ((value.args[0], value.args[1]), (value.args[1], value.args[0])):
            if _var(a, m):
                return {id(a)}
    raise NotSoftmax(assign.span, f"'{m}' must grow as a running maximum, `{m} = max({m}, ..)`")


def _check_rescaled(assign: ir.Assign, var: str, m: str, m_new: ir.Expr, env, expand_axis) -> set[int]:
    """`var = var * correction + <new part>` (the accumulator's correction expanded along its last
    axis); the ids of the var reads this form allows."""
    terms = _sum_of(assign.value)
    scale = "correction" if expand_axis is None else f"expand(correction, axis = {expand_axis})"
    form = f"`{var} = {var} * {scale} + ..` with `correction = exp({m} - m_new)`"
    if terms is None:
        raise NotSoftmax(assign.value.span, f"'{var}' must be rescaled when the maximum grows, {form}")
    for old, _ in (terms, terms[::-1]):
        factor = _scaled(old, var, env)
        if factor is None:
            continue
        if expand_axis is not None:
            f = _let_value(factor, env)
            kw = dict(f.kwargs) if isinstance(f, ir.Call) else {}
            if not (isinstance(f, ir.Call) and f.func == "expand" and _is_const(kw.get("axis"), expand_axis)):
                raise NotSoftmax(factor.span, f"'{var}' must be rescaled by the correction expanded, {form}")
            factor = f.args[0]
        if not _correction_of(factor, m, m_new, env):
            raise NotSoftmax(factor.span, f"'{var}' is scaled by something other than the correction, {form}")
        reads = [e for e in walk.iter_exprs(_let_value(factor, env)) if _var(e, m)]
        return {id(old.lhs if _var(old.lhs, var) else old.rhs)} | {id(e) for e in reads}
    raise NotSoftmax(assign.value.span, f"'{var}' must be rescaled when the maximum grows, {form}")


def _check_no_other_var_reads(loop: ir.For, allowed: set[int], m: str, m_update: int) -> None:
    """Every var read in the loop is one the form allows: a chunk's partial depends on the vars
    only through the running maximum, its correction and the rescaled terms; and the old maximum
    is read before it is updated."""
    for i, stmt in enumerate(loop.body):
        for e in walk.iter_exprs(stmt):
            if not (isinstance(e, ir.Name) and e.kind == "var"):
                continue
            if id(e) not in allowed:
                raise NotSoftmax(
                    e.span,
                    f"the loop reads the var '{e.name}' outside the running maximum, its correction and "
                    "the rescaled terms, so its value would not combine across nodes",
                )
            if e.name == m and i > m_update:
                raise NotSoftmax(e.span, f"'{m}' is read after it is updated, so the correction is 1")


def _check_store(kernel: ir.Kernel, post, loop: ir.For, decls) -> ir.Store:
    names = {d.name for d in decls}
    if len(post) != 1 or not isinstance(post[0], ir.Store):
        where = post[0] if post else loop
        raise NotSoftmax(where.span, "only the one store of the output may follow the loop")
    store = post[0]
    if store.op != "=":
        raise NotSoftmax(store.span, f"the store must be a plain `=`, not `{store.op}`")
    if len(store.index) != _rank(decls[2]) or any(isinstance(i, ir.SliceIndex) for i in store.index):
        raise NotSoftmax(store.span, f"the store must write one whole tile the shape of '{decls[2].name}'")
    for e in walk.iter_exprs(store.value):
        if isinstance(e, ir.Name) and not (e.kind in ("scalar", "tile", "dim") or e.name in names):
            raise NotSoftmax(
                e.span,
                f"the stored value may use only '{decls[2].name}', '{decls[1].name}', "
                f"'{decls[0].name}', scalars and literals, not '{e.name}'",
            )
        if isinstance(e, ir.Load | ir.BlockIndex) or (isinstance(e, ir.Const) and e.origin):
            raise NotSoftmax(e.span, "the stored value may not read a tensor or a position")
    for stmt in walk.iter_stmts(kernel.body[:-1]):
        for e in walk.iter_exprs(stmt):
            if isinstance(e, ir.Load) and e.tensor == store.tensor:
                raise NotSoftmax(e.span, f"'{store.tensor}' is read before the partials are combined")
    return store
