"""Stores: a `Store` statement as the C code that writes a tile (or one element) to a tensor.

Each thread writes the elements it owns (replicas stay silent), guarded by the bounds checks that
range analysis cannot prove unnecessary. Two wider forms where the layout allows: 16-byte stores
of four f32 neighbours (the conditions of vector loads, exprs.vector_ok), and pair stores of a tile
in the tensor-core accumulator layout: each thread holds columns 2t and 2t + 1 of its rows
(layout.MmaDist), so the pair goes out as one 8-byte (f32) or 4-byte (bf16, f16) store. A warp's
store then writes 8 rows x 32 contiguous bytes, whole 32-byte sectors, instead of two instructions
that each write every other 4-byte word of those sectors: half the store instructions and sector
writes of the epilogue (matmul's C, attention's O)."""

from __future__ import annotations

from common import dtypes
from compiler.cuda import analysis, int_ops
from compiler.cuda.emit import INT_SUFFIX, from_f32
from compiler.cuda.layout import MmaDist
from compiler.cuda.mainloops.tma_ws import store as tma_store
from compiler.cuda.stores.values import pair_values, pair_write, pure
from compiler.cuda.values import Ctx
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError


def store(gen, s: ir.Store) -> None:
    param = gen.tensor(s.tensor, s.span)
    tile_axes = [i for i, it in enumerate(s.index) if not isinstance(it, ir.SliceIndex)]
    shape = tuple(gen.item_extent(s.index[i], param, i) for i in tile_axes)
    value = s.value
    if not tile_axes:
        v = gen.scalar(value)
        ptr, pred = gen.element_address(param, s.index, ())
        gen.out.open("if (th_id == 0" + (f" && {pred}" if pred != "true" else "") + ")")
        gen.out.line(store_line(gen, param, ptr, s.op, v, value))
        gen.out.close()
        return
    if len(shape) > 2:
        raise CompileError(s.span, "the CUDA backend stores tiles of rank 1 and 2 only")
    if isinstance(value.ty, ir.TileType) and value.ty.rank == 1:
        kind = analysis.natural_kind(value, gen.plan.hints) or "flat"
    else:
        kind = "2d" if len(shape) == 2 else "flat"
    ctx = gen.ctx_for(kind, shape)
    if tma_store.store_ok(gen, s, param, ctx):
        tma_store.store(gen, s, param, ctx)
        return
    if vector_store_ok(gen, s, ctx):
        vector_store(gen, s, param, ctx)
        return
    if pair_store_ok(gen, s, param, ctx):
        pair_store(gen, s, param, ctx)
        return
    if isinstance(value.ty, ir.TileType):
        v = gen.tile_elem(value, ctx)
    else:
        v = gen.scalar(value)
    ptr, pred = gen.element_address(param, s.index, ctx.pos)
    cond = " && ".join(c for c in (gen.owner(kind, shape), pred) if c != "true") or "true"
    body = [f"if ({cond}) {store_line(gen, param, ptr, s.op, v, value)}"]
    gen.emit_loop(ctx, body)


def vector_store_ok(gen, s: ir.Store, ctx: Ctx) -> bool:
    """16-byte stores: the same conditions as vector loads, no replicas, a plain `=`."""
    if s.op != "=" or not isinstance(s.value.ty, ir.TileType) or s.value.ty.dtype != "f32":
        return False
    if gen.owner(ctx.kind, ctx.shape) != "true":
        return False
    probe = ir.Load(s.tensor, s.index, s.span, None, s.value.ty)
    return gen.vector_ok(probe, ctx) and gen.small(ctx)


def vector_store(gen, s: ir.Store, param: ir.TensorParam, ctx: Ctx) -> None:
    val = gen.materialize(s.value, ctx.kind)
    ds = gen.dists(ctx.kind, ctx.shape)
    for a, (d, loc, pos) in enumerate(zip(ds, ctx.local, ctx.pos, strict=True)):
        step = "4" if a == len(ds) - 1 else "1"
        gen.out.line("#pragma unroll")
        gen.out.open(f"for (int {loc} = 0; {loc} < {d.count}; {loc} += {step})")
        gen.out.line(f"const int {pos} = {d.position(loc)}; (void){pos};")
    ptr, pred = gen.element_address(param, s.index, ctx.pos)
    base = val.cname + "".join(f"[{x}]" for x in ctx.local[:-1])
    last = ctx.local[-1]
    parts = ", ".join(f"{base}[{last} + {q}]" for q in range(4))
    st = f"*reinterpret_cast<float4*>(&{ptr}) = make_float4({parts});"
    gen.out.line(st if pred == "true" else f"if ({pred}) {st}")
    for _ in ds:
        gen.out.close()


def store_line(gen, param: ir.TensorParam, ptr: str, op: str, v: str, value: ir.Expr) -> str:
    """One element's store: `=` converts to the tensor's type; `+=` etc. read the old value."""
    target_type = dtypes.get(param.dtype).value_type
    target_type = "f32" if dtypes.get(param.dtype).narrow else target_type
    v = gen.cast(v, value, target_type)
    if op == "=":
        return f"{ptr} = {from_f32(param.dtype, v)};"
    if op in ir.ATOMIC_OPS:
        return int_ops.atomic(gen, op, param.dtype, ptr, v) + ";"
    old = gen.read_global(param, ptr)
    binop = op[0]
    if binop == "/" and target_type in INT_SUFFIX:
        new = int_ops.divide(gen, target_type, old, v)
    else:
        new = f"({old} {binop} {v})"
    return f"{ptr} = {from_f32(param.dtype, new)};"


def pair_store_ok(gen, s: ir.Store, param: ir.TensorParam, ctx: Ctx) -> bool:
    """A plain `=` of a 2-D tile in the accumulator layout, whose column pairs are both inside
    or both outside the tensor (even last dim, even slice start), read by an expression that
    emits no code of its own (evaluated once per column of the pair)."""
    if s.op != "=" or ctx.kind != "2d" or param.dtype not in ("f32", "bf16", "f16"):
        return False
    d = gen.dists(ctx.kind, ctx.shape)[-1]
    if not isinstance(d, MmaDist) or d.lanes != 4 or gen.owner(ctx.kind, ctx.shape) != "true":
        return False
    last = s.index[-1]
    if isinstance(last, ir.SliceIndex) or gen.dims_of(param)[-1] % 2:
        return False
    if isinstance(last, ir.SliceRange) and analysis.int_range(last.start, gen.scope.ranges).divisor % 2:
        return False
    return pure(gen, s.value, ctx.shape)


def pair_store(gen, s: ir.Store, param: ir.TensorParam, ctx: Ctx) -> None:
    dr, dc = gen.dists(ctx.kind, ctx.shape)
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _i = 0; _i < {dr.count}; ++_i)")
    gen.out.line(f"const int _r = {dr.position('_i')}; (void)_r;")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _j = 0; _j < {dc.count}; _j += 2)")
    gen.out.line(f"const int _c = {dc.position('_j')}; (void)_c;")
    lo, hi = pair_values(gen, s.value, ctx)
    ptr, pred = gen.element_address(param, s.index, ctx.pos)
    st = pair_write(param.dtype, f"&{ptr}", lo, hi)
    gen.out.line(st if pred == "true" else f"if ({pred}) {st}")
    gen.out.close()
    gen.out.close()
