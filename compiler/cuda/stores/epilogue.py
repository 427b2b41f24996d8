"""The epilogue stage: a top-level 2-D let computed element by element from what the loops left
(`let z = acc + expand(bias[...], axis = 0)`) and read once, by the next statements' store or
let, is written into that use instead of being held as a tile of its own.

Why: a let is a register tile. Beside the accumulator it doubles what a thread holds after the
loop (128 x 256 accumulators over 256 threads: 128 values, the let another 128), and the emitter
prunes the point for its register budget, although nothing holds both at once. Written into its
use, each element is computed where it is stored: the same operations on the same values in the
same order (the language's meaning is per element: the let's element i is its expression at i),
so the result is bit for bit the let's.

A let is written into its use only when that changes nothing else: its value is element-wise
(constants, names, loads, element-wise operations and calls, `expand` of such), its one use is
in a top-level store's value or let's value after it, no loop lies between, nothing between
assigns a name it reads or rebinds its name, and no store from it up to its use (that one
included) writes a tensor it loads.
"""

from __future__ import annotations

import dataclasses

from compiler import builtins
from compiler.frontend import ir, rewrite, walk


def inline_epilogue_lets(kernel: ir.Kernel) -> ir.Kernel:
    body = kernel.body
    changed = True
    while changed:
        changed = False
        for i, s in enumerate(body):
            j = _single_use(body, i) if _candidate(s) else None
            if j is None:
                continue
            use = body[j]
            name_node = next(e for e in walk.iter_exprs(use) if isinstance(e, ir.Name) and e.name == s.name)
            new_use = rewrite.replace_expr((use,), name_node, s.value)[0]
            body = body[:i] + body[i + 1 : j] + (new_use,) + body[j + 1 :]
            changed = True
            break
    return kernel if body is kernel.body else dataclasses.replace(kernel, body=body)


def _candidate(s: ir.Stmt) -> bool:
    return (isinstance(s, ir.Let) and isinstance(s.value.ty, ir.TileType) and s.value.ty.rank == 2
            and _elementwise(s.value))


def _elementwise(e: ir.Expr) -> bool:
    if isinstance(e, ir.Const | ir.Name | ir.BlockIndex):
        return True
    if isinstance(e, ir.Load):
        return e.fill is None or isinstance(e.fill, ir.Const)
    if isinstance(e, ir.BinOp):
        return _elementwise(e.lhs) and _elementwise(e.rhs)
    if isinstance(e, ir.UnaryOp):
        return _elementwise(e.operand)
    if builtins.is_broadcast(e):
        return _elementwise(e.args[0])
    return builtins.is_elementwise(e) and all(_elementwise(a) for a in e.args)


def _uses(node, name: str) -> int:
    return sum(1 for e in walk.iter_exprs(node) if isinstance(e, ir.Name) and e.name == name)


def _single_use(body: tuple[ir.Stmt, ...], i: int) -> int | None:
    """The index of the one top-level statement after body[i] that reads its let, where the let
    may be written into it; None otherwise."""
    let = body[i]
    rest = body[i + 1 :]
    counts = [_uses(s, let.name) if not isinstance(s, ir.For) else _for_uses(s, let.name) for s in rest]
    if sum(counts) != 1:
        return None
    j = counts.index(1)
    use = rest[j]
    if not isinstance(use, ir.Store | ir.Let) or _uses(use.value, let.name) != 1:
        return None
    reads = {e.name for e in walk.iter_exprs(let.value) if isinstance(e, ir.Name)}
    loads = {e.tensor for e in walk.iter_exprs(let.value) if isinstance(e, ir.Load)}
    for s in rest[: j + 1]:
        if isinstance(s, ir.For | ir.VarDecl):
            return None
        if isinstance(s, ir.Assign) and s.name in reads or isinstance(s, ir.Let) and s.name == let.name:
            return None
        if isinstance(s, ir.Store) and s.tensor in loads:
            return None
    return i + 1 + j


def _for_uses(s: ir.For, name: str) -> int:
    """Uses inside a loop count twice: a let read in a loop is never written into it."""
    return 2 if any(isinstance(e, ir.Name) and e.name == name for e in walk.iter_body_exprs((s,))) else 0
