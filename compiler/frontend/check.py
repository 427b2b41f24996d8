"""The check stage: an unchecked ir.Module -> a checked one.

It validates attributes and parameters, resolves every name (filling Name.kind), types every
expression (filling `ty`, with symbolic `Size` shapes), checks shapes and assignments, and
derives each kernel's launch grid from its grid-defining slices (`ctx.block.x * T :+ T`).
Every mistake is a CompileError at the most specific span.
"""

from __future__ import annotations

import dataclasses

from common import dtypes
from compiler import builtins
from compiler.builtins import call_type, check_signature
from compiler.frontend import check_fp8, ir
from compiler.frontend.affine import affine_of
from compiler.frontend.check_atomics import check_atomic_targets, check_atomic_value
from compiler.frontend.check_calls import dot_precision
from compiler.frontend.check_header import Symbol, check_header, word_span
from compiler.frontend.check_types import (
    FLOATS,
    INTEGERS,
    Shapes,
    adopt_all,
    check_assignable_dtype,
    describe,
    make_type,
    promote,
    widened,
)
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import BOOL, F32, I32, ScalarType, Size, TileType
from compiler.frontend.parser import UncheckedTileType
from compiler.frontend.source import Span

AXES = ("x", "y", "z")
ORDERING = ("<", "<=", ">", ">=")
# calls whose (last two) arguments are combined elementwise: an integer literal among them takes
# the other's integer type
def check(module: ir.Module) -> ir.Module:
    seen: dict[str, ir.Kernel] = {}
    kernels = []
    for kernel in module.kernels:
        if kernel.name in seen:
            raise CompileError(
                word_span(module.text, kernel.span, kernel.name, after="kernel"),
                f"kernel '{kernel.name}' is defined twice",
            )
        seen[kernel.name] = kernel
        kernels.append(check_kernel(kernel, module.text))
    return dataclasses.replace(module, kernels=tuple(kernels))


def check_kernel(kernel: ir.Kernel, text: str) -> ir.Kernel:
    """One kernel checked; `text` is the source its spans point into (for errors that find a
    word inside a span). Checking a checked kernel again gives the same kernel, so the cluster
    compiler checks the leaves it rewrites from a checked kernel without printing or parsing them."""
    return _KernelChecker(kernel, text).run()


class _KernelChecker:
    def __init__(self, kernel: ir.Kernel, text: str):
        self.kernel = kernel
        self.text = text
        self.tensors: dict[str, ir.TensorParam] = {}
        self.scopes: list[dict[str, Symbol]] = [{}]
        self.grid: dict[str, ir.GridAxis] = {}
        self.grid_indices: dict[str, list[ir.GridAxis]] = {}  # ties by grid indices (see finish_grid)
        self.f32_dots: list[ir.DotPrecision] = []
        self.block_uses: dict[str, Span] = {}
        self.shapes = Shapes({})

    # ---- kernel header ----------------------------------------------------------------------

    def run(self) -> ir.Kernel:
        k = self.kernel
        header = check_header(k, self.text)
        self.tensors = header.tensors
        self.scopes = [dict(header.symbols)]
        self.shapes = Shapes(header.fixed)
        body = self.block(k.body)
        check_atomic_targets(body)
        grid = self.finish_grid()
        self.check_precision_used()
        return dataclasses.replace(k, body=body, grid=grid)

    # ---- scopes -----------------------------------------------------------------------------

    def lookup(self, name: str) -> Symbol | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def declare(self, name: str, symbol: Symbol) -> None:
        if name in self.tensors:
            raise CompileError(symbol.span, f"'{name}' is already a tensor parameter")
        old = self.lookup(name)
        if old is not None:
            what = {"dim": "a dimension", "tile": "a tile name", "scalar": "a parameter"}.get(
                old.kind, f"a {old.kind}"
            )
            raise CompileError(
                symbol.span,
                f"'{name}' is already {what} in scope (line {old.span.line}); "
                "names cannot be redeclared or shadowed",
            )
        self.scopes[-1][name] = symbol

    def let_env(self) -> dict[str, ir.Expr]:
        return {n: s.value for scope in self.scopes for n, s in scope.items() if s.kind == "let"}

    # ---- statements -------------------------------------------------------------------------

    def block(self, body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return tuple(self.statement(s) for s in body)

    def statement(self, s: ir.Stmt) -> ir.Stmt:
        if isinstance(s, ir.Let):
            value = self.expr(s.value)
            self.declare(s.name, Symbol("let", value.ty, word_span(self.text, s.span, s.name, "let"), value))
            return dataclasses.replace(s, value=value)
        if isinstance(s, ir.VarDecl):
            declared = self.declared_type(s.declared)
            init = self.expr(s.init)
            check_fp8.refuse(init, f"var '{s.name}'")
            self.assignable(declared, init, f"var '{s.name}'")
            self.declare(s.name, Symbol("var", declared, word_span(self.text, s.span, s.name, "var")))
            return dataclasses.replace(s, declared=declared, init=init)
        if isinstance(s, ir.Assign):
            return self.assign(s)
        if isinstance(s, ir.Store):
            return self.store(s)
        if isinstance(s, ir.For):
            return self.for_loop(s)
        raise AssertionError(f"unknown statement {type(s).__name__}")

    def declared_type(self, declared: ir.Type) -> ir.Type:
        if isinstance(declared, UncheckedTileType):
            shape = tuple(self.size_of(self.expr(e), "a tile extent") for e in declared.shape)
            return TileType(declared.dtype, shape)
        return declared

    def assignable(self, target: ir.Type, value: ir.Expr, what: str) -> None:
        vt = value.ty
        check_assignable_dtype(target.dtype, value, f"{what} is {describe(target)}")
        if isinstance(vt, TileType):
            if not isinstance(target, TileType) or not self.shapes.same_shape(target.shape, vt.shape):
                raise CompileError(
                    value.span, f"shape mismatch: {what} is {describe(target)}; cannot assign {describe(vt)}"
                )

    def assign(self, s: ir.Assign) -> ir.Assign:
        target_span = Span(s.span.file, s.span.line, s.span.col, s.span.line, s.span.col + len(s.name))
        symbol = self.lookup(s.name)
        if symbol is None:
            if s.name in self.tensors:
                raise CompileError(
                    target_span,
                    f"cannot assign to tensor '{s.name}' as a whole; "
                    f"store into a slice, as in {s.name}[i :+ B] = ...",
                )
            raise CompileError(target_span, f"unknown name '{s.name}'")
        if symbol.kind != "var":
            what = {
                "let": "a let (immutable; declare it with var to assign)",
                "loop": "a loop variable",
                "scalar": "a parameter",
                "dim": "a dimension",
                "tile": "a tile name",
            }[symbol.kind]
            raise CompileError(target_span, f"cannot assign to '{s.name}': it is {what}")
        value = self.expr(s.value)
        check_fp8.refuse(value, f"var '{s.name}'")
        if s.op != "=":
            current = ir.Name(s.name, target_span, symbol.ty, "var")
            combined = ir.BinOp(
                s.op[0], current, value, s.span, self.binop_type(s.op[0], current, value, s.span)
            )
            self.assignable(symbol.ty, dataclasses.replace(combined, span=value.span), f"var '{s.name}'")
        else:
            self.assignable(symbol.ty, value, f"var '{s.name}'")
        return dataclasses.replace(s, value=value)

    def store(self, s: ir.Store) -> ir.Store:
        tensor_span = Span(s.span.file, s.span.line, s.span.col, s.span.line, s.span.col + len(s.tensor))
        if s.op in ir.ATOMIC_OPS:  # atomic_add(T[..], v): the tensor name follows "atomic_add("
            tensor_span = word_span(self.text, s.span, s.tensor)
        param = self.tensor(s.tensor, tensor_span)
        index, shape = self.index(param, s.index, s.span)
        value = self.expr(s.value)
        check_fp8.check_store(param, value)
        self.storable(param, s.op, value, tensor_span)
        if isinstance(value.ty, TileType) and not (shape and self.shapes.same_shape(shape, value.ty.shape)):
            target = describe(make_type(value.ty.dtype, shape))
            raise CompileError(
                value.span,
                f"shape mismatch: the slice of '{param.name}' is {target}; cannot store {describe(value.ty)}",
            )
        return dataclasses.replace(s, index=index, value=value)

    def storable(self, param: ir.TensorParam, op: str, value: ir.Expr, tensor_span: Span) -> None:
        """A value of this dtype may be stored (with `op`) into tensor `param`: a u8 tensor takes
        any integer (kept modulo 256, as C's conversion to unsigned char does)."""
        what = f"tensor '{param.name}' holds {param.dtype};"
        if op in ir.ATOMIC_OPS:
            check_atomic_value(param, op, value, tensor_span)
            return
        if param.dtype == "bool" and op != "=":
            raise CompileError(value.span, f"{what} '{op}' needs numbers (store a bool with '=')")
        if param.dtype == "u8":
            if value.ty.dtype not in INTEGERS:
                raise CompileError(
                    value.span, f"{what} cannot store {describe(value.ty)} without a conversion i32(...)"
                )
            return
        if param.dtype != "bool" and value.ty.dtype == "bool":
            raise CompileError(value.span, f"{what} cannot store {describe(value.ty)}")
        check_assignable_dtype(param.dtype, value, what[:-1], "store")

    def for_loop(self, s: ir.For) -> ir.For:
        start = self.scalar_i32(self.expr(s.start), "the loop start")
        stop = self.scalar_i32(self.expr(s.stop), "the loop bound")
        step = self.expr(s.step)
        if isinstance(step, ir.UnaryOp) and step.op == "-":
            raise CompileError(step.span, "the loop step must be positive; loops only count up")
        size = self.size_of(step, "the loop step")
        if not size.terms or any(c <= 0 for _, c in size.terms):
            raise CompileError(step.span, f"the loop step must be positive, found {size}")
        self.scopes.append({})
        self.declare(s.var, Symbol("loop", I32, word_span(self.text, s.span, s.var, "for")))
        body = self.block(s.body)
        self.scopes.pop()
        return dataclasses.replace(s, start=start, stop=stop, step=step, body=body)

    # ---- tensors and slices -----------------------------------------------------------------

    def tensor(self, name: str, span: Span) -> ir.TensorParam:
        if name in self.tensors:
            return self.tensors[name]
        if self.lookup(name) is not None:
            raise CompileError(span, f"'{name}' is not a tensor parameter; only tensors can be indexed")
        raise CompileError(span, f"unknown tensor '{name}'")

    def index(self, param: ir.TensorParam, items: tuple[ir.SliceItem, ...], span: Span):
        if len(items) != len(param.dims):
            raise CompileError(
                span,
                f"tensor '{param.name}' has {len(param.dims)} dimension"
                f"{'s' if len(param.dims) != 1 else ''}, but the index has {len(items)}",
            )
        checked: list[ir.SliceItem] = []
        shape: list[Size] = []
        for pos, item in enumerate(items):
            dim = param.dims[pos]
            if isinstance(item, ir.SliceAll):
                checked.append(item)
                shape.append(Size.sym(dim) if isinstance(dim, str) else Size.const(dim))
            elif isinstance(item, ir.SliceIndex):
                index = self.scalar_i32(self.expr(item.index), "an index")
                self.note_grid_index(param, pos, index, item.span)
                checked.append(dataclasses.replace(item, index=index))
            else:
                start = self.scalar_i32(self.expr(item.start), "a slice start")
                extent = self.expr(item.extent)
                size = self.size_of(extent, "a slice extent")
                if size.is_const and size.const_value <= 0:
                    raise CompileError(extent.span, f"a slice extent must be positive, found {size}")
                self.note_grid_slice(param, pos, start, size, item.span)
                checked.append(dataclasses.replace(item, start=start, extent=extent))
                shape.append(size)
        return tuple(checked), tuple(shape)

    def note_grid_slice(
        self, param: ir.TensorParam, pos: int, start: ir.Expr, extent: Size, span: Span
    ) -> None:
        """A slice `ctx.block.a * T :+ T` ties grid axis a to the dimension it slices."""
        form = affine_of(start, self.let_env())
        if form is None:
            return
        blocks = form.block_terms()
        if len(blocks) != 1:
            return
        axis, coeff = blocks[0]
        tiles = [n for n in coeff.symbols if (s := self.lookup(n)) is not None and s.kind == "tile"]
        if len(tiles) != 1 or coeff != Size.sym(tiles[0]) or extent != coeff:
            return
        tile, dim = tiles[0], param.dims[pos]
        if not isinstance(dim, str):
            raise CompileError(
                span,
                f"grid axis {axis} slices the fixed dimension {dim} of '{param.name}'; "
                "a grid axis must slice a named dimension",
            )
        old = self.grid.get(axis)
        if old is None:
            self.grid[axis] = ir.GridAxis(axis, dim, tile, span)
        elif old.dim != dim or old.tile != tile:
            raise CompileError(
                span,
                f"inconsistent grid axis {axis}: here it covers dimension '{dim}' in tiles "
                f"of '{tile}', but line {old.span.line} covers '{old.dim}' in tiles of '{old.tile}'",
            )

    def note_grid_index(self, param: ir.TensorParam, pos: int, index: ir.Expr, span: Span) -> None:
        """An index that is exactly `ctx.block.a` (through lets) may tie grid axis a to the
        dimension it indexes, one CTA per element; a grid slice of the same axis wins."""
        form = affine_of(index, self.let_env())
        if form is None or form.const != Size() or len(form.terms) != 1:
            return
        blocks = form.block_terms()
        if len(blocks) != 1 or blocks[0][1] != Size.const(1):
            return
        axis, dim = blocks[0][0], param.dims[pos]
        if not isinstance(dim, str):
            return  # a fixed extent cannot size a grid axis; a grid slice may still tie it
        self.grid_indices.setdefault(axis, []).append(ir.GridAxis(axis, dim, None, span))

    def finish_grid(self) -> tuple[ir.GridAxis, ...]:
        for axis, ties in self.grid_indices.items():
            if axis not in self.grid:
                tie = ties[0]
                other = next((t for t in ties if t.dim != tie.dim), None)
                if other is not None:
                    raise CompileError(
                        other.span,
                        f"inconsistent grid axis {axis}: this index gives it one CTA per element of "
                        f"'{other.dim}', but line {tie.span.line} gives it one per element of '{tie.dim}'",
                    )
                if self.kernel.cluster is not None:
                    raise CompileError(
                        tie.span,
                        f"grid axis {axis} is tied by an index (one CTA per element of "
                        f"'{tie.dim}'); @cluster kernels need grid slices 'ctx.block.{axis} * "
                        "TILE :+ TILE' on every axis",
                    )
                self.grid[axis] = tie
        for axis in AXES:
            if axis in self.block_uses and axis not in self.grid:
                raise CompileError(
                    self.block_uses[axis],
                    f"ctx.block.{axis} is used, but no slice "
                    f"'ctx.block.{axis} * TILE :+ TILE' of a tensor defines grid axis {axis}",
                )
        for i, axis in enumerate(AXES):
            if axis in self.grid and i > 0 and AXES[i - 1] not in self.grid:
                raise CompileError(
                    self.block_uses[axis],
                    f"grid axis {axis} is used without axis {AXES[i - 1]}; use grid axes in order x, y, z",
                )
        return tuple(self.grid[a] for a in AXES if a in self.grid)

    # ---- expressions ------------------------------------------------------------------------

    def scalar_i32(self, e: ir.Expr, what: str) -> ir.Expr:
        if e.ty != I32:
            raise CompileError(e.span, f"{what} must be an i32 scalar, found {describe(e.ty)}")
        return e

    def size_of(self, e: ir.Expr, what: str) -> Size:
        """A checked compile-time expression as a Size: literals, dims, tile names, + and *."""
        if isinstance(e, ir.Const) and type(e.value) is int and not e.origin:
            return Size.const(e.value)
        if isinstance(e, ir.Name) and e.kind in ("dim", "tile"):
            return Size.sym(e.name)
        if isinstance(e, ir.BinOp) and e.op in ("+", "*"):
            lhs, rhs = self.size_of(e.lhs, what), self.size_of(e.rhs, what)
            return lhs + rhs if e.op == "+" else lhs * rhs
        raise CompileError(
            e.span,
            f"{what} must be known at compile time: integer literals, dimensions and "
            "tile names combined with + and *",
        )

    def expr(self, e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Const):
            ty = BOOL if isinstance(e.value, bool) else I32 if isinstance(e.value, int) else F32
            return dataclasses.replace(e, ty=ty)
        if isinstance(e, ir.Name):
            return self.name(e)
        if isinstance(e, ir.BlockIndex):
            self.block_uses.setdefault(e.axis, e.span)
            return dataclasses.replace(e, ty=I32)
        if isinstance(e, ir.BinOp):
            lhs, rhs = adopt_all([self.expr(e.lhs), self.expr(e.rhs)])
            for side in (lhs, rhs):
                check_fp8.refuse(side, f"'{e.op}'")
            return dataclasses.replace(e, lhs=lhs, rhs=rhs, ty=self.binop_type(e.op, lhs, rhs, e.span))
        if isinstance(e, ir.UnaryOp):
            operand = self.expr(e.operand)
            check_fp8.refuse(operand, f"'{e.op}'")
            want_bool = e.op == "not"
            if (operand.ty.dtype == "bool") != want_bool:
                need = "bool" if want_bool else "a number"
                raise CompileError(operand.span, f"'{e.op}' needs {need}, found {describe(operand.ty)}")
            return dataclasses.replace(e, operand=operand, ty=widened(operand.ty))
        if isinstance(e, ir.Load):
            return self.load(e)
        if isinstance(e, ir.Call):
            return self.call(e)
        if isinstance(e, ir.ShapeList):
            raise CompileError(
                e.span, "a bracketed list is only allowed as the shape argument of full([..], v)"
            )
        raise AssertionError(f"unknown expression {type(e).__name__}")

    def name(self, e: ir.Name) -> ir.Name:
        symbol = self.lookup(e.name)
        if symbol is None:
            if e.name in self.tensors:
                raise CompileError(
                    e.span,
                    f"tensor '{e.name}' cannot be used as a value; load a slice of it, "
                    f"as in {e.name}[i :+ B]",
                )
            raise CompileError(e.span, f"unknown name '{e.name}'")
        return dataclasses.replace(e, ty=symbol.ty, kind=symbol.kind)

    def binop_type(self, op: str, lhs: ir.Expr, rhs: ir.Expr, span: Span) -> ir.Type:
        lt, rt = lhs.ty, rhs.ty
        if op in ("and", "or"):
            for side in (lhs, rhs):
                if side.ty.dtype != "bool":
                    raise CompileError(side.span, f"'{op}' needs bool operands, found {describe(side.ty)}")
            dtype = "bool"
        elif op in ("==", "!="):
            if (lt.dtype == "bool") != (rt.dtype == "bool"):
                raise CompileError(rhs.span, f"cannot compare {describe(lt)} with {describe(rt)}")
            if lt.dtype != "bool":
                promote(lt.dtype, rt.dtype, rhs.span)  # i32 against u32 has no common type
            dtype = "bool"
        else:
            for side in (lhs, rhs):
                if side.ty.dtype == "bool":
                    raise CompileError(side.span, f"'{op}' needs numbers, found {describe(side.ty)}")
            common = promote(lt.dtype, rt.dtype, rhs.span)
            dtype = "bool" if op in ORDERING else common
        return make_type(dtype, self.shapes.broadcast(lt, rt, rhs.span))

    def load(self, e: ir.Load) -> ir.Load:
        tensor_span = Span(e.span.file, e.span.line, e.span.col, e.span.line, e.span.col + len(e.tensor))
        if e.fill is not None:  # load(T[..], fill = v): the tensor name follows "load("
            tensor_span = word_span(self.text, e.span, e.tensor)
        param = self.tensor(e.tensor, tensor_span)
        index, shape = self.index(param, e.index, e.span)
        fill = None
        if e.fill is not None:
            fill = self.expr(e.fill)
            if param.dtype in ir.FP8:
                raise CompileError(fill.span, f"an fp8 tensor ({param.dtype}) reads 0 outside: no fill")
            want_bool = param.dtype == "bool"
            if not isinstance(fill.ty, ScalarType) or (fill.ty.dtype == "bool") != want_bool:
                need = "a bool" if want_bool else "a number"
                raise CompileError(fill.span, f"fill must be {need}, found {describe(fill.ty)}")
            if dtypes.get(param.dtype).integer and fill.ty.dtype in FLOATS:
                raise CompileError(fill.span, f"fill of tensor '{param.name}' ({param.dtype}) must be an "
                                   f"integer, found {describe(fill.ty)}")
        dtype = dtypes.get(param.dtype).value_type  # bf16, f16, e4m3, e5m2 stay narrow, u8 widens to i32
        return dataclasses.replace(e, index=index, fill=fill, ty=make_type(dtype, shape))

    def call(self, e: ir.Call) -> ir.Call:
        check_signature(e)
        args = []
        for i, a in enumerate(e.args):
            if isinstance(a, ir.ShapeList) and builtins.takes_shape(e) and i == 0:
                items = tuple(self.expr(x) for x in a.items)
                args.append(
                    dataclasses.replace(a, items=items, ty=TileType("i32", (Size.const(len(items)),)))
                )
            else:
                args.append(self.expr(a))
        if builtins.literals_adopt(e):
            args[-2:] = adopt_all(args[-2:])  # where's choices, max/min's and the bit operations' operands
        # A dot's `precision = tf32` names a precision, not a value: it leaves kwargs for the
        # call's `precision` field instead of being typed.
        contraction = builtins.is_contraction(e)
        requested = next((v for k, v in e.kwargs if contraction and k == "precision"), None)
        if requested is None and e.precision is not None and e.precision.origin == "dot":
            requested = ir.Name(e.precision.mode, e.precision.span)  # checked before: keep its choice
        kwargs = tuple((k, self.expr(v)) for k, v in e.kwargs if not (contraction and k == "precision"))
        checked = dataclasses.replace(e, args=tuple(args), kwargs=kwargs)
        check_fp8.refuse_in_call(checked)
        checked = dataclasses.replace(checked, ty=call_type(checked, self.shapes, self.size_of))
        if not contraction:
            return checked
        check_fp8.check_dot_scales(checked, self.shapes)
        precision = dot_precision(checked, requested, self.kernel.precision)
        if precision.mode in ("f32", "tf32"):
            self.f32_dots.append(precision)
        return dataclasses.replace(checked, precision=precision)

    def check_precision_used(self) -> None:
        """`@precision(tf32)` on a kernel none of whose dots it could change is a mistake."""
        attr = self.kernel.precision
        if attr is not None and attr.mode == "tf32" and not any(p.origin == "kernel" for p in self.f32_dots):
            raise CompileError(
                attr.span,
                "@precision(tf32) changes dots of f32 operands, and this kernel has none "
                "(bf16 and f16 dots take their precision from their operands)",
            )
