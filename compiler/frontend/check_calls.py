"""Typing of the built-in functions: one rule per built-in, named by compiler/builtins.py's table.

Each rule gets the checked call (arguments already typed), the kernel's `Shapes` and `size_of(expr,
what) -> Size` (a compile-time argument as a Size, raising otherwise), and returns the result type,
raising CompileError at the most specific argument when something does not fit.
"""

from __future__ import annotations

from compiler.frontend import ir
from compiler.frontend.check_types import NUMERIC, Shapes, describe, make_type, promote, widened, with_dtype
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import NARROW_FLOATS, ScalarType, Size, TileType

DOT_PRECISIONS = ("f32", "tf32")  # what `precision = ...` may ask for
INTEGER = ("i32",)  # the dtypes bit operations take


def axis_of(call: ir.Call, limit: int) -> int:
    """The literal `axis = k` of a call, 0 <= k < limit."""
    value = dict(call.kwargs)["axis"]
    if not (isinstance(value, ir.Const) and type(value.value) is int and not value.origin):
        raise CompileError(value.span, "axis must be an integer literal")
    if not 0 <= value.value < limit:
        raise CompileError(
            value.span,
            f"axis {value.value} is out of range 0..{limit - 1} for {call.func} of "
            f"{describe(call.args[0].ty)}",
        )
    return value.value


def _numeric(arg: ir.Expr, what: str) -> None:
    if arg.ty.dtype not in NUMERIC:
        raise CompileError(arg.span, f"{what} needs numbers, found {describe(arg.ty)}")


def _tile(arg: ir.Expr, what: str, rank: int | None = None) -> TileType:
    ty = arg.ty
    if not isinstance(ty, TileType) or (rank is not None and ty.rank != rank):
        want = f"a rank-{rank} tile" if rank else "a tile"
        raise CompileError(arg.span, f"{what} needs {want}, found {describe(ty)}")
    return ty


# ---- the rules (call, shapes, size_of) -> type ------------------------------------------------


def dot_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    return _dot_type(call.args, shapes)


def narrow_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """bf16(x), f16(x): rounding a number into the narrow float."""
    f, arg = call.func, call.args[0]
    if arg.ty.dtype not in NUMERIC:
        raise CompileError(
            arg.span,
            f"{f}() converts numbers, found {describe(arg.ty)}; "
            "turn a condition into a number with where(c, 1.0, 0.0) first",
        )
    return with_dtype(arg.ty, f)


def transpose_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    a = _tile(call.args[0], "transpose", 2)
    return TileType(a.dtype, (a.shape[1], a.shape[0]))


def float_math_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """exp, log, tanh, ...: a number or tile of numbers, computed in f32."""
    for arg in call.args:
        _numeric(arg, call.func)
    if len(call.args) == 1:
        return with_dtype(call.args[0].ty, "f32")
    shape = shapes.broadcast(call.args[0].ty, call.args[1].ty, call.args[1].span)
    return make_type("f32", shape)


def abs_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    _numeric(call.args[0], call.func)
    return widened(call.args[0].ty)


def bit_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """bit_and, shift_left, ...: i32 operands (scalars or tiles, broadcast), an i32 result."""
    for arg in call.args:
        if arg.ty.dtype not in INTEGER:
            raise CompileError(
                arg.span, f"{call.func} needs i32 operands, found {describe(arg.ty)} (convert with i32(...))"
            )
    if len(call.args) == 1:
        return call.args[0].ty
    return make_type("i32", shapes.broadcast(call.args[0].ty, call.args[1].ty, call.args[1].span))


def reduce_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """sum(x, axis = k), and max/min with one argument: axis k removed."""
    f = call.func
    a = _tile(call.args[0], f"{f}(x, axis = k)")
    _numeric(call.args[0], f)
    k = axis_of(call, a.rank)
    return widened(make_type(a.dtype, a.shape[:k] + a.shape[k + 1 :]))


def max_min_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    if len(call.args) == 1:
        return reduce_rule(call, shapes, size_of)
    for x in call.args:
        _numeric(x, call.func)
    shape = shapes.broadcast(call.args[0].ty, call.args[1].ty, call.args[1].span)
    return make_type(promote(call.args[0].ty.dtype, call.args[1].ty.dtype), shape)


def scan_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """cumsum/cumprod/cummax(x, axis = k): the same shape, numbers widened as arithmetic does."""
    a = _tile(call.args[0], f"{call.func}(x, axis = k)")
    _numeric(call.args[0], call.func)
    axis_of(call, a.rank)
    return widened(a)


def take_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """take(x, idx, axis = k): axis k of tile x replaced by the rank-1 i32 tile idx's extent."""
    a = _tile(call.args[0], "take")
    idx = call.args[1]
    if not isinstance(idx.ty, TileType) or idx.ty.rank != 1 or idx.ty.dtype != "i32":
        raise CompileError(idx.span, f"take's indices must be a rank-1 tile of i32, found {describe(idx.ty)}")
    k = axis_of(call, a.rank)
    return TileType(a.dtype, a.shape[:k] + idx.ty.shape + a.shape[k + 1 :])


def where_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    return _where_type(call, shapes)


def arange_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    return TileType("i32", (size_of(call.args[0], "arange's length"),))


def expand_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    a = _tile(call.args[0], "expand")
    k = axis_of(call, a.rank + 1)
    return TileType(a.dtype, a.shape[:k] + (Size.const(1),) + a.shape[k:])


def full_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    return _full_type(call.args, size_of)


def convert_rule(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """f32(x), i32(x)."""
    return with_dtype(call.args[0].ty, call.func)


def _dot_type(args, shapes: Shapes) -> ir.Type:
    a, b = (_tile(x, "dot", 2) for x in args)
    for x in args:
        _numeric(x, "dot")
    _same_operand_kind(args[0], args[1])
    if not shapes.same(a.shape[1], b.shape[0]):
        raise CompileError(
            args[1].span,
            f"dot inner extents differ: {describe(a)} times {describe(b)} ({a.shape[1]} vs {b.shape[0]})",
        )
    return TileType("f32", (a.shape[0], b.shape[1]))


def _where_type(call: ir.Call, shapes: Shapes) -> ir.Type:
    cond, a, b = call.args
    if cond.ty.dtype != "bool":
        raise CompileError(cond.span, f"where's condition must be bool, found {describe(cond.ty)}")
    if (a.ty.dtype == "bool") != (b.ty.dtype == "bool"):
        raise CompileError(
            b.span,
            f"where's choices must both be numbers or both bool: {describe(a.ty)} and {describe(b.ty)}",
        )
    value_shape = shapes.broadcast(a.ty, b.ty, b.span)
    dtype = "bool" if a.ty.dtype == "bool" else promote(a.ty.dtype, b.ty.dtype)
    shape = shapes.broadcast(cond.ty, make_type(dtype, value_shape), call.span)
    return make_type(dtype, shape)


def _full_type(args, size_of) -> ir.Type:
    shape_arg, value = args
    if not isinstance(shape_arg, ir.ShapeList):
        raise CompileError(
            shape_arg.span, "full's first argument is a shape list, as in full([BR, D], 0.0)"
        )
    if not isinstance(value.ty, ScalarType):
        raise CompileError(value.span, f"full's fill value must be a scalar, found {describe(value.ty)}")
    _numeric(value, "full")
    return TileType("f32", tuple(size_of(item, "a shape entry") for item in shape_arg.items))


def _dot_kind(dtype: str) -> str:
    """What a dot multiplies: bf16, f16, e4m3 or e5m2 operands as they are, i32 and f32 ones as f32."""
    return dtype if dtype in NARROW_FLOATS + ir.FP8 else "f32"


def _same_operand_kind(a: ir.Expr, b: ir.Expr) -> None:
    ka, kb = _dot_kind(a.ty.dtype), _dot_kind(b.ty.dtype)
    if ka == kb:
        return
    narrow = ka if ka in NARROW_FLOATS else kb
    hint = f"convert one, e.g. with {narrow}(...) or f32(...)"
    if narrow in ir.FP8:
        hint = "fp8 tensors of one dot share their format; or convert both, e.g. with bf16(...)"
    raise CompileError(
        b.span,
        f"dot operands differ in type: {describe(a.ty)} times {describe(b.ty)}; both must be f32, "
        f"both bf16, both f16, both e4m3 or both e5m2 ({hint})",
    )


def dot_precision(
    call: ir.Call, requested: ir.Expr | None, kernel_choice: ir.Precision | None
) -> ir.DotPrecision:
    """The precision of a typed dot: from its operands when they are bf16/f16, else from its own
    `precision = ...` argument (`requested`, still unchecked), else from `@precision`, else f32."""
    mode = _requested_mode(requested) if requested is not None else None
    kind = _dot_kind(call.args[0].ty.dtype)
    if kind in NARROW_FLOATS + ir.FP8:
        if requested is not None:
            raise CompileError(
                requested.span,
                f"precision = {mode} applies only to a dot of f32 operands; these are {kind}, "
                "whose products are exact and summed in f32",
            )
        return ir.DotPrecision(kind, "operands", call.span)
    if requested is not None:
        return ir.DotPrecision(mode, "dot", requested.span)
    if kernel_choice is not None and kernel_choice.mode is not None:
        return ir.DotPrecision(kernel_choice.mode, "kernel", kernel_choice.span)
    return ir.DotPrecision("f32", "operands", call.span)


def _requested_mode(value: ir.Expr) -> str:
    if not isinstance(value, ir.Name):
        raise CompileError(value.span, "precision must be written as a name: f32 or tf32")
    if value.name not in DOT_PRECISIONS:
        hint = ""
        if value.name in NARROW_FLOATS:
            hint = " (bf16 and f16 dots take their precision from their operands)"
        raise CompileError(value.span, f"unknown precision '{value.name}' (known: f32, tf32){hint}")
    return value.name
