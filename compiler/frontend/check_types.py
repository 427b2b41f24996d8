"""Type and shape rules shared by the checker: promotion, symbolic shape equality, broadcasting."""

from __future__ import annotations

from collections.abc import Mapping

from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import ScalarType, Size, TileType
from compiler.frontend.source import Span

NUMERIC = ("i32", "f32", "bf16", "f16", "e4m3", "e5m2")  # fp8 values: where check_fp8 lets them
FLOATS = ("f32", "bf16", "f16")


def describe(ty: ir.Type) -> str:
    if isinstance(ty, TileType):
        return f"tile<{ty.dtype}>[{', '.join(str(s) for s in ty.shape)}]"
    return ty.dtype


def with_dtype(ty: ir.Type, dtype: str) -> ir.Type:
    return TileType(dtype, ty.shape) if isinstance(ty, TileType) else ScalarType(dtype)


def widened(ty: ir.Type) -> ir.Type:
    """Arithmetic on a narrow float (bf16, f16) computes in f32: its result type."""
    return with_dtype(ty, "f32") if ty.dtype in ir.NARROW_FLOATS + ir.FP8 else ty


def promote(a: str, b: str) -> str:
    return "i32" if a == b == "i32" else "f32"


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
