"""Grid-batched values for the reference interpreter, and the arithmetic on them.

Every runtime value is one numpy array holding that value for every CTA of the grid at once:
three leading *grid axes* (x, y, z), each either the grid's CTA count along that axis or 1 when
the value does not depend on that block index, followed by the value's own *tile axes* (none for
a scalar). So `ctx.block.x` is `arange(Gx)` shaped [Gx, 1, 1]; the literal 2.0 is [1, 1, 1]; a
tile loaded at `ctx.block.x * BR :+ BR` along rows is [Gx, 1, 1, BR, D].

Numpy broadcasting then does the right thing across grid axes for free. Across tile axes the
language only allows explicit broadcasting (equal extents or 1), which numpy also accepts, once a
scalar operand has been given trailing unit axes up to the other operand's rank (`with_rank`).

dtypes: f32 values are float32, i32 values int32, bool values bool. bf16 and f16 values (loads of
such tensors, `bf16()` / `f16()` casts) are float32 arrays too, holding only numbers exactly
representable in the narrow type (e4m3 and e5m2 loads likewise: every fp8 value is exact in
f32): arithmetic on them is f32 arithmetic, as the language says, and
`round_to` is where a value enters a narrow type. `dot` takes its precision from the IR
(`ir.DotPrecision`) rather than from array dtypes.
"""

from __future__ import annotations

import numpy as np

from common.storage import STORAGE_DTYPES, bf16_dtype  # noqa: F401 - the interpreter's tensors hold these
from compiler.interp import blas

GRID_RANK = 3  # x, y, z
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
I64 = np.dtype(np.int64)
U32 = np.dtype(np.uint32)
BOOL = np.dtype(np.bool_)
VALUE_DTYPES = {"f32": F32, "i32": I32, "i64": I64, "u32": U32, "bool": BOOL, "bf16": F32, "f16": F32,
                "e4m3": F32, "e5m2": F32}
# The promotion order (check_types.promote): f32 over every integer, i64 over i32 and u32 (the
# checker never lets i32 meet u32), any integer over bool.
_RANK = (F32, I64, U32, I32, BOOL)


def tile_rank(v: np.ndarray) -> int:
    return v.ndim - GRID_RANK


def with_rank(v: np.ndarray, rank: int) -> np.ndarray:
    """Append unit tile axes so that `v` broadcasts against tiles of `rank` axes."""
    missing = rank - tile_rank(v)
    return v.reshape(v.shape + (1,) * missing) if missing > 0 else v


def constant(value: float | int | bool, dtype: np.dtype) -> np.ndarray:
    """A value that is the same in every CTA."""
    return np.full((1,) * GRID_RANK, value, dtype=dtype)


def as_int(v: np.ndarray, what: str = "size") -> int:
    """A compile-time integer (slice extent, loop step, arange length) out of a uniform value."""
    if v.size != 1:
        raise ValueError(f"{what} differs between CTAs")
    return int(v.reshape(()))


def common_dtype(*values: np.ndarray) -> np.dtype:
    """The language's promotion: any f32 operand makes f32, else the widest integer, else bool."""
    kinds = {v.dtype for v in values}
    return next(d for d in _RANK if d in kinds)


def cast(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return v if v.dtype == dtype else v.astype(dtype)


def aligned(*values: np.ndarray) -> list[np.ndarray]:
    rank = max(tile_rank(v) for v in values)
    return [with_rank(v, rank) for v in values]


_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply}
# What `binary` computes for two f32 operands, as ufuncs that can write into a given array
F32_UFUNCS = {**_ARITH, "/": np.true_divide}
_COMPARE = {"==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
            ">": np.greater, ">=": np.greater_equal}


def binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An elementwise binary operator with the language's promotion and broadcasting."""
    a, b = aligned(a, b)
    if op == "and":
        return np.logical_and(a, b)
    if op == "or":
        return np.logical_or(a, b)
    dtype = common_dtype(a, b)
    if dtype == BOOL and op not in _COMPARE:
        dtype = I32  # arithmetic on bools counts them, as C does
    a, b = cast(a, dtype), cast(b, dtype)
    if op in _ARITH:
        return _ARITH[op](a, b)
    if op in _COMPARE:
        return _COMPARE[op](a, b)
    if op == "/":
        return np.floor_divide(a, b) if dtype != F32 else np.true_divide(a, b)
    if op == "%":
        # Paired with floor division: a == (a / b) * b + a % b, with the sign of b.
        return np.mod(a, b)
    raise ValueError(f"unknown operator {op}")


def negate(v: np.ndarray) -> np.ndarray:
    return np.negative(cast(v, I32) if v.dtype == BOOL else v)


def logical_not(v: np.ndarray) -> np.ndarray:
    return np.logical_not(v)


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = aligned(a, b)
    dtype = common_dtype(a, b)
    return np.fmax(cast(a, dtype), cast(b, dtype))  # fmaxf: a NaN against a number gives the number


def minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = aligned(a, b)
    dtype = common_dtype(a, b)
    return np.fmin(cast(a, dtype), cast(b, dtype))


def select(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    cond, a, b = aligned(cond, a, b)
    dtype = common_dtype(a, b)
    return np.where(cast(cond, BOOL), cast(a, dtype), cast(b, dtype))


_UNARY_F32 = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt}


def unary_math(func: str, v: np.ndarray) -> np.ndarray:
    if func == "abs":
        return np.abs(v if v.dtype != BOOL else cast(v, I32))
    return _UNARY_F32[func](cast(v, F32))


def reduce(func: str, v: np.ndarray, axis: int) -> np.ndarray:
    """`sum/max/min(v, axis = k)`: tile axis k disappears; f32 sums stay f32 (pairwise)."""
    ax = GRID_RANK + axis
    if func == "sum":
        dtype = I32 if v.dtype == BOOL else v.dtype
        return np.sum(v, axis=ax, dtype=dtype)
    if func == "max":
        return np.max(without_nan(v, "max"), axis=ax)
    return np.min(without_nan(v, "min"), axis=ax)


def without_nan(v: np.ndarray, fold: str) -> np.ndarray:
    """A max (min) fold is fmaxf's (fminf's) from -inf (+inf): a NaN element counts as nothing,
    so it may as well be the fold's identity (a tile of NaNs folds to -inf / +inf)."""
    if v.dtype.kind != "f":
        return v
    return np.where(np.isnan(v), np.asarray(-np.inf if fold == "max" else np.inf, v.dtype), v)


def expand(v: np.ndarray, axis: int) -> np.ndarray:
    return np.expand_dims(v, GRID_RANK + axis)


def transpose(v: np.ndarray) -> np.ndarray:
    return np.swapaxes(v, -1, -2)


def arange(n: int) -> np.ndarray:
    return np.arange(n, dtype=I32).reshape((1,) * GRID_RANK + (n,))


def full(shape: tuple[int, ...], v: np.ndarray) -> np.ndarray:
    v = cast(with_rank(v, len(shape)), F32)
    return np.broadcast_to(v, v.shape[:GRID_RANK] + tuple(shape))


def to_f32(v: np.ndarray) -> np.ndarray:
    return cast(v, F32)


def to_int(v: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Conversion to an integer type. From f32: towards zero, saturating at the type's bounds,
    NaN giving 0 (what cvt.rzi.{s32,s64,u32}.f32 does, which the CUDA casts compile to). From
    another integer (or bool): the low bits, two's complement (C's conversion; wraps)."""
    if v.dtype != F32:
        return cast(v, dtype)
    info = np.iinfo(dtype)
    wide = np.nan_to_num(np.trunc(v.astype(np.float64)), nan=0.0)
    # float64 cannot hold i64's max: the comparison saturates what rounds to 2^63 or above
    high = wide >= float(info.max)
    clipped = np.clip(wide, float(info.min), float(info.max))
    return np.where(high, info.max, np.where(high, 0, clipped).astype(dtype)).astype(dtype)


def to_i32(v: np.ndarray) -> np.ndarray:
    return to_int(v, I32)


_TF32_DROPPED = 13  # f32 has 23 fraction bits, TF32 keeps 10
_TF32_KEEP = np.uint32((0xFFFFFFFF >> _TF32_DROPPED) << _TF32_DROPPED)
_EXPONENT = np.uint32(0x7F800000)
_FRACTION = np.uint32(0x007FFFFF)
_TF32_NAN = np.uint32(0x7FFFE000)  # the one NaN of TF32 rounding (positive, every kept bit set)


def round_to(kind: str, v: np.ndarray) -> np.ndarray:
    """`v` (any number dtype) rounded to `kind`, returned as float32 (docs/language.md §4.1).

    bf16, f16: round to nearest, ties to even, from f32 (an i32 converts to f32 first, also to
    nearest even); magnitudes past the format's largest finite value become inf.
    tf32: round_tf32_bits on the f32 bits.
    """
    f = cast(v, F32)
    with np.errstate(over="ignore"):  # overflow to inf is the defined result
        if kind == "bf16":
            return f.astype(bf16_dtype()).astype(F32)
        if kind == "f16":
            return f.astype(np.float16).astype(F32)
    if kind == "tf32":
        return round_tf32_bits(np.ascontiguousarray(f).view(np.uint32)).view(F32)
    raise ValueError(f"no rounding to {kind}")


def round_tf32_bits(bits: np.ndarray) -> np.ndarray:
    """f32 bit patterns (uint32) rounded to TF32: 10 fraction bits kept, to nearest, ties to even
    (IEEE's default rounding, and what cvt.rn.tf32.f32 and the Hopper copy engine's TF32
    conversion do). Finite values round on their bits, subnormals too (no flush), and a magnitude
    that rounds past the largest TF32 value becomes inf; inf stays. Every NaN, whatever its sign
    and payload, becomes 0x7fffe000: what both of those give on the H200
    (benchmarks/results/nvidia-h200/tf32-rounding-2026-12-01).
    """
    bits = bits.astype(np.uint32, copy=False)
    lowest_kept = (bits >> np.uint32(_TF32_DROPPED)) & np.uint32(1)
    # half of the dropped part, less one unless the kept part is odd: a tie then rounds to even
    bias = np.uint32((1 << (_TF32_DROPPED - 1)) - 1) + lowest_kept
    finite = (bits + bias) & _TF32_KEEP  # a carry into the exponent is the right result
    special = (bits & _EXPONENT) == _EXPONENT
    nan = special & ((bits & _FRACTION) != 0)
    kept = np.where(nan, _TF32_NAN, bits)  # inf has no dropped bits
    return np.where(special, kept, finite)  # uint32 throughout: no copy to convert


def scaled(out: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray) -> np.ndarray:
    """An fp8 dot's result [.., M, N] times its scales (docs/language.md §8.1): element (i, j) is
    out[i, j] * (scale_a[i] * scale_b[j]), each product rounded to f32; a scalar scale stands for
    every row (column)."""
    sa = cast(scale_a, F32)
    sb = cast(scale_b, F32)
    sa = sa[..., :, None] if tile_rank(sa) == 1 else sa.reshape(sa.shape + (1, 1))
    sb = sb[..., None, :] if tile_rank(sb) == 1 else sb.reshape(sb.shape + (1, 1))
    with np.errstate(over="ignore", invalid="ignore"):  # inf and nan are defined results
        return (out * (sa * sb).astype(F32)).astype(F32)


def dot(a: np.ndarray, b: np.ndarray, mode: str = "f32") -> np.ndarray:
    """`dot(a, b)` for every CTA at once, as few large GEMMs rather than one per CTA.

    `mode` is the dot's `ir.DotPrecision.mode`. tf32 rounds both operands to TF32 first; bf16
    and f16 operands already hold only such values. Either way the products are exact in f32 (at
    most 11 x 11 significant bits) and the sums f32, as on tensor cores (the order of the sums,
    and so the last bits, may differ).

    Grid axes on which both operands vary become the batch of one `matmul`; grid axes on which
    only `a` varies are folded into the rows of a, those on which only `b` varies into the
    columns of b. Matmul's A[Gx,1,TM,TK] x B[1,Gy,TK,TN] so becomes a single
    [Gx*TM, TK] @ [TK, Gy*TN] product.
    """
    a, b = cast(a, F32), cast(b, F32)
    if mode == "tf32":
        a, b = round_to("tf32", a), round_to("tf32", b)
    g = GRID_RANK
    shared = [i for i in range(g) if a.shape[i] > 1 and b.shape[i] > 1]
    a_only = [i for i in range(g) if a.shape[i] > 1 and b.shape[i] == 1]
    b_only = [i for i in range(g) if b.shape[i] > 1 and a.shape[i] == 1]
    a_rest = [i for i in range(g) if a.shape[i] == 1]
    b_rest = [i for i in range(g) if b.shape[i] == 1]
    m, k = a.shape[g], a.shape[g + 1]
    n = b.shape[g + 1]
    sizes = [max(a.shape[i], b.shape[i]) for i in range(g)]
    batch = int(np.prod([sizes[i] for i in shared], dtype=np.int64))
    rows = int(np.prod([sizes[i] for i in a_only], dtype=np.int64))
    cols = int(np.prod([sizes[i] for i in b_only], dtype=np.int64))

    lhs = a.transpose(shared + a_only + a_rest + [g, g + 1]).reshape(batch, rows * m, k)
    rhs = b.transpose(shared + b_rest + [g] + b_only + [g + 1]).reshape(batch, k, cols * n)
    with blas.threads_for(batch * rows * m * k * cols * n):
        out = np.matmul(lhs, rhs)
    # out is [shared..., a_only..., M, b_only..., N]; put the grid axes back in x, y, z order.
    out = out.reshape([sizes[i] for i in shared] + [sizes[i] for i in a_only] + [m]
                      + [sizes[i] for i in b_only] + [n])
    position = {}
    for pos, axis in enumerate(shared + a_only):
        position[axis] = pos
    m_pos = len(shared) + len(a_only)
    for pos, axis in enumerate(b_only):
        position[axis] = m_pos + 1 + pos
    n_pos = out.ndim - 1
    present = sorted(position)
    out = out.transpose([position[i] for i in present] + [m_pos, n_pos])
    return out.reshape([sizes[i] if i in position else 1 for i in range(g)] + [m, n])
