"""dot(a, b) on tensor cores: `mma.sync.m16n8k16` with bf16 or f16 operands, f32 accumulation.

Used when both operands of a dot are bf16 or both f16 (codegen then lays out every 2-D tile like
the MMA accumulator, layout.MmaGrid). Each warp computes its (M/WR) x (N/WC) block of the result
in 16x8 sub-tiles, k in steps of 16.

Operands sit in shared memory as 16-bit values in the orientation of their source, so that
staging is a straight 16-byte copy (`cp.async`, zero-filled past the tensor's edge): a tile is
stored [rows][cols] with the source's contiguous axis as cols, and `ldmatrix` (with `.trans`
where the stored orientation is the transpose of what the fragment wants) reads the fragments.
Rows are padded by 16 bytes (8 elements): the 8 row addresses of one `ldmatrix` phase and the
16-byte stores of a copy then fall in 8 distinct 16-byte bank groups, free of bank conflicts.

A register operand `a` already in the accumulator layout with the warp owning whole rows
(flash attention's p, WC = 1) goes straight from registers into A fragments: the m16n8
accumulator layout of two neighbouring column sub-tiles is the m16k16 A layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import builtins
from compiler.cuda import tf32
from compiler.cuda.mainloops.wgmma import mma as wgmma
from compiler.cuda.mainloops.wgmma import tf32 as wgmma_tf32
from compiler.cuda.operands import (
    MMA_K,
    MmaTile,
    alloc_tile,
    operand_orientation,
    stage_load,
    tile_floats,
    write_registers,
)
from compiler.frontend import ir

TC_DTYPES = ("bf16", "f16")


def operand_dtype(e: ir.Expr, kernel: ir.Kernel) -> str | None:
    """The 16-bit type a dot operand's values already have, or None: a tile typed bf16/f16, a
    load of a bf16/f16 tensor (widened exactly to f32 by the language), a cast to bf16/f16, or a
    transpose or let of one of those."""
    if isinstance(e.ty, ir.TileType) and e.ty.dtype in TC_DTYPES + ir.FP8:
        return e.ty.dtype
    if isinstance(e, ir.Load):
        p = next((t for t in kernel.tensors if t.name == e.tensor), None)
        return p.dtype if p is not None and p.dtype in TC_DTYPES + ir.FP8 else None
    if builtins.converts_to(e) in TC_DTYPES:
        return builtins.converts_to(e)
    if builtins.is_transpose(e):
        return operand_dtype(e.args[0], kernel)
    if isinstance(e, ir.Name):
        from compiler.frontend import walk

        lets = [s for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let) and s.name == e.name]
        if len(lets) == 1:
            return operand_dtype(lets[0].value, kernel)
    return None


def tensor_core_dtype(call: ir.Call, kernel: ir.Kernel, tf32: bool = False) -> str | None:
    """The operand type of a dot that runs on tensor cores ('bf16', 'f16' or 'tf32'), or None
    (exact f32 on the FMA path). f32 operands use TF32 only where the kernel asked for it."""
    precision = getattr(call, "precision", None)
    mode = precision.mode if precision is not None else None
    if mode in TC_DTYPES or mode == "tf32" or mode in ir.FP8:  # fp8: on warpgroup MMA only (fp8.py)
        return mode
    a, b = (operand_dtype(x, kernel) for x in call.args)
    if mode == "f32" and a in TC_DTYPES:  # a 16-bit dot sent to CUDA cores (hoist.fit_dots)
        return None
    if a == b and a in TC_DTYPES:
        return a
    if tf32 and a is None and b is None:
        return "tf32"
    return None


def storage_dtype(dtype: str) -> str:
    return "f32" if dtype == "tf32" else dtype


PRELUDE = r"""
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
__device__ __forceinline__ void ldsm_x4(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x2(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
    : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_at(unsigned* r, unsigned a) {  // a: a shared-window address
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
    : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2_at(unsigned* r, unsigned a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2_t(unsigned* r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
    : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool in_bounds) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
    :: "r"(smem_u32(dst)), "l"(src), "r"(in_bounds ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N));
}
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  unsigned r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ unsigned pack_f16x2(float lo, float hi) {
  unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ void mma_bf16(float& c0, float& c1, float& c2, float& c3,
                                         const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_tf32(float& c0, float& c1, float& c2, float& c3,
                                         const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_f16(float& c0, float& c1, float& c2, float& c3,
                                        const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
""".strip("\n") + "\n" + tf32.PRELUDE


def _lane_offsets(tile: MmaTile) -> tuple[str, str]:
    """Per-lane (stored row, stored col) offset of the 8x8 matrix row this lane addresses in one
    ldmatrix; q = lane / 8 picks the matrix, r = lane % 8 its row (see the module doc)."""
    low, high = "((th_lane >> 3) & 1) * 8", "(th_lane >> 4) * 8"
    r = "(th_lane & 7)"
    if tile.role == "a":  # matrices: (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15)
        x_off, k_off = low, high
    else:  # matrices: (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15)
        k_off, x_off = low, high
    if tile.k_contiguous:  # stored [x][k]
        return f"{r} + {x_off}", k_off
    return f"{r} + {k_off}", x_off


def fragment_loader(gen, tile: MmaTile, x_base: str) -> str:
    """Declare this lane's ldmatrix base pointer for `tile` at warp offset `x_base` along x;
    returns its C name. The fragment of k step kk, x sub-tile s is at a constant offset from it."""
    row_off, col_off = _lane_offsets(tile)
    name = gen.fresh("lm")
    if tile.k_contiguous:
        base = f"({x_base} + {row_off}) * {tile.ld} + {col_off}"
    else:
        base = f"({row_off}) * {tile.ld} + {x_base} + {col_off}"
    gen.out.line(f"const unsigned short* {name} = {tile.ptr} + {base};")
    return name


def fragment_offset(tile: MmaTile, kk: int, x: int) -> int:
    """Element offset of the fragment at k step kk, x position x (relative to the lane base)."""
    if tile.k_contiguous:
        return x * tile.ld + kk
    return kk * tile.ld + x


@dataclass(frozen=True)
class WarpTile:
    """The block of an [M, N] accumulator one warp computes: rows x cols in m_tiles x n_tiles
    16x8 sub-tiles, starting at the C expressions row_base / col_base."""

    rows: int
    cols: int
    m_tiles: int
    n_tiles: int
    row_base: str
    col_base: str


def warp_tile(gen, m: int, n: int) -> WarpTile:
    dr, dc = gen.dists("2d", (m, n))
    wm, wn, grid = dr.per_warp, dc.per_warp, gen.plan.grid
    row_base = f"(th_warp / {grid.warps_n}) * {wm}" if grid.warps_m > 1 else "0"
    col_base = f"(th_warp % {grid.warps_n}) * {wn}" if grid.warps_n > 1 else "0"
    return WarpTile(wm, wn, wm // 16, wn // 8, row_base, col_base)


def emit_mma(gen, acc, sa, sb, m: int, n: int, kk: int, dtype: str) -> None:
    """acc[M, N] (accumulator layout) += a[M, K] b[K, N]; sa is an MmaTile or a register Val."""
    w = warp_tile(gen, m, n)
    wm, wn, mt, nt, wr_base, wc_base = w.rows, w.cols, w.m_tiles, w.n_tiles, w.row_base, w.col_base
    from_regs = not isinstance(sa, MmaTile)
    la = None if from_regs else fragment_loader(gen, sa, wr_base)
    lb = fragment_loader(gen, sb, wc_base)
    ld_a = "ldsm_x4" if from_regs or sa.k_contiguous else "ldsm_x4_t"
    ld_b = "ldsm_x4" if sb.k_contiguous else "ldsm_x4_t"
    ld_b2 = ld_b.replace("x4", "x2")
    mma = "mma_bf16" if dtype == "bf16" else "mma_f16"
    pack = "pack_bf16x2" if dtype == "bf16" else "pack_f16x2"
    c = acc.cname
    gen.out.line(f"// tensor cores: warp tile {wm}x{wn}, {mt}x{nt} mma.m16n8k16, k {kk}")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int kk_ = 0; kk_ < {kk}; kk_ += {MMA_K})")
    gen.out.line(f"unsigned af_[{mt}][4], bf_[{nt}][2];")
    for i in range(mt):
        if from_regs:
            p = sa.cname
            gen.out.line(
                f"af_[{i}][0] = {pack}({p}[{2 * i}][kk_ / 4], {p}[{2 * i}][kk_ / 4 + 1]); "
                f"af_[{i}][1] = {pack}({p}[{2 * i + 1}][kk_ / 4], {p}[{2 * i + 1}][kk_ / 4 + 1]);"
            )
            gen.out.line(
                f"af_[{i}][2] = {pack}({p}[{2 * i}][kk_ / 4 + 2], {p}[{2 * i}][kk_ / 4 + 3]); "
                f"af_[{i}][3] = {pack}({p}[{2 * i + 1}][kk_ / 4 + 2], {p}[{2 * i + 1}][kk_ / 4 + 3]);"
            )
        else:
            off = _offset_expr(sa, "kk_", 16 * i)
            gen.out.line(f"{ld_a}(af_[{i}], {la} + {off});")
    j = 0
    while j < nt:
        off = _offset_expr(sb, "kk_", 8 * j)
        if j + 1 < nt:
            gen.out.line(
                f"{{ unsigned t4_[4]; {ld_b}(t4_, {lb} + {off}); "
                f"bf_[{j}][0] = t4_[0]; bf_[{j}][1] = t4_[1]; "
                f"bf_[{j + 1}][0] = t4_[2]; bf_[{j + 1}][1] = t4_[3]; }}"
            )
            j += 2
        else:
            gen.out.line(f"{ld_b2}(bf_[{j}], {lb} + {off});")
            j += 1
    for i in range(mt):
        for jj in range(nt):
            gen.out.line(
                f"{mma}({c}[{2 * i}][{2 * jj}], {c}[{2 * i}][{2 * jj + 1}], "
                f"{c}[{2 * i + 1}][{2 * jj}], {c}[{2 * i + 1}][{2 * jj + 1}], af_[{i}], bf_[{jj}]);"
            )
    gen.out.close()


def emit_mma_tf32(gen, acc, sa, sb, m: int, n: int, kk: int) -> None:
    """acc += a b with `mma.sync.m16n8k8` TF32: fragments of k-contiguous operands read from
    shared memory by ldmatrix (_tf32_lane_base), the others by scalar loads, and rounded to
    TF32 (tf32.PRELUDE's tf32_of). A register operand a in the accumulator layout holds
    columns 2t, 2t+1 of each 8-wide k step where the A fragment wants t and t + 4: the dot sums
    over k, so B is read with the same permutation (slot t <- row 2t, slot t + 4 <- row 2t + 1)."""
    w = warp_tile(gen, m, n)
    wm, wn, mt, nt, wr_base, wc_base = w.rows, w.cols, w.m_tiles, w.n_tiles, w.row_base, w.col_base
    from_regs = not isinstance(sa, MmaTile)
    gen.used.tf32_register_operand |= from_regs  # a tighter register budget (codegen.py)
    t = "(th_lane & 3)"
    k_slots = (f"2 * {t}", f"2 * {t} + 1") if from_regs else (t, f"{t} + 4")
    c = acc.cname
    la = None if from_regs or not sa.k_contiguous else _tf32_lane_base(gen, sa, wr_base, "a")
    # ldmatrix gives k slots t and t + 4 in order: not for b beside a register a (permuted k)
    lb = _tf32_lane_base(gen, sb, wc_base, "b") if sb.k_contiguous and not from_regs else None
    gen.out.line(f"// tensor cores: warp tile {wm}x{wn}, {mt}x{nt} mma.m16n8k8 tf32, k {kk}")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int kk_ = 0; kk_ < {kk}; kk_ += 8)")
    gen.out.line(f"unsigned af_[{mt}][4], bf_[{nt}][2];")
    for i in range(mt):
        gen.out.line(_tf32_a_fragment(sa, la, i, f"{wr_base} + {16 * i} + {_LANE_GROUP}", k_slots))
    for j in range(nt):
        line = _tf32_b_fragment(sb, lb, j, nt, f"{wc_base} + {8 * j} + {_LANE_GROUP}", k_slots)
        if line is not None:
            gen.out.line(line)
    for i in range(mt):
        for jj in range(nt):
            gen.out.line(
                f"mma_tf32({c}[{2 * i}][{2 * jj}], {c}[{2 * i}][{2 * jj + 1}], "
                f"{c}[{2 * i + 1}][{2 * jj}], {c}[{2 * i + 1}][{2 * jj + 1}], af_[{i}], bf_[{jj}]);"
            )
    gen.out.close()


_LANE_GROUP = "(th_lane >> 2)"  # g of a lane (g, t): the fragment's row (a) or column (b)


def _tf32_element(tile: MmaTile, x: str, k: str) -> str:
    """The operand's element at (x, k) in shared memory, rounded to TF32."""
    r, c = (x, k) if tile.k_contiguous else (k, x)
    return f"tf32_of({tile.ptr}[({r}) * {tile.ld} + {c}])"


def _tf32_a_fragment(sa, la: str | None, i: int, x0: str, k_slots: tuple[str, str]) -> str:
    """The line that fills A fragment i (rows x0, x0 + 8): from the register tile `sa`, by
    ldmatrix from the lane address `la`, or element by element."""
    if not isinstance(sa, MmaTile):
        p = sa.cname
        regs = [f"{p}[{2 * i + h}][kk_ / 4 + {e}]" for e in (0, 1) for h in (0, 1)]
        return " ".join(f"af_[{i}][{q}] = tf32_of({r});" for q, r in enumerate(regs))
    if la is not None:
        at_a = f"{la} + {16 * i * sa.ld * 4} + kk_ * 4"
        return f"ldsm_x4_at(af_[{i}], {at_a}); {_round_tf32(f'af_[{i}]', 4)}"
    parts = [(x, f"kk_ + {k}") for k in k_slots for x in (x0, f"{x0} + 8")]
    return " ".join(f"af_[{i}][{q}] = {_tf32_element(sa, x, k)};" for q, (x, k) in enumerate(parts))


def _tf32_b_fragment(sb: MmaTile, lb: str | None, j: int, nt: int, x0: str, k_slots) -> str | None:
    """The line that fills B fragment j (column x0): by ldmatrix from the lane address `lb`, two
    fragments per x4 (None for the odd one the x4 filled), or element by element."""
    if lb is not None and j % 2 == 0 and j + 1 < nt:  # two n sub-tiles per ldmatrix.x4
        return (
            f"{{ unsigned t4_[4]; ldsm_x4_at(t4_, {lb} + {8 * j * sb.ld * 4} + kk_ * 4); "
            f"{_round_tf32('t4_', 4)} "
            f"bf_[{j}][0] = t4_[0]; bf_[{j}][1] = t4_[1]; "
            f"bf_[{j + 1}][0] = t4_[2]; bf_[{j + 1}][1] = t4_[3]; }}"
        )
    if lb is not None and j % 2 == 0:
        at_b = f"{lb} + {8 * j * sb.ld * 4} + kk_ * 4"
        return f"ldsm_x2_at(bf_[{j}], {at_b}); {_round_tf32(f'bf_[{j}]', 2)}"
    if lb is None:
        elements = (_tf32_element(sb, x0, f"kk_ + {k}") for k in k_slots)
        return " ".join(f"bf_[{j}][{q}] = {x};" for q, x in enumerate(elements))
    return None


def _tf32_lane_base(gen, tile: MmaTile, x_base: str, role: str) -> str:
    """This lane's ldmatrix row address (shared window, bytes) for a k-contiguous f32 operand
    ([x][k], 16-byte rows of 4 values): an 8x8 b16 matrix is then 8 rows x 4 f32, and lane
    (g, t) receives the value at row g, column t, which is the m16n8k8 TF32 fragment's element.
    Matrices of one x4: a: (m 0-7 | 8-15) x (k 0-3 | 4-7); b: (k 0-3 | 4-7) x (n 0-7 | 8-15).
    Rows ld = k + 4 words apart fall in 8 distinct 16-byte bank groups (operands.MmaTile.pad)."""
    second, fourth = "((th_lane >> 3) & 1)", "(th_lane >> 4)"
    x_off, k_off = (f"{second} * 8", f"{fourth} * 4") if role == "a" else (f"{fourth} * 8", f"{second} * 4")
    name = gen.fresh("lm")
    row = f"({x_base} + {x_off} + (th_lane & 7))"
    gen.out.line(f"const unsigned {name} = smem_u32({tile.ptr} + {row} * {tile.ld} + {k_off});")
    return name


def _round_tf32(regs: str, n: int) -> str:
    """The f32 bit patterns ldmatrix delivered, rounded to TF32 (tf32_of) as the scalar path does."""
    return " ".join(f"{regs}[{q}] = tf32_of(__uint_as_float({regs}[{q}]));" for q in range(n))


def _offset_expr(tile: MmaTile, kk: str, x: int) -> str:
    if tile.k_contiguous:
        return f"{x * tile.ld} + {kk}"
    return f"{kk} * {tile.ld} + {x}"


# -- lowering one dot ------------------------------------------------------------------------------


def register_operand(gen, role: str, arg: ir.Expr, m: int, kk: int, dtype: str):
    """The register Val that feeds A fragments directly, or None (see the module doc). A cast
    to the operand type (attention's `bf16(p)`) is left to the fragment packing, which rounds
    to nearest even as the cast does: the f32 tile is packed as it is, with no rounded copy."""
    from compiler.cuda.values import Val

    if role != "a" or gen.plan.grid.warps_n != 1 or isinstance(arg, ir.Load):
        return None
    if dtype in TC_DTYPES and builtins.converts_to(arg) == dtype and arg.args[0].ty.dtype == "f32":
        arg = arg.args[0]
    if builtins.is_transpose(arg):
        return None
    v = gen.scope.vals.get(arg.name) if isinstance(arg, ir.Name) else None
    if isinstance(v, Val) and v.kind == "2d" and v.shape == (m, kk):
        return v
    if isinstance(arg, ir.Name):
        return None
    return gen.materialize(arg, "2d")


def warpgroup_dot(gen, e: ir.Call, into, ops, m: int, n: int, kk: int, dtype: str, fresh: bool) -> None:
    """The dot as warpgroup MMA (mainloops/wgmma/mma.py); a from shared memory or registers; an x-contiguous
    operand the descriptor cannot read is transposed into the core-matrix layout first (after
    the barrier that made its copy visible)."""
    if not wgmma.fits(gen, m, n) or not isinstance(ops[1], MmaTile | wgmma.CoreTile):
        warps = gen.plan.grid.threads // 32
        raise gen.pruned(e.span, f"warpgroup MMA takes {m} rows on {warps} warps, N <= 256")
    # a group may stay in flight past its iteration when the dot is the kernel's only one and
    # accumulates into a variable (matmul's acc, read after the loop) from buffers that are ring
    # stages or double buffers (refilled two iterations later)
    ring = gen.loop.ring_iteration is not None and into is not None and len(gen.plan.tc_dots) == 1
    overlap = ring and all(not isinstance(t, wgmma.CoreTile) or t.ptr in gen.loop.ring_tiles for t in ops)
    cores, transposed = [], False
    for t in ops:
        if not isinstance(t, MmaTile):
            cores.append(t)  # a CoreTile, or a register a
            continue
        transposed = True
        if t.k_contiguous:
            raise gen.pruned(e.span, "warpgroup MMA: a k-contiguous operand outside the core-matrix layout")
        probe = wgmma.CoreTile("", t.role, t.k, t.x, t.dtype)
        words = tile_floats(probe)
        base = gen.smem.alloc_perm(words * (2 if overlap else 1), 256)
        ptr = f"(reinterpret_cast<unsigned short*>{base})"
        if overlap:
            ptr = f"({ptr} + ({gen.loop.ring_iteration} & 1) * {words * 2})"
        core = wgmma.CoreTile(ptr, t.role, t.k, t.x, t.dtype)
        wgmma.transpose_into(gen, t, core)
        cores.append(core)
    if transposed:
        gen.out.line("fence_async_smem();")
        gen.sync()
    gen.used.wgmma = True
    wait, rot = ("one" if overlap else "all"), gen.loop.rotation
    if rot is not None and e is rot.first:
        wait = "rotated"
    elif rot is not None and e is rot.deferred and not isinstance(cores[0], wgmma.CoreTile):
        wait = "carried" if cores[1].ptr in gen.loop.ring_tiles else "all"
    wgmma.emit_wgmma(gen, into, cores[0], cores[1], m, n, kk, dtype, wait, fresh)


def lower_dot(gen, e: ir.Call, into, dtype: str):
    """dtype: the tensor-core type ('bf16', 'f16', 'tf32')."""
    from compiler.cuda import staged as staged_buffers

    a, b = e.args
    m, kk = (gen.size(s) for s in a.ty.shape)
    n = gen.size(b.ty.shape[1])
    gen.out.line(f"// dot [{m}x{kk}] x [{kk}x{n}] on tensor cores ({dtype})")
    ops, writes = [], []
    for role, arg in (("a", a), ("b", b)):
        staged = staged_buffers.staged_operand(gen, arg)
        if staged is not None:
            ops.append(staged)
            continue
        regs = register_operand(gen, role, arg, m, kk, dtype)
        if regs is not None:
            ops.append(regs)
            continue
        inner, transposed, k_contiguous = operand_orientation(role, arg)
        tile = _operand_buffer(gen, e, role, inner, k_contiguous, (kk, m if role == "a" else n), dtype)
        if not (isinstance(inner, ir.Load) and inner.ty.rank == 2):
            inner = gen.materialize(inner, "2d")
        ops.append(tile)
        writes.append((tile, inner, transposed))
    if writes:
        _write_operands(gen, writes)
    fresh = into is None
    if fresh:
        into = gen.declare(None, "2d", (m, n), "f32")
        if not gen.plan.wgmma:  # warpgroup MMA's first k step ignores the accumulator (scale-d 0)
            ctx = gen.ctx_for("2d", (m, n))
            gen.emit_loop(ctx, [f"{gen.access(into, ctx)} = 0.0f;"])
    if gen.plan.wgmma:
        warpgroup_dot(gen, e, into, ops, m, n, kk, dtype, fresh)
    elif dtype == "tf32":
        emit_mma_tf32(gen, into, ops[0], ops[1], m, n, kk)
    else:
        emit_mma(gen, into, ops[0], ops[1], m, n, kk, dtype)
    return into


def _operand_buffer(gen, e: ir.Call, role: str, inner: ir.Expr, k_contiguous: bool, extents, dtype: str):
    """The shared buffer a dot operand is written into before the dot: in warpgroup MMA's
    core-matrix layout where its descriptor can read it, else an MmaTile for ldmatrix (or for
    wgmma.transpose_into); `extents`: (k, x), x the operand's rows (a) or columns (b)."""
    kk, x = extents
    mn_major = wgmma.core_layout(k_contiguous, x) if gen.plan.wgmma else None
    loaded = isinstance(inner, ir.Load) and inner.ty.rank == 2
    if gen.plan.wgmma and dtype == "tf32":  # K-major, rounded on the way in (mainloops/wgmma/tf32.py)
        if not loaded:
            raise gen.pruned(e.span, "TF32 warpgroup MMA takes operands loaded from tensors")
        return wgmma.alloc_core(gen, role, kk, x, "f32", False)
    if mn_major is not None and loaded:
        return wgmma.alloc_core(gen, role, kk, x, dtype, mn_major)
    if gen.plan.wgmma and k_contiguous:
        return wgmma.alloc_core(gen, role, kk, x, dtype, False)
    return alloc_tile(gen, role, kk, x, k_contiguous, storage_dtype(dtype), e.span)


def _write_operands(gen, writes) -> None:
    """Fill the operands' shared buffers, (tile, source, transposed) each: loads by cp.async
    (waited for here), TF32 warpgroup operands rounded on the way in, register tiles stored;
    then the barrier (and, for warpgroup MMA, the fence) that lets the tensor cores read them."""
    gen.sync_before_overwrite()
    copied = False
    for tile, src, transposed in writes:
        if isinstance(tile, wgmma.CoreTile) and tile.dtype == "f32":
            wgmma_tf32.stage(gen, tile, src)
        elif isinstance(src, ir.Load):
            copied |= stage_load(gen, tile, src)
        else:
            write_registers(gen, tile, src, transposed)
    if copied:
        gen.out.line("cp_async_commit(); cp_async_wait<0>();")
    if gen.plan.wgmma:  # written through the generic proxy, read by the tensor cores' async proxy
        gen.out.line("fence_async_smem();")
    gen.sync()
