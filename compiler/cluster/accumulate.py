"""The cluster loop and the one shape it is accepted in: an accumulator.

A cluster loop is a `for` whose step is an @cluster name. Its iterations run on different
launches (one step leaf per chunk), so nothing but the accumulator may carry a value from one
iteration to the next, and the accumulator must live in the output's buffer:

    var acc: tile<f32>[..] = 0.0
    for kt in range(0, K, S) { let ..; acc += <no vars> }
    let c_old = C[r]                       (optional)
    C[r] = acc        or    C[r] = alpha * acc + beta * c_old

with alpha and beta scalar parameters or literals. The init leaf then sets C[r] to 0 or beta * C[r],
and each step leaf adds `acc` (or `alpha * acc`) of its chunk to C[r].
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.frontend import ir, walk
from compiler.frontend.affine import affine_of
from compiler.frontend.diagnostics import CompileError

SHAPE = (
    "a cluster loop (a `for` whose step is an @cluster name) is accepted only for an accumulator "
    "stored once, as `C[..] = acc` or `C[..] = alpha * acc + beta * c_old`"
)


@dataclass(frozen=True)
class Accumulator:
    loop: ir.For
    var: str  # the accumulator's name
    store: ir.Store  # the one store of the output
    alpha: ir.Expr | None  # None for `C[..] = acc`
    beta: ir.Expr | None
    beta_term: ir.Expr | None  # `beta * c_old`, replaced by `c_old` in the step leaf
    c_old: ir.Expr | None  # the operand standing for the output's old value


def _fail(span, why: str) -> CompileError:
    return CompileError(span, f"{SHAPE}: {why}")


def find_cluster_loop(kernel: ir.Kernel, cluster_names: set[str]) -> ir.For | None:
    found: ir.For | None = None
    top = set(map(id, kernel.body))
    for stmt in walk.iter_stmts(kernel.body):
        if not (
            isinstance(stmt, ir.For) and isinstance(stmt.step, ir.Name) and stmt.step.name in cluster_names
        ):
            continue
        if id(stmt) not in top:
            raise _fail(stmt.span, "this cluster loop is nested inside another loop")
        if found is not None:
            raise _fail(stmt.span, f"this is a second cluster loop (the first is at line {found.span.line})")
        found = stmt
    return found


def _is_scalar_coefficient(e: ir.Expr) -> bool:
    if isinstance(e, ir.Const):
        return not isinstance(e.value, bool)
    return isinstance(e, ir.Name) and e.kind == "scalar"


def _slice_key(index: tuple[ir.SliceItem, ...], env: dict[str, ir.Expr]):
    key = []
    for item in index:
        if isinstance(item, ir.SliceAll):
            key.append(("all",))
        elif isinstance(item, ir.SliceRange):
            key.append(("range", affine_of(item.start, env), affine_of(item.extent, env)))
        else:
            key.append(("index", affine_of(item.index, env)))
    return tuple(key)


def _check_loop_body(body: tuple[ir.Stmt, ...], acc: str) -> None:
    for stmt in body:
        if isinstance(stmt, ir.Store):
            raise _fail(stmt.span, f"the loop stores to '{stmt.tensor}'")
        if isinstance(stmt, ir.VarDecl):
            raise _fail(stmt.span, f"the loop declares the var '{stmt.name}'")
        if isinstance(stmt, ir.Assign) and not (stmt.name == acc and stmt.op == "+="):
            raise _fail(
                stmt.span,
                f"the loop may only add to the accumulator (`{acc} += ...`); "
                f"a change to '{stmt.name}' would not survive from one launch to the next",
            )
        for e in walk.iter_exprs(stmt) if not isinstance(stmt, ir.For) else (stmt.start, stmt.stop):
            for n in walk.iter_exprs(e):
                if isinstance(n, ir.Name) and n.kind == "var":
                    raise _fail(
                        n.span,
                        f"the loop reads the var '{n.name}', whose value does not carry "
                        "from one launch to the next",
                    )
        if isinstance(stmt, ir.For):
            _check_loop_body(stmt.body, acc)


def _accumulated_var(body: tuple[ir.Stmt, ...]) -> ir.Assign | None:
    for stmt in walk.iter_stmts(body):
        if isinstance(stmt, ir.Assign):
            return stmt
    return None


def _split_value(value: ir.Expr, acc: str):
    """(alpha, beta, beta_term, c_old) for the two accepted forms, or None."""
    if isinstance(value, ir.Name) and value.name == acc and value.kind == "var":
        return None, None, None, None
    if not (isinstance(value, ir.BinOp) and value.op == "+"):
        return False

    def product(e: ir.Expr):
        if isinstance(e, ir.BinOp) and e.op == "*":
            return (e.lhs, e.rhs)
        return None

    for acc_term, old_term in ((value.lhs, value.rhs), (value.rhs, value.lhs)):
        p, q = product(acc_term), product(old_term)
        if p is None or q is None:
            continue
        alpha = next(
            (
                a
                for a, b in (p, p[::-1])
                if isinstance(b, ir.Name) and b.name == acc and _is_scalar_coefficient(a)
            ),
            None,
        )
        beta, old = next(
            ((a, b) for a, b in (q, q[::-1]) if _is_scalar_coefficient(a) and not _is_scalar_coefficient(b)),
            (None, None),
        )
        if alpha is not None and beta is not None:
            return alpha, beta, old_term, old
    return False


def check_accumulator(kernel: ir.Kernel, loop: ir.For) -> Accumulator:
    body = kernel.body
    at = next(i for i, s in enumerate(body) if s is loop)
    pre, post = body[:at], body[at + 1 :]
    assign = _accumulated_var(loop.body)
    if assign is None:
        raise _fail(loop.span, "the loop adds to no accumulator")
    acc = assign.name
    _check_loop_body(loop.body, acc)
    _check_declaration(pre, assign)
    store, env = _final_store(loop, pre, post, acc)
    alpha, beta, beta_term, c_old = _stored_value_parts(store, env, acc)
    _check_output_unread(pre + (loop,) + post[:-1], store, c_old, env)
    uses = [n for s in post[:-1] for n in walk.iter_exprs(s) if isinstance(n, ir.Name) and n.name == acc]
    if uses:
        raise _fail(uses[0].span, f"the accumulator '{acc}' may only be used in the store")
    return Accumulator(
        loop=loop, var=acc, store=store, alpha=alpha, beta=beta, beta_term=beta_term, c_old=c_old
    )


def _check_declaration(pre, assign: ir.Assign) -> None:
    """Before the loop: lets, and the accumulator's declaration as a tile var starting at 0."""
    acc = assign.name
    decl = next((s for s in pre if isinstance(s, ir.VarDecl) and s.name == acc), None)
    for stmt in pre:
        if isinstance(stmt, ir.VarDecl) and stmt is not decl:
            raise _fail(stmt.span, f"'{stmt.name}' is a second var; only the accumulator may be one")
        if isinstance(stmt, ir.Store | ir.For | ir.Assign):
            raise _fail(stmt.span, "only lets and the accumulator's declaration may come before the loop")
    if decl is None or not isinstance(decl.declared, ir.TileType):
        raise _fail(assign.span, f"'{acc}' must be a tile var declared before the loop")
    if not (isinstance(decl.init, ir.Const) and decl.init.value == 0):
        raise _fail(decl.init.span, f"the accumulator '{acc}' must start at 0")


def _final_store(loop: ir.For, pre, post, acc: str) -> tuple[ir.Store, dict[str, ir.Expr]]:
    """After the loop: lets that leave the accumulator alone, then the one plain, whole-tile store
    of the output; with the lets' environment."""
    if not post or not isinstance(post[-1], ir.Store):
        raise _fail((post[-1] if post else loop).span, "the kernel must end with the one store of the output")
    store = post[-1]
    env = {s.name: s.value for s in pre + post[:-1] if isinstance(s, ir.Let)}
    for stmt in post[:-1]:
        if not isinstance(stmt, ir.Let):
            raise _fail(stmt.span, "only lets may come between the loop and the store")
        if any(isinstance(n, ir.Name) and n.name == acc for n in walk.iter_exprs(stmt.value)):
            raise _fail(stmt.span, f"the accumulator '{acc}' is used before its store")
    if store.op != "=":
        raise _fail(store.span, f"the store must be a plain `=`, not `{store.op}`")
    for item in store.index:
        if isinstance(item, ir.SliceIndex):
            raise _fail(item.span, "the store must write a whole tile (`:+` or `:` along every axis)")
    return store, env


def _stored_value_parts(store: ir.Store, env: dict[str, ir.Expr], acc: str):
    """(alpha, beta, beta_term, c_old) of the stored `alpha * acc + beta * c_old`; c_old, if
    any, must load exactly the region stored."""
    parts = _split_value(store.value, acc)
    if parts is False:
        raise _fail(store.value.span, "the stored value has another form")
    alpha, beta, beta_term, c_old = parts
    if c_old is not None:
        load = env.get(c_old.name) if isinstance(c_old, ir.Name) and c_old.kind == "let" else c_old
        if not (
            isinstance(load, ir.Load)
            and load.tensor == store.tensor
            and load.fill is None
            and _slice_key(load.index, env) == _slice_key(store.index, env)
        ):
            raise _fail(
                c_old.span,
                f"'{_describe(c_old)}' must be the output's old value, a load of exactly "
                f"the region stored, `{store.tensor}[..]`",
            )
    return alpha, beta, beta_term, c_old


def _check_output_unread(stmts, store: ir.Store, c_old, env: dict[str, ir.Expr]) -> None:
    """The output is read nowhere but as c_old: the step leaves keep a running sum in it."""
    for stmt in walk.iter_stmts(stmts):
        for e in walk.iter_exprs(stmt):
            if (
                isinstance(e, ir.Load)
                and e.tensor == store.tensor
                and (c_old is None or e is not _load_of(c_old, env))
            ):
                raise _fail(
                    e.span,
                    f"'{store.tensor}' is read here, but it holds the running sum while the "
                    "cluster loop runs",
                )


def _load_of(c_old: ir.Expr, env: dict[str, ir.Expr]) -> ir.Expr:
    return env.get(c_old.name, c_old) if isinstance(c_old, ir.Name) else c_old


def _describe(e: ir.Expr) -> str:
    return e.name if isinstance(e, ir.Name) else "this operand"


def check_running_sum(kernel: ir.Kernel, loop: ir.For) -> Accumulator:
    """A linear accumulator whose store is any expression of it (read once after the loop): the
    cluster's step leaf, `C[r] = alpha * acc + c_old` (leaves.step_leaf), is one. Such a loop
    splits over a leaf's CTAs (compiler/cuda/mainloops/split_loop/transform.py: the partials add, the store
    runs once on their sum), though not over nodes (the output must then hold the running sum). The output is
    read nowhere before the store's lets."""
    at = next(i for i, s in enumerate(kernel.body) if s is loop)
    pre, post = kernel.body[:at], kernel.body[at + 1 :]
    assign = _accumulated_var(loop.body)
    if assign is None:
        raise _fail(loop.span, "the loop adds to no accumulator")
    _check_loop_body(loop.body, assign.name)
    _check_declaration(pre, assign)
    store, _ = _final_store(loop, pre, post, assign.name)
    for stmt in pre + (loop,):
        for e in walk.iter_exprs(stmt):
            if isinstance(e, ir.Load) and e.tensor == store.tensor:
                raise _fail(e.span, f"'{store.tensor}' is read before the accumulator is stored")
    return Accumulator(loop=loop, var=assign.name, store=store, alpha=None, beta=None, beta_term=None,
                       c_old=None)
