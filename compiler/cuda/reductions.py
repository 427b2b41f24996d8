"""Reductions (sum / max / min along an axis, or of a whole 1-D tile).

Along the columns of a 2-D tile (axis = 1): each thread reduces its own register block, then the
TC threads that share the rows combine with warp shuffles (xor butterfly, so every one of them
ends with the result: row vectors are replicated over the row's threads); with TC > 32 the warps
of a row meet in shared memory. Along the rows (axis = 0) the partial results of the TR threads of
a column sit in different warps and meet in shared memory. A whole 1-D tile reduces to a scalar
with a block all-reduce. Replicated elements (a tile smaller than its thread axis) contribute
once: replicas contribute the identity. Functions of the kernel's emitter (`gen`), as in dots.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import builtins
from compiler.cuda import analysis
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

IDENT = {  # by the reduction's operator (compiler/builtins.py combine): (float, int)
    "add": ("0.0f", "0"),
    "max": ("__int_as_float(0xff800000)", "INT_MIN_"),
    "min": ("__int_as_float(0x7f800000)", "INT_MAX_"),
}


# -- reductions -------------------------------------------------------------------------

def reduction(gen, e: ir.Call, ctx) -> str:
    axis = dict(e.kwargs)["axis"].value
    x = e.args[0]
    shape = tuple(gen.size(s) for s in x.ty.shape)
    if x.ty.dtype in ("i64", "u32"):
        raise CompileError(e.span, f"the CUDA backend reduces f32 and i32 tiles, not {x.ty.dtype} "
                                   "(convert with i32(...) or f32(...) first)")
    op = _Combine.of(builtins.combine_of(e), x.ty.dtype in ("f32", "bf16", "f16"))
    if len(shape) == 1:
        return _reduce_flat(gen, x, shape, op)
    if len(shape) != 2:
        raise CompileError(e.span, "the CUDA backend reduces tiles of rank 1 and 2 only")
    out_kind = "row" if axis == 1 else "col"
    body = gen.elem(x, gen.ctx_for("2d", shape))  # before the result's declaration, as ever
    res = gen.declare(None, out_kind, (shape[0] if axis == 1 else shape[1],), x.ty.dtype)
    if axis == 1:
        _reduce_rows(gen, body, shape, op, res)
    else:
        _reduce_columns(gen, body, shape, op, res)
    if ctx is not None and ctx.native and ctx.kind == out_kind:
        return gen.access(res, ctx)
    return gen.through_shared(res, ctx)


@dataclass(frozen=True)
class _Combine:
    """One reduction's operator: its identity, C type and how two partial values combine."""

    combine: str  # "add", "max", "min" (compiler/builtins.py)
    is_float: bool
    ident: str
    ctype: str

    @staticmethod
    def of(func: str, is_float: bool) -> _Combine:
        ident = (
            IDENT[func][0 if is_float else 1]
            .replace("INT_MIN_", "(-2147483647 - 1)")
            .replace("INT_MAX_", "2147483647")
        )
        return _Combine(func, is_float, ident, "float" if is_float else "int")

    def __call__(self, a: str, b: str) -> str:
        if self.combine == "add":
            return f"({a} + {b})"
        return f"f{self.combine}f({a}, {b})" if self.is_float else f"{self.combine}({a}, {b})"


def _reduce_flat(gen, x: ir.Expr, shape: tuple[int, ...], op: _Combine) -> str:
    kind = analysis.natural_kind(x, gen.plan.hints) or "flat"
    src = gen.ctx_for(kind, shape)
    body = gen.elem(x, src)
    acc = gen.fresh("red")
    gen.out.line(f"{op.ctype} {acc} = {op.ident};")
    gen.emit_loop(src, [f"if ({gen.owner(kind, shape)}) {acc} = {op(acc, body)};"])
    block_allreduce(gen, acc, op)
    return acc


def _reduce_rows(gen, body: str, shape: tuple[int, ...], op: _Combine, res) -> None:
    """axis = 1: each thread folds its columns of each of its rows, then the lanes of a row."""
    dr, dc = gen.dists("2d", shape)
    _fold_own(gen, body, op, res, (dr, "_i", "_r"), (dc, "_j", "_c"))
    lane_allreduce(gen, res, dr.count, gen.plan.grid.cols, op, op.ctype)


def _reduce_columns(gen, body: str, shape: tuple[int, ...], op: _Combine, res) -> None:
    """axis = 0: each thread folds its rows of each of its columns; the TR threads of a column
    sit in different warps, so they combine through shared memory."""
    dr, dc = gen.dists("2d", shape)
    _fold_own(gen, body, op, res, (dc, "_j", "_c"), (dr, "_i", "_r"))
    tr = gen.plan.grid.rows
    buf = gen.smem.alloc_scratch(tr * shape[1])
    gen.sync()
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _j = 0; _j < {dc.count}; ++_j)")
    gen.out.line(f"{buf}[th_r * {shape[1]} + {dc.position('_j')}] = {_word(op.ctype, f'{res.cname}[_j]')};")
    gen.out.close()
    gen.sync()
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _j = 0; _j < {dc.count}; ++_j)")
    gen.out.line(f"{op.ctype} a_ = {op.ident};")
    gen.out.line(
        f"for (int q_ = 0; q_ < {min(tr, shape[0])}; ++q_) "
        f"a_ = {op('a_', _value(op.ctype, f'{buf}[q_ * {shape[1]} + {dc.position(chr(95) + chr(106))}]'))};"
    )
    gen.out.line(f"{res.cname}[_j] = a_;")
    gen.out.close()

def _fold_own(gen, body: str, op: _Combine, res, kept, folded) -> None:
    """Each thread folds its own elements along the reduced axis: for each of its positions on the
    kept axis (`kept` = (distribution, loop index, position name)), the identity combined with
    every element it holds along `folded`, masked where the tile is smaller than its threads."""
    (keep, k, k_pos), (fold, f, f_pos) = kept, folded
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int {k} = 0; {k} < {keep.count}; ++{k})")
    gen.out.line(f"const int {k_pos} = {keep.position(k)}; (void){k_pos};")
    gen.out.line(f"{op.ctype} a_ = {op.ident};")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int {f} = 0; {f} < {fold.count}; ++{f})")
    gen.out.line(f"const int {f_pos} = {fold.position(f)}; (void){f_pos};")
    contrib = body if fold.primary() == "true" else f"({fold.primary()} ? {body} : {op.ident})"
    gen.out.line(f"a_ = {op('a_', contrib)};")
    gen.out.close()
    gen.out.line(f"{res.cname}[{k}] = a_;")
    gen.out.close()


def lane_allreduce(gen, res, count: int, lanes: int, comb, ctype: str) -> None:
    """Combine the partial results of the `lanes` threads that share each row: the ones of one
    warp (neighbouring lanes) with shuffles, then the warps of a row through shared memory."""
    if lanes == 1:
        return
    group = gen.plan.grid.lane_group
    warp_lanes = min(lanes, group)
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _i = 0; _i < {count}; ++_i)")
    off = warp_lanes // 2
    while off >= 1:
        gen.out.line(
            f"{res.cname}[_i] = "
            f"{comb(f'{res.cname}[_i]', f'__shfl_xor_sync(0xffffffffu, {res.cname}[_i], {off})')};"
        )
        off //= 2
    gen.out.close()
    if lanes <= group:
        return
    groups = lanes // group
    buf = gen.smem.alloc_scratch(gen.plan.grid.rows * groups * count)
    gen.sync()
    gen.out.open(f"if (th_c % {group} == 0)")
    gen.out.line("#pragma unroll")
    gen.out.line(
        f"for (int _i = 0; _i < {count}; ++_i) "
        f"{buf}[(th_r * {groups} + th_c / {group}) * {count} + _i] = {_word(ctype, f'{res.cname}[_i]')};"
    )
    gen.out.close()
    gen.sync()
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _i = 0; _i < {count}; ++_i)")
    gen.out.line(f"{ctype} a_ = {_value(ctype, f'{buf}[(th_r * {groups}) * {count} + _i]')};")
    gen.out.line(
        f"for (int q_ = 1; q_ < {groups}; ++q_) "
        f"a_ = {comb('a_', _value(ctype, f'{buf}[(th_r * {groups} + q_) * {count} + _i]'))};"
    )
    gen.out.line(f"{res.cname}[_i] = a_;")
    gen.out.close()

def _word(ctype: str, value: str) -> str:
    """An int partial into a float word of shared memory bit for bit (a conversion would round
    partials above 2^24, and make the combine below mix int and float)."""
    return f"__int_as_float({value})" if ctype == "int" else value


def _value(ctype: str, word: str) -> str:
    return f"__float_as_int({word})" if ctype == "int" else word


def block_allreduce(gen, acc: str, comb) -> None:
    t = gen.plan.grid.threads
    off = 16
    while off >= 1:
        gen.out.line(f"{acc} = {comb(acc, f'__shfl_xor_sync(0xffffffffu, {acc}, {off})')};")
        off //= 2
    warps = (t + 31) // 32
    if warps == 1:
        return
    buf = gen.smem.alloc_scratch(warps)
    gen.sync()
    ctype = getattr(comb, "ctype", "float")
    gen.out.line(f"if ((th_id & 31) == 0) {buf}[th_id >> 5] = {_word(ctype, acc)};")
    gen.sync()
    gen.out.line(f"{acc} = {_value(ctype, f'{buf}[0]')};")
    gen.out.line(f"for (int q_ = 1; q_ < {warps}; ++q_) {acc} = {comb(acc, _value(ctype, f'{buf}[q_]'))};")
