"""Type and shape rules shared by the checker: promotion, symbolic shape equality, broadcasting."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from common import dtypes
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import ScalarType, Size, TileType
from compiler.frontend.source import Span

# Value types, from common/dtypes.py's table: what tiles, lets and vars hold
FLOATS = ("f32", "bf16", "f16")
INTEGERS = tuple(n for n in dtypes.names(tile=True) if dtypes.get(n).integer)  # i32, i64, u32
NUMERIC = INTEGERS + FLOATS + ("e4m3", "e5m2")  # fp8 values: where check_fp8 lets them
_INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u32": (0, 2**32 - 1)}


def describe(ty: ir.Type) -> str:
    if isinstance(ty, TileType):
        return f"tile<{ty.dtype}>[{', '.join(str(s) for s in ty.shape)}]"
    return ty.dtype


def with_dtype(ty: ir.Type, dtype: str) -> ir.Type:
    return TileType(dtype, ty.shape) if isinstance(ty, TileType) else ScalarType(dtype)


def widened(ty: ir.Type) -> ir.Type:
    """Arithmetic on a narrow float (bf16, f16) computes in f32: its result type."""
    return with_dtype(ty, "f32") if ty.dtype in ir.NARROW_FLOATS + ir.FP8 else ty


def promote(a: str, b: str, at: Span | None = None) -> str:
    """The type of arithmetic on a and b: any float makes f32; two integers of one type keep it;
    i32 or u32 with i64 makes i64 (every value fits); i32 with u32 has no common type (C's
    unsigned conversion would turn -1 into 4294967295): refused at `at`."""
    if a not in INTEGERS or b not in INTEGERS:  # a float (fp8 included) or a bool
        return "f32"
    if a == b:
        return a
    if "i64" in (a, b):
        return "i64"
    raise CompileError(
        at, f"mixed signed and unsigned integers ({a} and {b}): convert one, with i32(...) or u32(...)"
    )


def widens_to(value: str, target: str) -> bool:
    """An integer value of type `value` converts to integer type `target` without loss."""
    return value == target or (target == "i64" and value in ("i32", "u32"))


def int_literal(e: ir.Expr) -> bool:
    """An integer literal as written (no origin): it takes the integer type around it."""
    return isinstance(e, ir.Const) and type(e.value) is int and not e.origin and e.ty == ir.I32


def adopt(e: ir.Expr, dtype: str) -> ir.Expr:
    """Integer literal `e` retyped as integer type `dtype` (checked to fit); other expressions
    are returned as they are."""
    if not int_literal(e) or dtype not in _INT_RANGE or dtype == "i32":
        return e
    lo, hi = _INT_RANGE[dtype]
    if not lo <= e.value <= hi:
        raise CompileError(e.span, f"the literal {e.value} does not fit in {dtype}")
    return dataclasses.replace(e, ty=ScalarType(dtype))


def adopt_all(args: list[ir.Expr]) -> list[ir.Expr]:
    """Integer literals among `args` take the integer type of the first argument that is an
    integer of another type than i32 (`x + 1`, `max(x, 0)` with x a u32)."""
    other = next((a.ty.dtype for a in args if not int_literal(a) and a.ty is not None
                  and a.ty.dtype in INTEGERS and a.ty.dtype != "i32"), None)
    return args if other is None else [adopt(a, other) for a in args]


class Shapes:
    """Compares Sizes after substituting names that have exactly one value (D -> 64 when the
    kernel says `D in [64]`), so tile[BR, 64] and tile[BR, D] are the same shape, whether or not
    the name is also an @cluster name: the body runs only as a leaf, with its @autotune values."""

    def __init__(self, fixed: Mapping[str, int]):
        self.fixed = dict(fixed)

    def normal(self, size: Size) -> Size:
        total = Size()
        for monomial, coeff in size.terms:
            term = Size.const(coeff)
            for name in monomial:
                term = term * (Size.const(self.fixed[name]) if name in self.fixed else Size.sym(name))
            total = total + term
        return total

    def same(self, a: Size, b: Size) -> bool:
        return a == b or self.normal(a) == self.normal(b)

    def same_shape(self, a: tuple[Size, ...], b: tuple[Size, ...]) -> bool:
        return len(a) == len(b) and all(self.same(x, y) for x, y in zip(a, b, strict=True))

    def broadcast(self, a: ir.Type, b: ir.Type, at: Span) -> tuple[Size, ...] | None:
        """The shape of combining a and b elementwise (None: both scalars). Raises at `at`."""
        if not isinstance(a, TileType):
            return b.shape if isinstance(b, TileType) else None
        if not isinstance(b, TileType):
            return a.shape
        if a.rank != b.rank:
            raise CompileError(
                at,
                f"shape mismatch: {describe(a)} and {describe(b)} have different ranks; "
                "add an axis with expand(x, axis = k)",
            )
        out = []
        for axis, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)):
            if self.same(x, y):
                out.append(x)
            elif x == Size.const(1):
                out.append(y)
            elif y == Size.const(1):
                out.append(x)
            else:
                raise CompileError(
                    at, f"shape mismatch: {describe(a)} and {describe(b)} differ in axis {axis} ({x} vs {y})"
                )
        return tuple(out)


def make_type(dtype: str, shape: tuple[Size, ...] | None) -> ir.Type:
    return TileType(dtype, shape) if shape else ScalarType(dtype)


def check_assignable_dtype(target: str, value: ir.Expr, subject: str, verb: str = "assign") -> None:
    """Raise at `value` unless a value of its dtype may go into something of dtype `target` (a
    var, or a tensor's storage; `subject` says which, as in "var 'x' is i32"): bool only into
    bool; into an integer, only an integer that widens to it without loss (or an integer literal
    that fits); numbers into floats (converted)."""
    vt = value.ty
    if (target == "bool") != (vt.dtype == "bool"):
        hint = "" if target == "bool" else " (use where(c, 1.0, 0.0))"
        raise CompileError(value.span, f"{subject}; cannot {verb} {describe(vt)}{hint}")
    if target not in INTEGERS:
        return
    if vt.dtype in FLOATS:
        raise CompileError(
            value.span, f"{subject}; cannot {verb} {describe(vt)} without a conversion {target}(...)"
        )
    if widens_to(vt.dtype, target):
        return
    if int_literal(value):
        adopt(value, target)  # raises when it does not fit
        return
    raise CompileError(
        value.span,
        f"{subject}; cannot {verb} {describe(vt)} without a conversion {target}(...) "
        "(integers convert implicitly only where every value fits)",
    )
