"""The type rules of the fp8 values (e4m3, e5m2; docs/language.md §4.2 and §8.1).

An fp8 value is a load of an fp8 tensor (or a let of one). It holds its format's numbers exactly,
and it goes only where that is all that matters: into `dot` (both operands of one format, with
both scales), `transpose`, and the conversions f32(), i32(), bf16(), f16() (all exact). Any other
use is an error at the fp8 operand, so a kernel never computes on fp8 values by surprise.
"""

from __future__ import annotations

from compiler import builtins
from compiler.frontend import ir
from compiler.frontend.check_types import describe
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import ScalarType, TileType

SCALES = ("scale_a", "scale_b")
_USES = "an fp8 value is only a dot operand, transposed, or converted with f32(), bf16() or f16()"


def is_fp8(e: ir.Expr) -> bool:
    return e.ty is not None and e.ty.dtype in ir.FP8


def refuse(e: ir.Expr, where: str) -> None:
    """An error at `e` if it is an fp8 value, which `where` (an operator, a call, a store) cannot take."""
    if is_fp8(e):
        raise CompileError(e.span, f"{where} cannot take {describe(e.ty)}: {_USES} (as f32(x))")


def refuse_in_call(call: ir.Call) -> None:
    if builtins.takes_fp8(call):
        return
    for a in call.args:
        refuse(a, f"{call.func}()")
    for _, v in call.kwargs:
        refuse(v, f"{call.func}()")


def check_store(param: ir.TensorParam, value: ir.Expr) -> None:
    if param.dtype in ir.FP8:
        raise CompileError(
            value.span,
            f"tensor '{param.name}' holds {param.dtype}: fp8 tensors are read-only operands "
            "(store the result as f32, bf16 or f16)",
        )
    refuse(value, "a store")


def check_dot_scales(call: ir.Call, shapes) -> None:
    """fp8 operands need `scale_a` (f32 scalar, or tile<f32>[M]: one per row of a) and `scale_b`
    (scalar, or tile<f32>[N]: one per column of b); other dots take no scale."""
    a, b = call.args
    given = dict(call.kwargs)
    if not is_fp8(a):
        for name in SCALES:
            if name in given:
                raise CompileError(
                    given[name].span,
                    f"{name} applies only to a dot of fp8 operands (e4m3, e5m2); these are {a.ty.dtype}",
                )
        return
    missing = [n for n in SCALES if n not in given]
    if missing:
        raise CompileError(
            call.span,
            f"a dot of {a.ty.dtype} operands needs its scales: dot(a, b, scale_a = sa, scale_b = sb) "
            f"(missing {' and '.join(missing)}; each an f32 scalar, or a rank-1 tile of one per row "
            "of a / column of b; write 1.0 for none)",
        )
    for name, operand, axis, what in (("scale_a", a, 0, "row of a"), ("scale_b", b, 1, "column of b")):
        s = given[name]
        if s.ty.dtype not in ("f32", "i32", "bf16", "f16"):
            raise CompileError(s.span, f"{name} must be a number or a tile of them, found {describe(s.ty)}")
        if isinstance(s.ty, ScalarType):
            continue
        extent = operand.ty.shape[axis]
        if not (isinstance(s.ty, TileType) and s.ty.rank == 1 and shapes.same(s.ty.shape[0], extent)):
            raise CompileError(
                s.span,
                f"{name} must be a scalar or a tile of one scale per {what}, tile<f32>[{extent}]; "
                f"found {describe(s.ty)}",
            )
