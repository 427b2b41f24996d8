"""Reductions (sum / max / min along an axis, or of a whole 1-D tile).

Along the columns of a 2-D tile (axis = 1): each thread reduces its own register block, then the
TC threads that share the rows combine with warp shuffles (xor butterfly, so every one of them
ends with the result: row vectors are replicated over the row's threads); with TC > 32 the warps
of a row meet in shared memory. Along the rows (axis = 0) the partial results of the TR threads of
a column sit in different warps and meet in shared memory. A whole 1-D tile reduces to a scalar
with a block all-reduce. Replicated elements (a tile smaller than its thread axis) contribute
once: replicas contribute the identity. Functions of the kernel's emitter (`gen`), as in
mainloops/simt/dots.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import builtins
from compiler.cuda import analysis, int_ops
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

# -- reductions -------------------------------------------------------------------------

def reduction(gen, e: ir.Call, ctx) -> str:
    axis = dict(e.kwargs)["axis"].value
    x = e.args[0]
    shape = tuple(gen.size(s) for s in x.ty.shape)
    op = _Combine.of(builtins.combine_of(e), e.ty.dtype)
    if len(shape) == 1:
        return _reduce_flat(gen, x, shape, op)
    if len(shape) != 2:
        raise CompileError(e.span, "the CUDA backend reduces tiles of rank 1 and 2 only")
    out_kind = "row" if axis == 1 else "col"
    body = gen.elem(x, gen.ctx_for("2d", shape))  # before the result's declaration, as ever
    res = gen.declare(None, out_kind, (shape[0] if axis == 1 else shape[1],), e.ty.dtype)
    if axis == 1:
        _reduce_rows(gen, body, shape, op, res)
    else:
        _reduce_columns(gen, body, shape, op, res)
    if ctx is not None and ctx.native and ctx.kind == out_kind:
        return gen.access(res, ctx)
    return gen.through_shared(res, ctx)


@dataclass(frozen=True)
class _Combine:
    """One reduction's operator: its identity, C type and how two partial values combine, for
    values of `dtype` (the result's: f32 for every float, or i32, i64, u32; integer sums wrap)."""

    combine: str  # "add", "max", "min" (compiler/builtins.py)
    dtype: str
    ident: str
    ctype: str

    @staticmethod
    def of(combine: str, dtype: str) -> _Combine:
        fold = "sum" if combine == "add" else combine  # int_ops.identity's name
        return _Combine(combine, dtype, int_ops.identity(fold, dtype), int_ops.value_ctype(dtype))

    @property
    def is_float(self) -> bool:
        return self.ctype == "float"

    def __call__(self, a: str, b: str) -> str:
        if self.combine == "add":
            return f"({a} + {b})"
        return f"f{self.combine}f({a}, {b})" if self.is_float else f"{self.combine}({a}, {b})"

    def put(self, buf: str, index: str, value: str) -> str:
        """Write a partial into a shared buffer bit for bit (a conversion would round integer
        partials above 2^24; an i64 takes two words)."""
        return int_ops.shared_put(self.dtype, buf, index, value)

    def get(self, buf: str, index: str) -> str:
        return int_ops.shared_get(self.dtype, buf, index)

    def words(self, n: int) -> int:
        return n * int_ops.shared_words(self.dtype)


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
    lane_allreduce(gen, res, dr.count, gen.plan.grid.cols, op)


def _reduce_columns(gen, body: str, shape: tuple[int, ...], op: _Combine, res) -> None:
    """axis = 0: each thread folds its rows of each of its columns; the TR threads of a column
    sit in different warps, so they combine through shared memory."""
    dr, dc = gen.dists("2d", shape)
    _fold_own(gen, body, op, res, (dc, "_j", "_c"), (dr, "_i", "_r"))
    tr = gen.plan.grid.rows
    buf = gen.smem.alloc_scratch(op.words(tr * shape[1]))
    gen.sync()
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _j = 0; _j < {dc.count}; ++_j)")
    gen.out.line(op.put(buf, f"th_r * {shape[1]} + {dc.position('_j')}", f"{res.cname}[_j]"))
    gen.out.close()
    gen.sync()
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _j = 0; _j < {dc.count}; ++_j)")
    gen.out.line(f"{op.ctype} a_ = {op.ident};")
    gen.out.line(
        f"for (int q_ = 0; q_ < {min(tr, shape[0])}; ++q_) "
        f"a_ = {op('a_', op.get(buf, f'q_ * {shape[1]} + {dc.position(chr(95) + chr(106))}'))};"
    )
    gen.out.line(f"{res.cname}[_j] = a_;")
    gen.out.close()

# A max or min fold of at least this many elements per thread runs as the schedule's interleaved
# chains (Schedule.fold_chains, by default schedule.FOLD_CHAINS: why, there)
CHAINED_FOLD = 8


def _fold_own(gen, body: str, op: _Combine, res, kept, folded) -> None:
    """Each thread folds its own elements along the reduced axis: for each of its positions on the
    kept axis (`kept` = (distribution, loop index, position name)), the identity combined with
    every element it holds along `folded`, masked where the tile is smaller than its threads."""
    (keep, k, k_pos), (fold, f, f_pos) = kept, folded
    chains = gen.plan.fold_chains
    chained = op.combine in ("max", "min") and chains > 1 and fold.count >= CHAINED_FOLD
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int {k} = 0; {k} < {keep.count}; ++{k})")
    gen.out.line(f"const int {k_pos} = {keep.position(k)}; (void){k_pos};")
    gen.out.line(f"{op.ctype} a_{f'[{chains}]' if chained else f' = {op.ident}'};")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int {f} = 0; {f} < {fold.count}; ++{f})")
    gen.out.line(f"const int {f_pos} = {fold.position(f)}; (void){f_pos};")
    contrib = body if fold.primary() == "true" else f"({fold.primary()} ? {body} : {op.ident})"
    if chained:
        _chain_step(gen, op, f, contrib, chains)
    else:
        gen.out.line(f"a_ = {op('a_', contrib)};")
    gen.out.close()
    result = _pairwise(op, [f"a_[{c}]" for c in range(chains)]) if chained else "a_"
    gen.out.line(f"{res.cname}[{k}] = {result};")
    gen.out.close()


def _pairwise(op: _Combine, values: list[str]) -> str:
    """The chains' results combined as a balanced tree: ((a0, a1), (a2, a3)) for four."""
    if len(values) == 1:
        return values[0]
    half = len(values) // 2
    return op(_pairwise(op, values[:half]), _pairwise(op, values[half:]))


def _chain_step(gen, op: _Combine, f: str, contrib: str, n: int) -> None:
    """Element `f` of a chained max/min fold into chain f % n: the first element of
    chain 0 from the identity and the first of the others as they are, so that a row of NaNs
    still folds to the identity (fmaxf(NaN, -inf) is -inf) and every other row to the fold of
    its elements, bit for bit as one chain (max and min are exact in any order)."""
    chain = f"a_[{f} % {n}]"
    gen.out.line(f"const {op.ctype} el_ = {contrib};")
    gen.out.line(f"{chain} = {f} == 0 ? {op(op.ident, 'el_')} : {f} < {n} ? el_ : {op(chain, 'el_')};")


def lane_allreduce(gen, res, count: int, lanes: int, comb: _Combine) -> None:
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
    buf = gen.smem.alloc_scratch(comb.words(gen.plan.grid.rows * groups * count))
    gen.sync()
    gen.out.open(f"if (th_c % {group} == 0)")
    gen.out.line("#pragma unroll")
    gen.out.line(
        f"for (int _i = 0; _i < {count}; ++_i) "
        + comb.put(buf, f"(th_r * {groups} + th_c / {group}) * {count} + _i", f"{res.cname}[_i]")
    )
    gen.out.close()
    gen.sync()
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _i = 0; _i < {count}; ++_i)")
    gen.out.line(f"{comb.ctype} a_ = {comb.get(buf, f'(th_r * {groups}) * {count} + _i')};")
    gen.out.line(
        f"for (int q_ = 1; q_ < {groups}; ++q_) "
        f"a_ = {comb('a_', comb.get(buf, f'(th_r * {groups} + q_) * {count} + _i'))};"
    )
    gen.out.line(f"{res.cname}[_i] = a_;")
    gen.out.close()

def block_allreduce(gen, acc: str, comb: _Combine) -> None:
    t = gen.plan.grid.threads
    off = 16
    while off >= 1:
        gen.out.line(f"{acc} = {comb(acc, f'__shfl_xor_sync(0xffffffffu, {acc}, {off})')};")
        off //= 2
    warps = (t + 31) // 32
    if warps == 1:
        return
    buf = gen.smem.alloc_scratch(comb.words(warps))
    gen.sync()
    gen.out.line(f"if ((th_id & 31) == 0) {comb.put(buf, 'th_id >> 5', acc)}")
    gen.sync()
    gen.out.line(f"{acc} = {comb.get(buf, '0')};")
    gen.out.line(f"for (int q_ = 1; q_ < {warps}; ++q_) {acc} = {comb(acc, comb.get(buf, 'q_'))};")
