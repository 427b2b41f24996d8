"""The interpreter's meaning of each built-in, one function per built-in (compiler/builtins.py
names them): `op(ev, call, scope) -> ndarray`, `ev` the running interpreter (its `eval` and
`size`). Values carry three leading grid axes (values.py).

Precision: every float function is the exact function of its f32 (or widened bf16/f16)
arguments, rounded once to f32: computed in float64, then rounded (docs/language.md §8.2)."""

from __future__ import annotations

import math

import numpy as np

from compiler.frontend import ir
from compiler.interp import values as val

GRID = val.GRID_RANK


def _args(ev, call: ir.Call, scope) -> list[np.ndarray]:
    return [ev.eval(a, scope) for a in call.args]


def _axis(call: ir.Call) -> int:
    return int(dict(call.kwargs)["axis"].value)


def dot(ev, call, scope):
    a, b = _args(ev, call, scope)
    out = val.dot(a, b, call.precision.mode if call.precision is not None else "f32")
    scales = dict(call.kwargs)
    if "scale_a" not in scales:
        return out
    return val.scaled(out, ev.eval(scales["scale_a"], scope), ev.eval(scales["scale_b"], scope))


def transpose(ev, call, scope):
    return val.transpose(ev.eval(call.args[0], scope))


def legacy_math(ev, call, scope):
    """exp, log, sqrt, abs: numpy's f32 functions, as the language has always defined them."""
    return val.unary_math(call.func, ev.eval(call.args[0], scope))


_ERF = np.frompyfunc(math.erf, 1, 1)
_F64_MATH = {
    "tanh": np.tanh,
    "erf": lambda x: _ERF(x).astype(np.float64),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sin": np.sin,
    "cos": np.cos,
    "floor": np.floor,
    "ceil": np.ceil,
    "pow": np.power,
}


def float_math(ev, call, scope):
    """The exact function in float64 of the f32 arguments, rounded once to f32."""
    args = val.aligned(*_args(ev, call, scope))
    wide = [val.cast(a, val.F32).astype(np.float64) for a in args]
    return _F64_MATH[call.func](*wide).astype(val.F32)


def _shift(a: np.ndarray, n: np.ndarray, left: bool) -> np.ndarray:
    """Shifts whose count is read as unsigned and clamped to the width (32 or 64), as PTX's shl
    and shr do: a count of the width or more (or a negative one) shifts every bit out (0, or the
    sign of a signed value for >>; an unsigned >> shifts in zeros)."""
    width = a.dtype.itemsize * 8
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    count = n.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)
    big = count >= np.uint64(width)
    safe = np.where(big, 0, count).astype(unsigned)
    if left:
        out = np.where(big, 0, a.view(unsigned) << safe).astype(unsigned)
        return out.view(a.dtype)
    if a.dtype.kind == "u":
        return np.where(big, 0, a >> safe).astype(a.dtype)
    return np.where(big, a >> (width - 1), a >> safe.astype(a.dtype)).astype(a.dtype)


def bits(ev, call, scope):
    args = val.aligned(*_args(ev, call, scope))
    f = call.func
    if f == "bit_not":
        return np.invert(args[0])
    a, b = np.broadcast_arrays(*args)
    if f in ("shift_left", "shift_right"):
        return _shift(a, b, f == "shift_left")
    return {"bit_and": np.bitwise_and, "bit_or": np.bitwise_or, "bit_xor": np.bitwise_xor}[f](a, b)


def max_min(ev, call, scope):
    if "axis" in dict(call.kwargs):
        return reduce(ev, call, scope)
    a, b = _args(ev, call, scope)
    return val.maximum(a, b) if call.func == "max" else val.minimum(a, b)


def reduce(ev, call, scope):
    return val.reduce(call.func, ev.eval(call.args[0], scope), _axis(call))


def scan(ev, call, scope):
    """cumsum, cumprod (sequential, in f32 or the integer type, wrapping), cummax, cummin:
    inclusive, along the axis."""
    v = ev.eval(call.args[0], scope)
    if v.dtype == val.BOOL:
        v = v.astype(val.I32)
    ax = GRID + _axis(call)
    if call.func == "cumsum":
        return np.cumsum(v, axis=ax, dtype=v.dtype)
    if call.func == "cumprod":
        return np.cumprod(v, axis=ax, dtype=v.dtype)
    if call.func == "cummax":
        return np.maximum.accumulate(val.without_nan(v, "max"), axis=ax)
    return np.minimum.accumulate(val.without_nan(v, "min"), axis=ax)


def take(ev, call, scope):
    """x[..., idx[i], ...] along the axis; an index outside 0 .. extent - 1 reads 0."""
    x, idx = _args(ev, call, scope)
    k = _axis(call)
    rank = val.tile_rank(x)
    x = val.with_rank(x, rank)
    extent = x.shape[GRID + k]
    valid = (idx >= 0) & (idx < extent)
    safe = np.where(valid, idx, 0)
    m = idx.shape[-1]
    shape = safe.shape[:GRID] + (1,) * k + (m,) + (1,) * (rank - k - 1)
    grid = np.broadcast_shapes(x.shape[:GRID], safe.shape[:GRID])
    target = grid + x.shape[GRID:GRID + k] + (m,) + x.shape[GRID + k + 1:]
    safe = np.broadcast_to(safe.reshape(shape), target)
    valid = np.broadcast_to(valid.reshape(shape), target)
    x = np.broadcast_to(x, grid + x.shape[GRID:])
    out = np.take_along_axis(x, safe, axis=GRID + k)
    return np.where(valid, out, np.zeros((), out.dtype))


def where(ev, call, scope):
    return val.select(*_args(ev, call, scope))


def arange(ev, call, scope):
    return val.arange(ev.size(call.args[0], scope, "arange length"))


def full(ev, call, scope):
    shape_list = call.args[0]
    items = shape_list.items if isinstance(shape_list, ir.ShapeList) else (shape_list,)
    shape = tuple(ev.size(i, scope, "shape") for i in items)
    return val.full(shape, ev.eval(call.args[1], scope))


def expand(ev, call, scope):
    return val.expand(ev.eval(call.args[0], scope), _axis(call))


def convert(ev, call, scope):
    """f32(x), i32(x), i64(x), u32(x) (values.to_int: saturating from floats, wrapping between
    integers)."""
    x = ev.eval(call.args[0], scope)
    return val.to_f32(x) if call.func == "f32" else val.to_int(x, val.VALUE_DTYPES[call.func])


def narrow(ev, call, scope):
    return val.round_to(call.func, ev.eval(call.args[0], scope))
