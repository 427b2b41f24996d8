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

Then (split_operand_lets) a let of a tensor load that feeds dots which stage it differently gets
one copy per way: a tensor-core dot wants its operand in shared memory in the operand type's
layout (TF32 ones maybe rounded there), an exact-f32 dot on CUDA cores wants it K-major as f32,
and a let used as `a` by one dot and as `b` (or transposed) by another is laid out for each role.
`let x = A[...]; dot(x, w); dot(x, w, precision = f32)` becomes `let x = A[...]; let x_f32 =
A[...]` and one dot each: two loads of the same memory at the same point read the same values.

Last (fit_dots), with the binding's sizes: bf16 / f16 dots of a shape the tensor cores cannot take
are marked to run on CUDA cores (exact f32 products, as on the tensor cores).
"""

from __future__ import annotations

import dataclasses

from compiler import builtins
from compiler.frontend import ir, walk

FIXED_KINDS = ("dim", "tile", "scalar", "loop")


def hoist_dot_loads(kernel: ir.Kernel) -> ir.Kernel:
    stored = set(walk.stored_tensors(kernel))
    hoister = _Hoister(_taken_names(kernel), stored)
    body = hoister.body(kernel.body, outside_lets=frozenset())
    return kernel if body == kernel.body else dataclasses.replace(kernel, body=body)


def split_operand_lets(kernel: ir.Kernel, tf32: bool) -> ir.Kernel:
    """One let per way of staging (module doc) for lets of plain 2-D tensor loads whose every
    use is a dot operand; `tf32`: the kernel-wide TF32 override (stages.Options.tf32)."""
    from compiler.cuda import analysis, mma

    bound = [s.name for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let)]
    loads = {
        s.name for s in walk.iter_stmts(kernel.body)
        if isinstance(s, ir.Let) and bound.count(s.name) == 1 and analysis.is_plain_2d_load(s.value)
    }
    ways = {  # (tensor-core type, role, transposed) of each way, in order
        n: list(dict.fromkeys((mma.tensor_core_dtype(d, kernel, tf32), role, tr) for d, role, tr in used))
        for n, used in analysis.dot_operand_uses(kernel.body, loads).items()
    }
    taken = _taken_names(kernel)
    names: dict[tuple, str] = {}  # (let, way) -> the let that serves that way
    for n in sorted(loads):
        if len(ways.get(n, ())) > 1:
            for i, way in enumerate(ways[n]):
                names[n, way] = n if i == 0 else _fresh_name(f"{n}_{way[0] or 'f32'}{way[1]}", taken)
    if not names:
        return kernel

    def on_dot(e: ir.Call) -> ir.Call:
        dtype = mma.tensor_core_dtype(e, kernel, tf32)
        args = []
        for role, arg in zip("ab", e.args, strict=True):
            transposed = isinstance(arg, ir.Call)
            name = names.get((analysis.dot_operand_name(arg), (dtype, role, transposed)))
            if name is not None:
                inner = dataclasses.replace(arg.args[0] if transposed else arg, name=name)
                arg = dataclasses.replace(arg, args=(inner,)) if transposed else inner
            args.append(arg)
        return dataclasses.replace(e, args=tuple(args))

    def copies(let: ir.Let) -> list[ir.Stmt]:
        return [dataclasses.replace(let, name=v) for (n, _), v in names.items() if n == let.name and v != n]

    return dataclasses.replace(kernel, body=_rewrite_body(kernel.body, on_dot, copies))


def fit_dots(kernel: ir.Kernel, binding, tf32: bool) -> ir.Kernel:
    """bf16 / f16 dots whose bound shape the tensor cores cannot take (an inner extent not a
    multiple of 16, fewer than 16 rows or 8 columns: a GEMV, an outer product) run on CUDA
    cores: their products are exact in f32 there too. TF32 dots have no such fallback (the FMA
    path does not round operands): such a tile point is pruned, with the reason at the dot."""
    from compiler.cuda import mma
    from compiler.cuda.codegen import pruned

    env = dict(binding.env)

    def on_dot(e: ir.Call) -> ir.Call:
        dtype = mma.tensor_core_dtype(e, kernel, tf32)
        if dtype is None:
            return e
        m, k = (s.evaluate(env) for s in e.args[0].ty.shape)
        n = e.args[1].ty.shape[1].evaluate(env)
        step = 8 if dtype == "tf32" else 16
        if k % step == 0 and m % 16 == 0 and n % 8 == 0:
            return e
        if dtype == "tf32":
            why = (
                f"a TF32 dot runs on tensor cores, which take [M, K] x [K, N] with M a multiple of 16, "
                f"K and N of 8; this one is [{m}, {k}] x [{k}, {n}] (precision = f32 keeps it exact)"
            )
            raise pruned(kernel, binding, e.span, why)
        return dataclasses.replace(e, precision=dataclasses.replace(e.precision, mode="f32"))

    return dataclasses.replace(kernel, body=_rewrite_body(kernel.body, on_dot))


def _taken_names(kernel: ir.Kernel) -> set[str]:
    """Every name of the kernel: parameters, dims, @autotune and @cluster names, lets, vars, loop
    variables and whatever else its expressions read. A new let must avoid dims and tile names too: the
    analyses count a let's reads by name (analysis.dot_operand_uses), so a let named like a dim
    the body reads would lose its shared-memory staging (and a warpgroup-MMA or TMA schedule
    would compile as mma.sync under its own name)."""
    from compiler.frontend.binding import kernel_dims

    taken = {s.name for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let | ir.VarDecl)}
    taken |= {s.var for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.For)}
    taken |= {x.name for x in walk.iter_body_exprs(kernel.body) if isinstance(x, ir.Name)}
    taken |= {d.name for a in (kernel.autotune, kernel.cluster) if a is not None for d in a.dims}
    return taken | set(kernel_dims(kernel)) | {p.name for p in kernel.params}


def _rewrite_body(stmts: tuple[ir.Stmt, ...], on_dot, after_let=None) -> tuple[ir.Stmt, ...]:
    """Every dot of the statements (loop bodies included) through on_dot; after each let, the
    statements after_let(let) gives."""
    out: list[ir.Stmt] = []
    for s in stmts:
        new = _rewrite_dots(s, on_dot)
        if isinstance(new, ir.For):
            new = dataclasses.replace(new, body=_rewrite_body(new.body, on_dot, after_let))
        out.append(new)
        if after_let is not None and isinstance(s, ir.Let):
            out += after_let(s)
    return tuple(out)


def _fresh_name(base: str, taken: set[str], first: int | None = None) -> str:
    """The first of `base`, `base2`, `base3`, ... (from `base{first}` on when `first` is given)
    not in `taken`, which then holds it."""
    n = 1 if first is None else first
    name = base if first is None else f"{base}{n}"
    while name in taken:
        n += 1
        name = f"{base}{n}"
    taken.add(name)
    return name


class _Hoister:
    def __init__(self, taken: set[str], stored: set[str]):
        self.taken = taken
        self.stored = stored

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
            transposed = builtins.is_transpose(e) and len(e.args) == 1
            load = e.args[0] if transposed else e
            if not self.movable(load, fixed_lets):
                return e
            fresh = _fresh_name(f"{load.tensor.lower()}_tile", self.taken, first=1)
            name = ir.Name(fresh, load.span, load.ty, "let")
            hoisted.append(ir.Let(name.name, load, load.span))
            return dataclasses.replace(e, args=(name,)) if transposed else name

        def on_dot(e: ir.Call) -> ir.Call:
            return dataclasses.replace(e, args=tuple(operand(a) for a in e.args))

        stmts = []
        for s in f.body:
            if isinstance(s, ir.For):
                stmts.append(s)  # its own loop, handled below with the lets bound before it
            else:
                stmts.append(_rewrite_dots(s, on_dot))
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


def _rewrite_dots(node, on_dot):
    """`node` (a statement or an expression; a loop's body is not entered) with every dot call
    `c` in it replaced by on_dot(c), its arguments rewritten first."""
    changes = {}
    for fld in dataclasses.fields(node):
        if fld.name in ("span", "ty", "declared"):
            continue
        v = getattr(node, fld.name)
        nv = _map(v, lambda e: _rewrite_dots(e, on_dot))
        if nv is not v:
            changes[fld.name] = nv
    node = dataclasses.replace(node, **changes) if changes else node
    if builtins.is_contraction(node) and len(node.args) == 2:
        return on_dot(node)
    return node


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
