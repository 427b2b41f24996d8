"""Before code generation: give every dot operand that is a plain tensor load inside a loop a
name of its own, bound at the top of the loop body.

`dot(q, transpose(K[j :+ BC, :]))` inside `for j` becomes `let k_ = K[j :+ BC, :]` first in the
loop body and `dot(q, transpose(k_))`. Such a let is then a shared-memory operand like a written
one (analysis.shared_lets), so the loop prefetches it one iteration ahead into registers
(codegen.prefetch_first) and stores it with the loop's other operands behind one barrier pair,
instead of loading it from global memory right before the barrier that waits for it.

Moving the load to the top of the body keeps its meaning when nothing it reads can change in
between: its tensor is never stored by the kernel, and its index reads only names that are fixed
for the whole iteration (dims, tile names, scalar parameters, loop variables, lets bound outside
the loop). Anything else (a `var`, a let of the loop body) leaves the operand where it is.
"""

from __future__ import annotations

import dataclasses

from compiler.frontend import ir, walk

FIXED_KINDS = ("dim", "tile", "scalar", "loop")


def hoist_dot_loads(kernel: ir.Kernel) -> ir.Kernel:
    taken = {s.name for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let | ir.VarDecl)}
    taken |= {s.var for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.For)}
    taken |= {p.name for p in kernel.params}
    stored = set(walk.stored_tensors(kernel))
    hoister = _Hoister(taken, stored)
    body = hoister.body(kernel.body, outside_lets=frozenset())
    return kernel if body == kernel.body else dataclasses.replace(kernel, body=body)


class _Hoister:
    def __init__(self, taken: set[str], stored: set[str]):
        self.taken = taken
        self.stored = stored

    def fresh(self, tensor: str) -> str:
        n = 1
        while f"{tensor.lower()}_tile{n}" in self.taken:
            n += 1
        name = f"{tensor.lower()}_tile{n}"
        self.taken.add(name)
        return name

    def body(self, stmts: tuple[ir.Stmt, ...], outside_lets: frozenset[str]) -> tuple[ir.Stmt, ...]:
        """Statements outside any loop keep their operands; loops are rewritten inside."""
        out = []
        lets = set(outside_lets)
        for s in stmts:
            if isinstance(s, ir.For):
                s = self.loop(s, frozenset(lets))
            elif isinstance(s, ir.Let):
                lets.add(s.name)
            out.append(s)
        return tuple(out)

    def loop(self, f: ir.For, outside_lets: frozenset[str]) -> ir.For:
        inner_bound = {s.name for s in walk.iter_stmts(f.body) if isinstance(s, ir.Let | ir.VarDecl)}
        fixed_lets = outside_lets - inner_bound
        hoisted: list[ir.Let] = []

        def operand(e: ir.Expr) -> ir.Expr:
            transposed = isinstance(e, ir.Call) and e.func == "transpose" and len(e.args) == 1
            load = e.args[0] if transposed else e
            if not self.movable(load, fixed_lets):
                return e
            name = ir.Name(self.fresh(load.tensor), load.span, load.ty, "let")
            hoisted.append(ir.Let(name.name, load, load.span))
            return dataclasses.replace(e, args=(name,)) if transposed else name

        def rewrite(e):
            if isinstance(e, ir.Call) and e.func == "dot" and len(e.args) == 2:
                return dataclasses.replace(e, args=tuple(operand(rewrite_children(a)) for a in e.args))
            return rewrite_children(e)

        def rewrite_children(node):
            changes = {}
            for fld in dataclasses.fields(node):
                if fld.name in ("span", "ty", "declared"):
                    continue
                v = getattr(node, fld.name)
                nv = _map(v, rewrite)
                if nv is not v:
                    changes[fld.name] = nv
            return dataclasses.replace(node, **changes) if changes else node

        stmts = []
        for s in f.body:
            if isinstance(s, ir.For):
                stmts.append(s)  # its own loop, handled below with the lets bound before it
            else:
                stmts.append(rewrite_children(s))
        inner = self.body(tuple(stmts), fixed_lets)
        return dataclasses.replace(f, body=tuple(hoisted) + inner)

    def movable(self, e: ir.Expr, fixed_lets: frozenset[str]) -> bool:
        if not (isinstance(e, ir.Load) and isinstance(e.ty, ir.TileType) and e.ty.rank == 2):
            return False
        if e.tensor in self.stored:
            return False
        for x in walk.iter_exprs(e):
            if isinstance(x, ir.Name):
                if x.kind == "let" and x.name in fixed_lets:
                    continue
                if x.kind not in FIXED_KINDS:
                    return False
            elif not isinstance(x, ir.Const | ir.BinOp | ir.UnaryOp | ir.BlockIndex | ir.Load | ir.Call):
                return False
        return True


def _map(v, fn):
    """Apply fn to the IR nodes inside a field value (a node, or a tuple of nodes / pairs)."""
    if isinstance(v, tuple):
        items = tuple(_map(x, fn) for x in v)
        return v if all(a is b for a, b in zip(items, v, strict=True)) else items
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and type(v).__module__ == ir.__name__:
        if isinstance(v, ir.ScalarType | ir.TileType):
            return v
        if isinstance(v, ir.For | ir.Let | ir.VarDecl | ir.Assign | ir.Store):
            return v
        return fn(v)
    return v
