"""dot(a, b): operands staged through shared memory, a register-blocked FMA loop.

Both operands are kept K-major in shared memory, S[k][x] with row stride x + 4 (16-byte aligned
rows, so each thread reads its 4-wide groups of rows of a and columns of b as float4): a is
S_a[k][m], b is S_b[k][n]. Each thread then owns an (M/TR) x (N/TC) block of the result and per k
does (M/TR) + (N/TC) shared loads and (M/TR)*(N/TC) FMAs.

Staging from a tensor: when the tensor's contiguous axis is the buffer's x axis, float4 global
loads are stored as float4 ("direct"); when it is the k axis (a in A[m, k], or b = transpose of a
row-major tile), float4 loads along k are stored as four scalars ("transposing"). A register tile
operand (flash attention's p) is written to shared memory by the threads that hold it.

Every function takes the kernel's emitter (`gen`, codegen.KernelGen) as its first argument: the one
context all emitters share; a dot on tensor cores goes to mma.py.
"""

from __future__ import annotations

from common import options
from compiler import builtins
from compiler.cuda import operands
from compiler.cuda import staged as staged_buffers
from compiler.cuda.mainloops.tma_ws import ring as tma
from compiler.cuda.mainloops.tma_ws import tf32 as tma_tf32
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

PAD = 4


def dot_unroll() -> int:
    """How far the k loop of dot is unrolled: 0 (the default) unrolls it fully, which gives the
    scheduler the most independent shared loads; PHOBOS_CUDA_DOT_UNROLL=N unrolls N steps (fewer
    registers), for measuring the trade-off."""
    return options.current().dot_unroll


def dot(gen, e: ir.Call, into):
    from compiler.cuda import mma
    from compiler.cuda.values import SharedTile

    dtype = mma.tensor_core_dtype(e, gen.plan.kernel, gen.plan.tf32)
    if dtype == "tf32" and gen.plan.wgmma and tma_tf32.swapped(gen, e):  # C^T = B^T A^T on the TMA ring
        return tma_tf32.dot(gen, e, into)
    if dtype is not None and gen.plan.tensor_cores:
        return mma.lower_dot(gen, e, into, dtype)
    a, b = e.args
    m, kk = (gen.size(s) for s in a.ty.shape)
    n = gen.size(b.ty.shape[1])
    gen.out.line(f"// dot [{m}x{kk}] x [{kk}x{n}]")
    ops = []
    writes = []
    for role, arg in (("a", a), ("b", b)):
        staged = staged_buffers.staged_operand(gen, arg)
        if isinstance(staged, SharedTile):
            ops.append(staged)
            continue
        x = m if role == "a" else n
        ptr = gen.smem.alloc_perm(kk * (x + PAD))
        tile = SharedTile(ptr, role, kk, x, x + PAD)
        ops.append(tile)
        writes.append((tile, arg))
    if writes:
        # registers first (they may need their own hoisted code), then one barrier pair
        prepared = [(t, _prepare(gen, arg, t)) for t, arg in writes]
        gen.sync_before_overwrite()
        for tile, prep in prepared:
            _write(gen, tile, prep)
        gen.sync()
    sa, sb = ops
    if into is None:
        into = gen.declare(None, "2d", (m, n), "f32")
        gen.emit_loop(
            gen.ctx_for("2d", (m, n)), [f"{gen.access(into, gen.ctx_for('2d', (m, n)))} = 0.0f;"]
        )
    _fma_loop(gen, into, sa, sb, m, n, kk)
    return into

def shared_tile(gen, load: ir.Load, role: str, transposed: bool, copies: int = 1):
    """The K-major shared buffer of a dot operand let (`copies` of it, one after the other)."""
    from compiler.cuda.values import SharedTile

    r, c = (gen.size(s) for s in load.ty.shape)
    # operand tile (as dot sees it): a is [x, k], b is [k, x]
    tr_, tc_ = (c, r) if transposed else (r, c)
    k, x = (tc_, tr_) if role == "a" else (tr_, tc_)
    ptr = gen.smem.alloc_perm(copies * k * (x + PAD))
    return SharedTile(ptr, role, k, x, x + PAD)

def stage_shared_let(gen, name: str, load: ir.Load, role: str, transposed: bool):
    if name in gen.plan.tc_lets:
        return stage_mma_let(gen, load, role, transposed)
    tile = shared_tile(gen, load, role, transposed)
    arg = (
        ir.Call(
            "transpose", (load,), load.span, ty=ir.TileType("f32", (load.ty.shape[1], load.ty.shape[0]))
        )
        if transposed
        else load
    )
    prep = _prepare(gen, arg, tile)
    gen.sync_before_overwrite()
    _write(gen, tile, prep)
    gen.sync()
    return tile

def mma_let_tile(gen, load: ir.Load, role: str, transposed: bool, ptr: str | None = None):
    """The tensor-core operand buffer of a let (at `ptr`, or newly allocated)."""

    r, c = (gen.size(s) for s in load.ty.shape)
    k, x = (c, r) if (role == "a") != transposed else (r, c)
    k_contiguous = (role == "a") != transposed
    # the operand type: a bf16 / f16 tensor's own; TF32 dots hold f32 (an i32 tensor converted)
    dtype = gen.tensor(load.tensor, load.span).dtype
    dtype = dtype if dtype in ("bf16", "f16") + ir.FP8 else "f32"
    if gen.plan.wgmma:
        from compiler.cuda.mainloops.wgmma import mma as wgmma

        # TF32 is read K-major only; the register pass (mainloops/wgmma/tf32.py) transposes and rounds it
        mn_major = False if dtype == "f32" else wgmma.core_layout(k_contiguous, x)
        if mn_major is not None:
            if ptr is None:
                return wgmma.alloc_core(gen, role, k, x, dtype, mn_major)
            return wgmma.CoreTile(ptr, role, k, x, dtype, mn_major)
    if ptr is None:
        return operands.alloc_tile(gen, role, k, x, k_contiguous, dtype, load.span)
    return operands.make_tile(ptr, role, k, x, k_contiguous, dtype, load.span)

def stage_mma_let(gen, load: ir.Load, role: str, transposed: bool):

    from compiler.cuda.mainloops.wgmma import tf32 as wgmma_tf32

    tile = mma_let_tile(gen, load, role, transposed)
    gen.sync_before_overwrite()
    guard = tma.before_split(gen)  # the producer warpgroup's threads copy nothing of it
    if guard:
        gen.out.open(f"if (th_id < {gen.plan.grid.threads})")
    if gen.plan.wgmma and tile.dtype == "f32":
        wgmma_tf32.stage(gen, tile, load)
    elif operands.stage_load(gen, tile, load):
        gen.out.line("cp_async_commit(); cp_async_wait<0>();")
    if guard:
        gen.out.close()
    if gen.plan.wgmma:
        gen.out.line("fence_async_smem();")
    gen.sync()
    return tile

def _prepare(gen, arg: ir.Expr, tile):
    """What a staging write needs: a plain 2-D load (maybe transposed), or a register tile."""
    transposed = builtins.is_transpose(arg)
    inner = arg.args[0] if transposed else arg
    if isinstance(inner, ir.Load) and inner.ty.rank == 2:
        plan = vector_plan(gen, tile, inner, transposed)
        regs = None
        if plan is not None:  # issue the global loads before the barrier that precedes the store
            regs = gen.fresh("st")
            gen.out.line(f"float4 {regs}[{plan['iters']}];")
            load_regs(gen, plan, inner, regs)
        return ("load", (inner, regs), transposed)
    from compiler.cuda.values import Val

    if (
        isinstance(inner, ir.Name)
        and isinstance(gen.scope.vals.get(inner.name), Val)
        and gen.scope.vals[inner.name].kind == "2d"
    ):
        return ("regs", gen.scope.vals[inner.name], transposed)
    return ("regs", gen.materialize(inner, "2d"), transposed)

def _write(gen, tile, prep) -> None:
    what, src, transposed = prep
    if what == "regs":
        _write_regs(gen, tile, src, transposed)
    else:
        _write_load(gen, tile, src[0], transposed, src[1])

def _write_regs(gen, tile, val, transposed: bool) -> None:
    ctx = gen.ctx_for("2d", val.shape)
    # tile coordinates (row, col) of the operand as dot sees it
    row, col = ("_c", "_r") if transposed else ("_r", "_c")
    k, x = (col, row) if tile.role == "a" else (row, col)
    if _write_regs_vector(gen, tile, val, x):
        return
    gen.emit_loop(ctx, [f"{tile.ptr}[{k} * {tile.ld} + {x}] = {gen.access(val, ctx)};"])

def _write_regs_vector(gen, tile, val, x: str) -> bool:
    """16-byte stores of a register tile into S[k][x] when each thread holds groups of 4
    consecutive positions along the buffer's x axis (flash attention's p: 4 consecutive rows
    of p per thread, x = row). One float4 store replaces four scalar ones, and a warp's
    stores touch 4 of the 8 16-byte bank groups instead of 4 of the 32 banks: 8 wavefronts
    per store instruction instead of 8 per scalar store (a quarter of the shared-memory
    cycles; by our count of the addresses, not measured)."""
    if val.dtype != "f32" or tile.ld % 4:
        return False
    dr, dc = gen.dists("2d", val.shape)
    along_rows = x == "_r"
    dx = dr if along_rows else dc
    if dx.replicated or dx.vector != 4 or dx.extent != tile.x:
        return False
    dy = dc if along_rows else dr
    x_loc, y_loc = ("_i", "_j") if along_rows else ("_j", "_i")
    x_pos, y_pos = ("_r", "_c") if along_rows else ("_c", "_r")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int {x_loc} = 0; {x_loc} < {dx.count}; {x_loc} += 4)")
    gen.out.line(f"const int {x_pos} = {dx.position(x_loc)};")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int {y_loc} = 0; {y_loc} < {dy.count}; ++{y_loc})")
    gen.out.line(f"const int {y_pos} = {dy.position(y_loc)};")

    def elem(q: int) -> str:
        i, j = (f"_i + {q}", "_j") if along_rows else ("_i", f"_j + {q}")
        return (
            val.cname
            + (f"[{i}]" if val.shape[0] != 1 else "[0]")
            + (f"[{j}]" if val.shape[1] != 1 else "[0]")
        )

    parts = ", ".join(elem(q) for q in range(4))
    gen.out.line(
        f"*reinterpret_cast<float4*>(&{tile.ptr}[{y_pos} * {tile.ld} + {x_pos}]) = make_float4({parts});"
    )
    gen.out.close()
    gen.out.close()
    return True

def vector_plan(gen, tile, load: ir.Load, transposed: bool):
    """How 16-byte staging of `load` into `tile` goes, or None when it cannot be vectorised.

    The load's own tile axes are (outer, contiguous). Operand element (row, col) is
    load(row, col), or load(col, row) when transposed; buffer S[k][x] holds operand (x, k) for
    a and (k, x) for b. "direct": the contiguous axis is x (float4 in, float4 out)."""
    u_is_x = (tile.role == "a") != transposed
    direct = not u_is_x
    contiguous_extent = tile.x if direct else tile.k
    if not _vec_ok(gen, load) or contiguous_extent % 4:
        return None
    t = gen.plan.grid.threads
    total = tile.k * tile.x // 4
    return {
        "direct": direct,
        "total": total,
        "per_row": contiguous_extent // 4,
        "iters": -(-total // t),
        "outer": tile.k if direct else tile.x,
    }

def _vector_indices(plan) -> str:
    """Which float4 (outer row o_, contiguous column q_) thread element e_ moves. Direct:
    neighbouring lanes take neighbouring columns (coalesced both sides). Transposing:
    neighbouring lanes take neighbouring rows, so the four scalar shared-memory stores of a
    warp land in distinct banks (the global reads then use half of each 32-byte sector per
    warp; the other half is read by another warp, from L1)."""
    if plan["direct"]:
        return f"const int q_ = (e_ % {plan['per_row']}) * 4; const int o_ = e_ / {plan['per_row']};"
    return f"const int o_ = e_ % {plan['outer']}; const int q_ = (e_ / {plan['outer']}) * 4;"

def load_regs(gen, plan, load: ir.Load, regs: str) -> None:
    """Global -> float4 registers `regs[iters]` (fill where outside the tensor)."""
    t = gen.plan.grid.threads
    fill = gen.elem(load.fill, None) if load.fill is not None else "0.0f"
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int it_ = 0; it_ < {plan['iters']}; ++it_)")
    gen.out.line(f"const int e_ = it_ * {t} + th_id;")
    gen.out.line(_vector_indices(plan))
    ptr, pred = gen.element_address(gen.tensor(load.tensor, load.span), load.index, ("o_", "q_"))
    gen.out.line(f"{regs}[it_] = make_float4({fill}, {fill}, {fill}, {fill});")
    conds = [
        c
        for c in (f"e_ < {plan['total']}" if plan["total"] % t else "", pred if pred != "true" else "")
        if c
    ]
    ld = f"{regs}[it_] = __ldg(reinterpret_cast<const float4*>(&{ptr}));"
    gen.out.line(f"if ({' && '.join(conds)}) {ld}" if conds else ld)
    gen.out.close()

def store_regs(gen, plan, tile, regs: str) -> None:
    """float4 registers -> the shared-memory operand buffer."""
    t = gen.plan.grid.threads
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int it_ = 0; it_ < {plan['iters']}; ++it_)")
    gen.out.line(f"const int e_ = it_ * {t} + th_id;")
    if plan["total"] % t:
        gen.out.line(f"if (e_ >= {plan['total']}) continue;")
    gen.out.line(_vector_indices(plan))
    if plan["direct"]:  # o_ is k, q_ is x
        gen.out.line(f"*reinterpret_cast<float4*>(&{tile.ptr}[o_ * {tile.ld} + q_]) = {regs}[it_];")
    else:  # o_ is x, q_ is k
        for q, comp in enumerate("xyzw"):
            gen.out.line(f"{tile.ptr}[(q_ + {q}) * {tile.ld} + o_] = {regs}[it_].{comp};")
    gen.out.close()

def _write_load(gen, tile, load: ir.Load, transposed: bool, regs: str | None = None) -> None:
    from compiler.cuda.values import Ctx

    plan = vector_plan(gen, tile, load, transposed)
    if plan is not None:
        if regs is None:  # not loaded ahead of the barrier: load now
            regs = gen.fresh("st")
            gen.out.line(f"float4 {regs}[{plan['iters']}];")
            load_regs(gen, plan, load, regs)
        store_regs(gen, plan, tile, regs)
        return
    u_is_x = (tile.role == "a") != transposed
    direct = not u_is_x
    t = gen.plan.grid.threads
    kk, x = tile.k, tile.x
    load_shape = (x, kk) if u_is_x else (kk, x)
    total = kk * x
    iters = (total + t - 1) // t
    inner = x if direct else kk
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int it_ = 0; it_ < {iters}; ++it_)")
    gen.out.line(f"const int e_ = it_ * {t} + th_id;")
    gen.out.open(f"if (e_ < {total})")
    gen.out.line(f"const int q_ = e_ % {inner}; const int o_ = e_ / {inner};")
    ctx = Ctx(load_shape, "2d", ("0", "0"), ("o_", "q_"), native=False)
    value = gen.load_elem(load, ctx)
    if direct:
        gen.out.line(f"{tile.ptr}[o_ * {tile.ld} + q_] = {value};")
    else:
        gen.out.line(f"{tile.ptr}[q_ * {tile.ld} + o_] = {value};")
    gen.out.close()
    gen.out.close()

def _vec_ok(gen, load: ir.Load) -> bool:
    from compiler.cuda import analysis

    param = gen.tensor(load.tensor, load.span)
    if param.dtype != "f32" or isinstance(load.index[-1], ir.SliceIndex):
        return False
    if gen.dims_of(param)[-1] % 4:
        return False
    last = load.index[-1]
    if isinstance(last, ir.SliceRange):
        if analysis.int_range(last.start, gen.scope.ranges).divisor % 4:
            return False
        if gen.size(last.extent) % 4:
            return False
    return True

def _fma_loop(gen, acc, sa, sb, m: int, n: int, kk: int) -> None:
    dr, dc = gen.dists("2d", (m, n))
    if sa.x != m or sb.x != n or sa.k != kk or sb.k != kk:
        raise CompileError(gen.out.span, "internal: dot operand shapes disagree")
    gen.registers.fragments = max(gen.registers.fragments, dr.count + dc.count)
    unroll = dot_unroll()
    gen.out.line("#pragma unroll" if unroll == 0 or kk <= unroll else f"#pragma unroll {unroll}")
    gen.out.open(f"for (int k_ = 0; k_ < {kk}; ++k_)")
    gen.out.line(f"float ar_[{dr.count}], br_[{dc.count}];")
    for d, s, reg in ((dr, sa, "ar_"), (dc, sb, "br_")):
        if d.vector == 4:
            gen.out.line("#pragma unroll")
            gen.out.open(f"for (int g_ = 0; g_ < {d.count}; g_ += 4)")
            gen.out.line(
                f"const float4 w4 = *reinterpret_cast<const float4*>("
                f"&{s.ptr}[k_ * {s.ld} + {d.position('g_')}]);"
            )
            gen.out.line(
                f"{reg}[g_] = w4.x; {reg}[g_ + 1] = w4.y; {reg}[g_ + 2] = w4.z; {reg}[g_ + 3] = w4.w;"
            )
            gen.out.close()
        else:
            gen.out.line("#pragma unroll")
            gen.out.line(
                f"for (int g_ = 0; g_ < {d.count}; ++g_) "
                f"{reg}[g_] = {s.ptr}[k_ * {s.ld} + {d.position('g_')}];"
            )
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _i = 0; _i < {dr.count}; ++_i)")
    gen.out.line("#pragma unroll")
    gen.out.line(
        f"for (int _j = 0; _j < {dc.count}; ++_j) "
        f"{acc.cname}[_i][_j] = fmaf(ar_[_i], br_[_j], {acc.cname}[_i][_j]);"
    )
    gen.out.close()
    gen.out.close()
