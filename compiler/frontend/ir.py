"""The one IR of phobos: small frozen dataclasses, each node carrying its source span.

The parser builds these nodes with `ty=None`; the check stage (compiler/frontend/check.py) returns a new
module in which every expression has its `ty` filled in and every kernel its `grid`. Later stages
(interpreter, CUDA code generator, cluster compiler) only ever see checked modules.

Meaning in brief (docs/language.md is the full reference):
- A kernel runs once per point of its grid (a CTA on a GPU). `ctx.block.x/.y/.z` is that point.
- Scalars (`ScalarType`) are per-CTA values: i32 for indices, f32 for arithmetic, bool for tests.
- Tiles (`TileType`) are small dense arrays whose extents are symbolic `Size`s built from tile
  names (the `@autotune` names), dimensions and integer literals.
- A tensor read `T[a :+ n, :]` is a tile load; elements outside the tensor read `fill` (0 unless
  the kernel names another value with `load(T[..], fill = v)`). A store drops elements outside.
- Arithmetic happens in f32 whatever the storage type. A load of an f16/bf16 tensor, a `bf16(x)` /
  `f16(x)` cast, and `transpose`/`expand` of such a value keep the narrow type (its values are
  exactly representable in it); every arithmetic operation widens it to f32.
- `dot` multiplies with the precision in `Call.precision` (a `DotPrecision`): exact f32, TF32, or
  bf16/f16 operands with exact products; it always accumulates in f32.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from compiler.frontend.size import Size  # part of the IR; its own module for its algebra
from compiler.frontend.source import Span

# --------------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------------

StorageDType = Literal["f32", "f16", "bf16", "i32", "e4m3", "e5m2"]
# What values hold. bf16 and f16 values are *narrow floats*: numbers exactly representable in that
# format (loads of bf16/f16 tensors, bf16()/f16() casts); arithmetic on them computes in f32.
# e4m3 and e5m2 values (loads of fp8 tensors) are held exactly too, but are only dot operands
# (with scales), transposed, or converted with f32()/bf16()/f16(): no arithmetic takes them.
ValueDType = Literal["f32", "i32", "bool", "bf16", "f16", "e4m3", "e5m2"]
NARROW_FLOATS = ("bf16", "f16")
FP8 = ("e4m3", "e5m2")


@dataclass(frozen=True)
class ScalarType:
    dtype: ValueDType


@dataclass(frozen=True)
class TileType:
    dtype: ValueDType
    shape: tuple[Size, ...]  # rank >= 1

    @property
    def rank(self) -> int:
        return len(self.shape)


Type = ScalarType | TileType

I32 = ScalarType("i32")
F32 = ScalarType("f32")
BOOL = ScalarType("bool")

# --------------------------------------------------------------------------------------------
# Expressions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Const:
    """A literal, or `ctx.origin.<axis>` (`origin` set to the axis): the start, in elements, of
    this kernel's super-tile along that grid axis. A kernel launched on its own is its own only
    super-tile, so the origin is the constant 0 there; the cluster compiler writes each leaf's
    origin into the leaf's text (docs/cluster.md)."""

    value: float | int | bool  # `inf` / `-inf` are float('inf') / float('-inf')
    span: Span
    ty: Type | None = None
    origin: Literal["x", "y", "z"] | None = None


@dataclass(frozen=True)
class Name:
    """A use of a let, var, loop variable, scalar parameter, dimension or tile name.

    `kind` is filled by the checker: "let", "var", "loop", "scalar", "dim", "tile".
    Dims and tile names are i32 scalars when used as values.
    """

    name: str
    span: Span
    ty: Type | None = None
    kind: str | None = None


@dataclass(frozen=True)
class BlockIndex:
    """`ctx.block.x` / `.y` / `.z`: the index of this CTA along a grid axis (i32)."""

    axis: Literal["x", "y", "z"]
    span: Span
    ty: Type | None = None


BinaryOpName = Literal["+", "-", "*", "/", "%", "==", "!=", "<", "<=", ">", ">=", "and", "or"]


@dataclass(frozen=True)
class BinOp:
    """Elementwise binary operation.

    Operands broadcast only explicitly: scalar with tile, or two tiles of equal rank whose
    extents are equal or (literal) 1 on either side. `/` on i32 is floor division, on f32 true
    division. Mixed i32/f32 promotes to f32. Comparisons give bool.
    """

    op: BinaryOpName
    lhs: Expr
    rhs: Expr
    span: Span
    ty: Type | None = None


@dataclass(frozen=True)
class UnaryOp:
    op: Literal["-", "not"]
    operand: Expr
    span: Span
    ty: Type | None = None


@dataclass(frozen=True)
class SliceRange:
    """`start :+ extent` along one axis; `extent` must be a compile-time Size (a tile name,
    a dim, a literal, or products/sums of those)."""

    start: Expr
    extent: Expr
    span: Span


@dataclass(frozen=True)
class SliceAll:
    """`:` along one axis: the whole extent of that tensor dimension."""

    span: Span


@dataclass(frozen=True)
class SliceIndex:
    """A single index `i` along one axis: that axis is dropped from the loaded tile."""

    index: Expr
    span: Span


SliceItem = SliceRange | SliceAll | SliceIndex


@dataclass(frozen=True)
class Load:
    """A tile read from a tensor parameter. Elements outside the tensor read `fill` (0.0 when
    None). `load(T[...], fill = -inf)` in source sets `fill`."""

    tensor: str
    index: tuple[SliceItem, ...]  # one item per tensor dimension
    span: Span
    fill: Expr | None = None
    ty: Type | None = None


DotMode = Literal["f32", "tf32", "bf16", "f16", "e4m3", "e5m2"]


@dataclass(frozen=True)
class DotPrecision:
    """How one `dot` multiplies (the checker fills `Call.precision` for every dot).

    mode "f32": f32 operands, products and sums exact f32 (the default);
    mode "tf32": f32 operands each rounded to TF32 (docs/language.md §4.1: round to nearest, ties
        to even, as cvt.rn.tf32.f32), products exact, sums in f32;
    mode "bf16" / "f16": operands of that narrow type, products exact, sums in f32.
    mode "e4m3" / "e5m2": fp8 operands, products exact, sums in f32, the result times the dot's
        scales (`Call.kwargs` scale_a, scale_b: both required, docs/language.md §8.1).
    `origin` says who chose it: "operands" (bf16/f16 operands, or f32 by default), "kernel"
    (`@precision(...)`) or "dot" (`dot(a, b, precision = ...)`); `span` points at that choice:
    the dot itself, the attribute, or the argument's value.
    """

    mode: DotMode
    origin: Literal["operands", "kernel", "dot"]
    span: Span


@dataclass(frozen=True)
class Call:
    """A built-in function. `kwargs` holds keyword arguments such as `axis = 1`.

    Built-ins (the checker rejects anything else):
      dot(a, b)            tile[M,K] x tile[K,N] -> tile[M,N]  (f32 accumulate); operands both
                           f32/i32, both bf16, both f16, both e4m3 or both e5m2; `precision = f32 |
                           tf32` (f32 operands only) is taken out of `kwargs` by the checker into
                           `precision`; fp8 dots keep `scale_a = s`, `scale_b = s` in `kwargs`
      transpose(a)         tile[M,N] -> tile[N,M]
      exp, log, sqrt, abs  elementwise, f32
      max(a, b), min(a, b) elementwise (scalars or tiles, broadcast as BinOp)
      max(a, axis = k), min(a, axis = k), sum(a, axis = k)   reduction; axis k is removed
      where(cond, a, b)    elementwise select (broadcast as BinOp)
      arange(n)            tile<i32>[n] holding 0 .. n-1 (n a compile-time Size)
      expand(a, axis = k)  insert an axis of extent 1 at position k (explicit broadcasting)
      full([s0, s1], v)    tile<f32> of the given shape filled with scalar v
      f32(x), i32(x)       conversions
      bf16(x), f16(x)      rounding to the narrow float (nearest, ties to even)
    """

    func: str
    args: tuple[Expr, ...]
    span: Span
    kwargs: tuple[tuple[str, Expr], ...] = ()
    ty: Type | None = None
    precision: DotPrecision | None = None  # set by the checker on every `dot`, None elsewhere


@dataclass(frozen=True)
class ShapeList:
    """A bracketed list of sizes used as an argument, e.g. the shape in `full([BR, D], 0.0)`."""

    items: tuple[Expr, ...]
    span: Span
    ty: Type | None = None


Expr = Const | Name | BlockIndex | BinOp | UnaryOp | Load | Call | ShapeList

# --------------------------------------------------------------------------------------------
# Statements
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Let:
    name: str
    value: Expr
    span: Span


@dataclass(frozen=True)
class VarDecl:
    """`var NAME: tile<f32>[A, B] = init` (init a scalar, broadcast, or a tile of that shape);
    also `var NAME: f32 = init` / `var NAME: i32 = init` for a mutable scalar."""

    name: str
    declared: Type
    init: Expr
    span: Span


AssignOp = Literal["=", "+=", "-=", "*=", "/="]


@dataclass(frozen=True)
class Assign:
    """Assignment to a `var`. Compound ops mean `x = x op value`. The var's type never changes."""

    name: str
    op: AssignOp
    value: Expr
    span: Span


@dataclass(frozen=True)
class Store:
    """`T[index] = value` (or a compound op: read-modify-write of the same region). Elements
    outside the tensor are dropped. `value` may be a scalar (broadcast) or a tile whose shape
    equals the slice's shape."""

    tensor: str
    index: tuple[SliceItem, ...]
    op: AssignOp
    value: Expr
    span: Span


@dataclass(frozen=True)
class For:
    """`for i in range(start, stop, step) { body }`: i = start, start+step, ... while i < stop.
    `step` must be a positive compile-time Size; start/stop are i32 scalar expressions."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]
    span: Span


Stmt = Let | VarDecl | Assign | Store | For

# --------------------------------------------------------------------------------------------
# Parameters, attributes, kernels
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorParam:
    name: str
    dtype: StorageDType
    dims: tuple[str | int, ...]  # symbolic dimension names or fixed integers, rank 1..4
    span: Span


@dataclass(frozen=True)
class ScalarParam:
    name: str
    dtype: Literal["f32", "i32"]
    span: Span


Param = TensorParam | ScalarParam


@dataclass(frozen=True)
class SearchDim:
    """One `NAME in [v0, v1, ...]` entry of @autotune or @cluster.

    `written` is what the user wrote. `values` is the expanded search space: one value = fixed;
    two = inclusive bounds searched in doubling steps (lo, 2lo, 4lo, ... <= hi, plus hi if it is
    not reached exactly); three or more = the explicit list. `values[0]` is the default."""

    name: str
    written: tuple[int, ...]
    values: tuple[int, ...]
    span: Span


@dataclass(frozen=True)
class Autotune:
    dims: tuple[SearchDim, ...]
    span: Span


@dataclass(frozen=True)
class Cluster:
    dims: tuple[SearchDim, ...]
    span: Span


@dataclass(frozen=True)
class Aligned:
    """`@aligned(M = TILE_M, ...)`: dimension M is a whole multiple of tile TILE_M."""

    pairs: tuple[tuple[str, str], ...]
    span: Span
    pair_spans: tuple[Span, ...] = ()  # one per pair (`M = TILE_M`), for errors at the entry


@dataclass(frozen=True)
class Launch:
    threads: int
    span: Span


@dataclass(frozen=True)
class Precision:
    """`@precision(tf32)`: the kernel's dots of f32 operands run in TF32 unless one says
    `precision = f32`. `@precision(f32)` states the default. bf16/f16 dots are not affected."""

    mode: Literal["f32", "tf32"] | None  # None: `@precision(math = ...)` alone, dots as by default
    span: Span
    math: Literal["accurate", "fast"] = "accurate"  # the float functions' forms (language.md §8.2)


Attribute = Autotune | Cluster | Aligned | Launch | Precision


@dataclass(frozen=True)
class GridAxis:
    """One axis of the launch grid, found by the checker from a slice `ctx.block.<axis> * TILE
    :+ TILE` of tensor dimension `dim`: the grid has ceil(dim / TILE) points along `axis`.

    `tile` is None for an axis tied by a *grid index* instead: an index item that is exactly
    `ctx.block.<axis>` (as in `Q[ctx.block.y, ...]`, which drops that tensor axis). The grid then
    has `dim` points along `axis`, one per element (the heads of multi-head attention)."""

    axis: Literal["x", "y", "z"]
    dim: str
    tile: str | None
    span: Span

    def count(self, env: Mapping[str, int]) -> int:
        """CTAs along this axis under bound dims and tile values."""
        step = 1 if self.tile is None else env[self.tile]
        return -(-env[self.dim] // step)


@dataclass(frozen=True)
class Kernel:
    name: str
    params: tuple[Param, ...]
    attributes: tuple[Attribute, ...]
    body: tuple[Stmt, ...]
    span: Span
    grid: tuple[GridAxis, ...] = ()  # filled by the checker, ordered x, y, z
    source: str = ""  # the kernel's own source text, attributes included

    @property
    def autotune(self) -> Autotune | None:
        return next((a for a in self.attributes if isinstance(a, Autotune)), None)

    @property
    def cluster(self) -> Cluster | None:
        return next((a for a in self.attributes if isinstance(a, Cluster)), None)

    @property
    def aligned(self) -> Aligned | None:
        return next((a for a in self.attributes if isinstance(a, Aligned)), None)

    @property
    def threads(self) -> int:
        launch = next((a for a in self.attributes if isinstance(a, Launch)), None)
        return launch.threads if launch else 256

    @property
    def precision(self) -> Precision | None:
        return next((a for a in self.attributes if isinstance(a, Precision)), None)

    @property
    def tensors(self) -> tuple[TensorParam, ...]:
        return tuple(p for p in self.params if isinstance(p, TensorParam))

    @property
    def scalars(self) -> tuple[ScalarParam, ...]:
        return tuple(p for p in self.params if isinstance(p, ScalarParam))

    def default_tile_values(self) -> dict[str, int]:
        """The first value of every @autotune name: what runs when nothing is tuned or set."""
        at = self.autotune
        return {d.name: d.values[0] for d in at.dims} if at else {}


@dataclass(frozen=True)
class Module:
    file: str
    text: str
    kernels: tuple[Kernel, ...] = field(default=())

    def kernel(self, name: str | None = None) -> Kernel:
        """The named kernel, or the only one when `name` is None (callers turn a KeyError into
        a user error naming the choices)."""
        if name is None:
            if len(self.kernels) != 1:
                raise KeyError(name)
            return self.kernels[0]
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(name)
