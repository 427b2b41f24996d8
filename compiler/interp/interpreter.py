"""The numpy reference interpreter: the meaning of the phobos language, and the CPU backend.

Execution model. A kernel body runs once per CTA of its grid; here it runs once in total, with
every value holding the whole grid at once (values.py: three leading grid axes x, y, z, each
the CTA count or 1, then the tile axes). `ctx.block.x` is arange(Gx) shaped [Gx, 1, 1], so a
value only carries the grid axes it actually depends on, and a `dot` of an operand depending on x
with one depending on y becomes a single large GEMM instead of one small product per CTA.

Control flow is uniform per statement; divergence between CTAs exists only in loop trip counts
(e.g. causal attention's `range(0, min(row + BR, N), BC)`). Such a loop runs to the largest trip
count, and an *active mask* (bool [gx, gy, gz]) says which CTAs are still inside it: assignments
to vars keep the old value and stores drop the elements of inactive CTAs. Inactive CTAs still
compute (and may produce inf/nan in padding); those values are never kept, so numpy's floating
warnings are silenced for the whole run.

Meaning (ir.py's docstrings): loads outside a tensor read 0 or the `fill`, stores outside are
dropped (memory.py); arithmetic is f32 whatever the storage type and stores round to nearest;
i32 `/` floors; broadcasting is explicit (equal extents or 1); compound stores read, combine and
write back the same region.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from common.errors import UserError
from compiler import builtins
from compiler.frontend import ir
from compiler.frontend.binding import Binding, scalar_value, tensor_shape
from compiler.frontend.diagnostics import CompileError
from compiler.interp import memory as mem
from compiler.interp import values as val
from compiler.interp.fusion import DotLoop, match_dot_loop

_GRID_AXES = {"x": 0, "y": 1, "z": 2}


@dataclass
class _Var:
    """A mutable variable: the one kind of name whose value changes after it is bound."""

    value: np.ndarray
    declared: ir.Type
    # True while `value` is a fresh array nothing else can see (no read of the var since it was
    # computed), so that a compound assignment may update it in place.
    owned: bool = False


@dataclass(frozen=True)
class _Launch:
    kernel: ir.Kernel
    env: Mapping[str, int]
    grid: tuple[int, int, int]
    tensors: Mapping[str, np.ndarray]
    written: frozenset[str]  # tensors the kernel stores to: loads from them must copy


_IN_PLACE = {"+=": np.add, "-=": np.subtract, "*=": np.multiply}


def _fits_in_place(target: np.ndarray, value: np.ndarray) -> bool:
    value = val.with_rank(value, val.tile_rank(target))
    return (value.dtype == target.dtype and value.ndim == target.ndim
            and np.broadcast_shapes(target.shape, value.shape) == target.shape)


def stored_tensors(body: tuple[ir.Stmt, ...]) -> frozenset[str]:
    out: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ir.Store):
            out.add(stmt.tensor)
        elif isinstance(stmt, ir.For):
            out |= stored_tensors(stmt.body)
    return frozenset(out)


def _store_binary(op: str, lhs: np.ndarray, rhs: np.ndarray, tensor: np.ndarray,
                  windows: list[mem.Window]) -> bool:
    """Store `lhs op rhs` by computing it straight into the tensor's view (mem.store_view), when
    both operands are f32, the tensor stores f32 and the store is a plain view store: the same
    values as `binary` then `store`, without the whole tile as a temporary of its own and a
    second pass copying it (an elementwise leaf's cost on a CPU pod). False: nothing written."""
    ufunc = val.F32_UFUNCS.get(op)
    if ufunc is None or not tensor.dtype == lhs.dtype == rhs.dtype == val.F32:
        return False
    rank = sum(w.keep for w in windows)
    lhs, rhs = val.with_rank(lhs, rank), val.with_rank(rhs, rank)
    try:
        shape = np.broadcast_shapes(lhs.shape, rhs.shape)
    except ValueError:
        return False  # `binary` says what is wrong
    out = mem.store_view(tensor, windows, shape)
    if out is None:
        return False
    ufunc(lhs, rhs, out=out)
    return True


def _dtype_of(ty: ir.Type) -> np.dtype:
    return val.VALUE_DTYPES[ty.dtype]


class _Runner:
    def __init__(self, launch: _Launch, scalars: Mapping[str, np.ndarray]):
        self.launch = launch
        self.globals: dict[str, np.ndarray] = {
            name: val.constant(v, val.I32) for name, v in launch.env.items()}
        self.globals.update(scalars)
        self.block = {
            axis: np.arange(launch.grid[i], dtype=val.I32).reshape(
                [launch.grid[i] if j == i else 1 for j in range(val.GRID_RANK)])
            for axis, i in _GRID_AXES.items()}
        self.dot_loops: dict[int, DotLoop | None] = {}

    # ---------------------------------------------------------------- statements

    def run_block(self, body: tuple[ir.Stmt, ...], scope: dict, active: np.ndarray | None) -> None:
        for stmt in body:
            if isinstance(stmt, ir.Let):
                scope[stmt.name] = self.eval(stmt.value, scope)
            elif isinstance(stmt, ir.VarDecl):
                scope[stmt.name] = _Var(self._conform(self.eval(stmt.init, scope), stmt.declared),
                                        stmt.declared)
            elif isinstance(stmt, ir.Assign):
                self.assign(stmt, scope, active)
            elif isinstance(stmt, ir.Store):
                self.store(stmt, scope, active)
            elif isinstance(stmt, ir.For):
                self.loop(stmt, scope, active)
            else:
                raise CompileError(stmt.span, f"the interpreter cannot run {type(stmt).__name__}")

    def _conform(self, value: np.ndarray, declared: ir.Type) -> np.ndarray:
        """Cast to the declared dtype and broadcast a scalar to the declared tile shape."""
        value = val.cast(value, _dtype_of(declared))
        if isinstance(declared, ir.TileType):
            shape = tuple(s.evaluate(self.launch.env) for s in declared.shape)
            value = val.with_rank(value, len(shape))
            target = np.broadcast_shapes(value.shape, (1,) * val.GRID_RANK + shape)
            if target != value.shape:
                value = np.broadcast_to(value, target)
        return value

    def assign(self, stmt: ir.Assign, scope: dict, active: np.ndarray | None) -> None:
        self.update(scope[stmt.name], stmt.op, self.eval(stmt.value, scope), active)

    def update(self, var: _Var, op: str, value: np.ndarray, active: np.ndarray | None) -> None:
        if op in _IN_PLACE and var.owned and active is None and _fits_in_place(var.value, value):
            # acc += dot(a, b): update the accumulator in place instead of allocating a new one
            # per iteration (same arithmetic, same dtype, same shape).
            _IN_PLACE[op](var.value, val.with_rank(value, val.tile_rank(var.value)), out=var.value)
            return
        if op != "=":
            value = val.binary(op[0], var.value, value)
        fresh = op != "=" or active is not None
        conformed = self._conform(value, var.declared)
        if active is not None:
            conformed = np.where(val.with_rank(active, val.tile_rank(conformed)), conformed, var.value)
        var.value = conformed
        var.owned = fresh and conformed is value or active is not None

    def store(self, stmt: ir.Store, scope: dict, active: np.ndarray | None) -> None:
        tensor = self.launch.tensors[stmt.tensor]
        windows = self.windows(stmt.index, tensor.shape, scope)
        if stmt.op in ir.ATOMIC_OPS:
            mem.atomic(stmt.op, tensor, windows, self.eval(stmt.value, scope), active)
            return
        if stmt.op == "=" and active is None and isinstance(stmt.value, ir.BinOp):
            lhs, rhs = self.eval(stmt.value.lhs, scope), self.eval(stmt.value.rhs, scope)
            if _store_binary(stmt.value.op, lhs, rhs, tensor, windows):
                return
            value = val.binary(stmt.value.op, lhs, rhs)
        else:
            value = self.eval(stmt.value, scope)
        if stmt.op != "=":
            old = mem.load(tensor, windows, val.constant(0, mem.value_dtype(tensor)), private=True)
            value = val.binary(stmt.op[0], old, value)
        mem.store(tensor, windows, value, active)

    def loop(self, stmt: ir.For, scope: dict, active: np.ndarray | None) -> None:
        start = self.eval(stmt.start, scope).astype(np.int64)
        stop = self.eval(stmt.stop, scope).astype(np.int64)
        step = self.size(stmt.step, scope, "loop step")
        if step <= 0:
            raise CompileError(stmt.step.span, f"loop step must be positive, got {step}")
        trips = np.maximum(0, -(-(stop - start) // step))
        uniform = trips.size == 1 or bool(np.all(trips == trips.reshape(-1)[0]))
        count = int(trips.max()) if trips.size else 0
        if uniform and count > 0 and self.fused_dot_loop(stmt, scope, active, start, step, count):
            return
        for t in range(count):
            inner = dict(scope)
            index = start + t * step
            inner[stmt.var] = index.astype(val.I32)
            inner_active = active
            if not uniform:
                inside = t < trips
                inner_active = inside if active is None else active & inside
            self.run_block(stmt.body, inner, inner_active)

    def fused_dot_loop(self, stmt: ir.For, scope: dict, active: np.ndarray | None, start: np.ndarray,
                       step: int, count: int) -> bool:
        """Run a loop that only accumulates a dot as one large dot (compiler/interp/fusion.py); False when
        the loop does not have that shape."""
        key = id(stmt)  # the kernel outlives the run, so ids are stable; hashing a subtree is not cheap
        if key not in self.dot_loops:
            self.dot_loops[key] = match_dot_loop(stmt)
        shape = self.dot_loops[key]
        if shape is None or not isinstance(scope.get(shape.var), _Var):
            return False
        inner = dict(scope)
        inner[stmt.var] = start.astype(val.I32)
        operands = []
        for load, item in ((shape.lhs, shape.lhs_item), (shape.rhs, shape.rhs_item)):
            tensor = self.launch.tensors[load.tensor]
            windows = self.windows(load.index, tensor.shape, inner)
            if windows[item].extent != step:
                return False  # chunks that overlap or leave gaps: not a plain sum over K
            windows[item] = mem.Window(windows[item].start, count * step)
            operands.append(self.load_windows(load, tensor, windows, inner))
        self.update(scope[shape.var], "+=", val.dot(*operands, shape.mode), active)
        return True

    # ---------------------------------------------------------------- expressions

    def size(self, expr: ir.Expr, scope: dict, what: str) -> int:
        try:
            return val.as_int(self.eval(expr, scope), what)
        except ValueError as err:
            raise CompileError(expr.span, str(err)) from None

    def windows(self, index: tuple[ir.SliceItem, ...], dims: tuple[int, ...],
                scope: dict) -> list[mem.Window]:
        out = []
        for item, dim in zip(index, dims, strict=True):
            if isinstance(item, ir.SliceRange):
                start = self.eval(item.start, scope)
                out.append(mem.Window(start, self.size(item.extent, scope, "slice extent")))
            elif isinstance(item, ir.SliceIndex):
                out.append(mem.Window(self.eval(item.index, scope), 1, keep=False))
            else:
                out.append(mem.Window(val.constant(0, val.I32), dim))
        return out

    def eval(self, expr: ir.Expr, scope: dict) -> np.ndarray:
        if isinstance(expr, ir.BinOp):
            return val.binary(expr.op, self.eval(expr.lhs, scope), self.eval(expr.rhs, scope))
        if isinstance(expr, ir.Name):
            found = scope.get(expr.name)
            if found is None:
                found = self.globals.get(expr.name)
                if found is None:
                    raise CompileError(expr.span, f"unknown name {expr.name}")
            if isinstance(found, _Var):
                found.owned = False  # whoever reads it may keep a reference (let, view, ...)
                return found.value
            return found
        if isinstance(expr, ir.Const):
            return self.const(expr)
        if isinstance(expr, ir.Load):
            return self.load(expr, scope)
        if isinstance(expr, ir.Call):
            return self.call(expr, scope)
        if isinstance(expr, ir.BlockIndex):
            return self.block[expr.axis]
        if isinstance(expr, ir.UnaryOp):
            operand = self.eval(expr.operand, scope)
            return val.logical_not(operand) if expr.op == "not" else val.negate(operand)
        raise CompileError(expr.span, f"the interpreter cannot evaluate {type(expr).__name__}")

    def const(self, expr: ir.Const) -> np.ndarray:
        if expr.ty is not None:
            dtype = _dtype_of(expr.ty)
        elif isinstance(expr.value, bool):
            dtype = val.BOOL
        else:
            dtype = val.I32 if isinstance(expr.value, int) else val.F32
        return val.constant(expr.value, dtype)

    def load(self, expr: ir.Load, scope: dict) -> np.ndarray:
        tensor = self.launch.tensors[expr.tensor]
        return self.load_windows(expr, tensor, self.windows(expr.index, tensor.shape, scope), scope)

    def load_windows(self, expr: ir.Load, tensor: np.ndarray, windows: list[mem.Window],
                     scope: dict) -> np.ndarray:
        dtype = mem.value_dtype(tensor)
        fill = val.constant(0, dtype) if expr.fill is None else val.cast(self.eval(expr.fill, scope), dtype)
        if expr.ty is not None and expr.ty.dtype in ir.NARROW_FLOATS:
            fill = val.round_to(expr.ty.dtype, fill)  # a bf16 tile holds only bf16 values
        return mem.load(tensor, windows, fill, private=expr.tensor in self.launch.written)

    def call(self, expr: ir.Call, scope: dict) -> np.ndarray:
        return builtins.lookup(expr.func).interp(self, expr, scope)


def scalar_arguments(kernel: ir.Kernel, scalars: Mapping[str, float | int]) -> dict[str, float | int]:
    """Check the scalar arguments against the kernel's scalar parameters and give each its type
    (binding.scalar_value: an i32 parameter takes only whole numbers that fit)."""
    params = {p.name: p for p in kernel.scalars}
    for name in scalars:
        if name not in params:
            known = ", ".join(params) or "none"
            raise UserError(f"kernel {kernel.name} has no scalar parameter {name} (it has: {known})")
    out: dict[str, float | int] = {}
    for name, p in params.items():
        if name not in scalars:
            raise UserError(f"missing scalar {name} for kernel {kernel.name}")
        out[name] = scalar_value(name, scalars[name], p.dtype)
    return out


def _scalar_values(kernel: ir.Kernel, scalars: Mapping[str, float | int]) -> dict[str, np.ndarray]:
    typed = scalar_arguments(kernel, scalars)
    dtypes = {p.name: val.VALUE_DTYPES[p.dtype] for p in kernel.scalars}
    return {name: val.constant(v, dtypes[name]) for name, v in typed.items()}


def _check_tensors(kernel: ir.Kernel, binding: Binding, tensors: Mapping[str, np.ndarray]) -> None:
    outputs = stored_tensors(kernel.body)
    for p in kernel.tensors:
        if p.name not in tensors:
            raise UserError(f"missing tensor {p.name} for kernel {kernel.name}")
        array = tensors[p.name]
        expected = tensor_shape(p, binding.env)
        if tuple(array.shape) != expected:
            raise UserError(f"tensor {p.name}: expected shape {expected}, got {tuple(array.shape)}")
        if array.dtype != val.STORAGE_DTYPES[p.dtype]:
            raise UserError(f"tensor {p.name}: the kernel expects {p.dtype}, got an array of {array.dtype}")
        if p.name in outputs and not array.flags.writeable:
            raise UserError(f"tensor {p.name}: the kernel stores to it, but the array is read-only")


def _written(kernel: ir.Kernel, tensors: Mapping[str, np.ndarray]) -> frozenset[str]:
    """Tensors whose contents a store may change: those stored to, and any sharing memory with
    one of them (a load from those must copy rather than view)."""
    stored = stored_tensors(kernel.body)
    return frozenset(name for name, array in tensors.items()
                     if name in stored or any(np.may_share_memory(array, tensors[s]) for s in stored))


def grid_shape(kernel: ir.Kernel, binding: Binding) -> tuple[int, int, int]:
    """CTA counts along x, y, z (1 along axes the kernel's grid does not use)."""
    counts = [1, 1, 1]
    for axis, count in zip(kernel.grid, binding.grid, strict=True):
        counts[_GRID_AXES[axis.axis]] = count
    return counts[0], counts[1], counts[2]


def run_kernel(kernel: ir.Kernel, binding: Binding, tensors: dict[str, np.ndarray],
               scalars: Mapping[str, float | int]) -> None:
    """Run `kernel` over its whole grid, writing its stores into `tensors` in place."""
    _check_tensors(kernel, binding, tensors)
    launch = _Launch(kernel, binding.env, grid_shape(kernel, binding), tensors, _written(kernel, tensors))
    runner = _Runner(launch, _scalar_values(kernel, scalars))
    if 0 in launch.grid:
        return
    with np.errstate(all="ignore"):
        runner.run_block(kernel.body, {}, None)
