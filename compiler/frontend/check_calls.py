"""Typing of the built-in functions (the list is in ir.Call's docstring).

Each rule gets the checked call (arguments already typed) and returns its result type, raising
CompileError at the most specific argument when something does not fit.
"""

from __future__ import annotations

from compiler.frontend import ir
from compiler.frontend.check_types import NUMERIC, Shapes, describe, make_type, promote, widened, with_dtype
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import NARROW_FLOATS, ScalarType, Size, TileType
from compiler.frontend.source import Span

# name -> (positional argument counts accepted, keyword arguments accepted)
SIGNATURES: dict[str, tuple[tuple[int, ...], tuple[str, ...]]] = {
    "dot": ((2,), ("precision",)),
    "transpose": ((1,), ()),
    "exp": ((1,), ()),
    "log": ((1,), ()),
    "sqrt": ((1,), ()),
    "abs": ((1,), ()),
    "max": ((1, 2), ("axis",)),
    "min": ((1, 2), ("axis",)),
    "sum": ((1,), ("axis",)),
    "where": ((3,), ()),
    "arange": ((1,), ()),
    "expand": ((1,), ("axis",)),
    "full": ((2,), ()),
    "f32": ((1,), ()),
    "i32": ((1,), ()),
    "bf16": ((1,), ()),
    "f16": ((1,), ()),
}
DOT_PRECISIONS = ("f32", "tf32")  # what `precision = ...` may ask for


def check_signature(call: ir.Call) -> None:
    """Before the arguments are typed: the function exists and takes these arguments."""
    s = call.span
    name_span = Span(s.file, s.line, s.col, s.line, s.col + len(call.func))
    if call.func not in SIGNATURES:
        raise CompileError(
            name_span,
            f"unknown function '{call.func}' (built-ins: " + ", ".join(sorted(SIGNATURES)) + ", load)",
        )
    counts, keywords = SIGNATURES[call.func]
    for key, value in call.kwargs:
        if key not in keywords:
            known = ", ".join(keywords) if keywords else "none"
            raise CompileError(value.span, f"{call.func} has no keyword argument '{key}' (known: {known})")
    has_axis = any(k == "axis" for k, _ in call.kwargs)
    n = len(call.args)
    if call.func in ("max", "min"):
        counts = (1,) if has_axis else (2,)
    if call.func in ("sum", "expand") and not has_axis:
        raise CompileError(call.span, f"{call.func} needs 'axis = k'")
    if n not in counts:
        want = " or ".join(str(c) for c in counts)
        raise CompileError(
            call.span, f"{call.func} takes {want} argument{'s' if counts != (1,) else ''}, found {n}"
        )


def _axis(call: ir.Call, limit: int) -> int:
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


def call_type(call: ir.Call, shapes: Shapes, size_of) -> ir.Type:
    """`size_of(expr) -> Size` turns a compile-time argument into a Size (raising otherwise)."""
    f, args = call.func, call.args
    if f == "dot":
        return _dot_type(args, shapes)
    if f in ("bf16", "f16"):
        if args[0].ty.dtype not in NUMERIC:
            raise CompileError(
                args[0].span,
                f"{f}() converts numbers, found {describe(args[0].ty)}; "
                "turn a condition into a number with where(c, 1.0, 0.0) first",
            )
        return with_dtype(args[0].ty, f)
    if f == "transpose":
        a = _tile(args[0], "transpose", 2)
        return TileType(a.dtype, (a.shape[1], a.shape[0]))
    if f in ("exp", "log", "sqrt", "abs"):
        _numeric(args[0], f)
        return widened(args[0].ty) if f == "abs" else with_dtype(args[0].ty, "f32")
    if f in ("max", "min", "sum") and len(args) == 1:
        a = _tile(args[0], f"{f}(x, axis = k)")
        _numeric(args[0], f)
        k = _axis(call, a.rank)
        return widened(make_type(a.dtype, a.shape[:k] + a.shape[k + 1 :]))
    if f in ("max", "min"):
        for x in args:
            _numeric(x, f)
        shape = shapes.broadcast(args[0].ty, args[1].ty, args[1].span)
        return make_type(promote(args[0].ty.dtype, args[1].ty.dtype), shape)
    if f == "where":
        return _where_type(call, shapes)
    if f == "arange":
        return TileType("i32", (size_of(args[0], "arange's length"),))
    if f == "expand":
        a = _tile(args[0], "expand")
        k = _axis(call, a.rank + 1)
        return TileType(a.dtype, a.shape[:k] + (Size.const(1),) + a.shape[k:])
    if f == "full":
        return _full_type(args, size_of)
    if f in ("f32", "i32"):
        return with_dtype(args[0].ty, f)
    raise AssertionError(f"no typing rule for built-in {f}")


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
    """What a dot multiplies: bf16 or f16 operands as they are, i32 and f32 ones as f32."""
    return dtype if dtype in NARROW_FLOATS else "f32"


def _same_operand_kind(a: ir.Expr, b: ir.Expr) -> None:
    ka, kb = _dot_kind(a.ty.dtype), _dot_kind(b.ty.dtype)
    if ka == kb:
        return
    narrow = ka if ka in NARROW_FLOATS else kb
    raise CompileError(
        b.span,
        f"dot operands differ in type: {describe(a.ty)} times {describe(b.ty)}; both must be f32, "
        f"both bf16 or both f16 (convert one, e.g. with {narrow}(...) or f32(...))",
    )


def dot_precision(
    call: ir.Call, requested: ir.Expr | None, kernel_choice: ir.Precision | None
) -> ir.DotPrecision:
    """The precision of a typed dot: from its operands when they are bf16/f16, else from its own
    `precision = ...` argument (`requested`, still unchecked), else from `@precision`, else f32."""
    mode = _requested_mode(requested) if requested is not None else None
    kind = _dot_kind(call.args[0].ty.dtype)
    if kind in NARROW_FLOATS:
        if requested is not None:
            raise CompileError(
                requested.span,
                f"precision = {mode} applies only to a dot of f32 operands; these are {kind}, "
                "whose products are exact and summed in f32",
            )
        return ir.DotPrecision(kind, "operands", call.span)
    if requested is not None:
        return ir.DotPrecision(mode, "dot", requested.span)
    if kernel_choice is not None:
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
