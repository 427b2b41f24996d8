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

from compiler.cuda.emit import from_f32
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError

TC_DTYPES = ("bf16", "f16")
MMA_K = 16
ROW_PAD = 8  # elements (16 bytes) of padding after each stored row


def operand_dtype(e: ir.Expr, kernel: ir.Kernel) -> str | None:
    """The 16-bit type a dot operand's values already have, or None: a tile typed bf16/f16, a
    load of a bf16/f16 tensor (widened exactly to f32 by the language), a cast to bf16/f16, or a
    transpose or let of one of those."""
    if isinstance(e.ty, ir.TileType) and e.ty.dtype in TC_DTYPES:
        return e.ty.dtype
    if isinstance(e, ir.Load):
        p = next((t for t in kernel.tensors if t.name == e.tensor), None)
        return p.dtype if p is not None and p.dtype in TC_DTYPES else None
    if isinstance(e, ir.Call) and e.func in TC_DTYPES:
        return e.func
    if isinstance(e, ir.Call) and e.func == "transpose":
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
    if mode in TC_DTYPES or mode == "tf32":
        return mode
    a, b = (operand_dtype(x, kernel) for x in call.args)
    if a == b and a in TC_DTYPES:
        return a
    if tf32 and a is None and b is None:
        return "tf32"
    return None


def storage_dtype(dtype: str) -> str:
    return "f32" if dtype == "tf32" else dtype


@dataclass(frozen=True)
class MmaTile:
    """A dot operand in shared memory, stored [rows][cols] with row stride `ld`; `dtype` is the
    storage type (bf16, f16, or f32 for TF32). `role` 'a' ([x, k] as dot sees it) or 'b'
    ([k, x]); `k_contiguous`: the stored cols are k."""

    ptr: str  # C expression of type ctype*
    role: str
    k: int
    x: int
    k_contiguous: bool
    dtype: str

    @property
    def elem_bytes(self) -> int:
        return 4 if self.dtype == "f32" else 2

    @property
    def ctype(self) -> str:
        return "float" if self.dtype == "f32" else "unsigned short"

    @property
    def pad(self) -> int:
        """16-bit: 16 bytes (ldmatrix rows in distinct bank groups). f32 fragments are read with
        scalar loads: lane (g, t) reads row g col t (k-contiguous: stride = 4 mod 32 words) or
        row t col g (otherwise: 8 mod 32), which puts the 32 lanes in 32 banks."""
        if self.elem_bytes == 2:
            return ROW_PAD
        return 4 if self.k_contiguous else 8

    @property
    def vector(self) -> int:
        return 16 // self.elem_bytes

    @property
    def rows(self) -> int:
        return self.x if self.k_contiguous else self.k

    @property
    def cols(self) -> int:
        return self.k if self.k_contiguous else self.x

    @property
    def ld(self) -> int:
        return self.cols + self.pad

    @property
    def elements(self) -> int:
        return self.rows * self.ld


def tile_floats(tile) -> int:
    """Shared-memory size of an MmaTile in 4-byte words."""
    return (tile.elements * tile.elem_bytes + 3) // 4


def make_tile(ptr: str, role: str, k: int, x: int, k_contiguous: bool, dtype: str, span) -> MmaTile:
    step = 8 if dtype == "f32" else MMA_K
    if k % step:
        raise CompileError(
            span, f"dot's inner extent {k} is not a multiple of {step} (the tensor-core k step)"
        )
    t = MmaTile(ptr, role, k, x, k_contiguous, dtype)
    if t.cols % t.vector:
        raise CompileError(
            span,
            f"dot operand extent {t.cols} is not a multiple of {t.vector} (one 16-byte shared-memory row)",
        )
    return t


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
__device__ __forceinline__ unsigned tf32_of(float f) {
  unsigned r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f)); return r;
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
""".strip("\n")


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


def emit_mma(gen, acc, sa, sb, m: int, n: int, kk: int, dtype: str) -> None:
    """acc[M, N] (accumulator layout) += a[M, K] b[K, N]; sa is an MmaTile or a register Val."""
    dr, dc = gen.dists("2d", (m, n))
    wm, wn = dr.per_warp, dc.per_warp
    mt, nt = wm // 16, wn // 8
    grid = gen.grid
    wr_base = f"(th_warp / {grid.warps_n}) * {wm}" if grid.warps_m > 1 else "0"
    wc_base = f"(th_warp % {grid.warps_n}) * {wn}" if grid.warps_n > 1 else "0"
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
    """acc += a b with `mma.sync.m16n8k8` TF32: fragments read from shared memory by scalar
    loads and rounded to TF32 (cvt.rna). A register operand a in the accumulator layout holds
    columns 2t, 2t+1 of each 8-wide k step where the A fragment wants t and t + 4: the dot sums
    over k, so B is read with the same permutation (slot t <- row 2t, slot t + 4 <- row 2t + 1)."""
    dr, dc = gen.dists("2d", (m, n))
    wm, wn = dr.per_warp, dc.per_warp
    mt, nt = wm // 16, wn // 8
    grid = gen.grid
    wr_base = f"(th_warp / {grid.warps_n}) * {wm}" if grid.warps_m > 1 else "0"
    wc_base = f"(th_warp % {grid.warps_n}) * {wn}" if grid.warps_n > 1 else "0"
    from_regs = not isinstance(sa, MmaTile)
    g, t = "(th_lane >> 2)", "(th_lane & 3)"
    k_lo, k_hi = (f"2 * {t}", f"2 * {t} + 1") if from_regs else (t, f"{t} + 4")

    def at(tile: MmaTile, x: str, k: str) -> str:
        r, c = (x, k) if tile.k_contiguous else (k, x)
        return f"tf32_of({tile.ptr}[({r}) * {tile.ld} + {c}])"

    c = acc.cname
    gen.out.line(f"// tensor cores: warp tile {wm}x{wn}, {mt}x{nt} mma.m16n8k8 tf32, k {kk}")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int kk_ = 0; kk_ < {kk}; kk_ += 8)")
    gen.out.line(f"unsigned af_[{mt}][4], bf_[{nt}][2];")
    for i in range(mt):
        if from_regs:
            p = sa.cname
            regs = [f"{p}[{2 * i + h}][kk_ / 4 + {e}]" for e in (0, 1) for h in (0, 1)]
            gen.out.line(" ".join(f"af_[{i}][{q}] = tf32_of({r});" for q, r in enumerate(regs)))
        else:
            x0 = f"{wr_base} + {16 * i} + {g}"
            parts = [
                (x0, f"kk_ + {k_lo}"),
                (f"{x0} + 8", f"kk_ + {k_lo}"),
                (x0, f"kk_ + {k_hi}"),
                (f"{x0} + 8", f"kk_ + {k_hi}"),
            ]
            gen.out.line(" ".join(f"af_[{i}][{q}] = {at(sa, x, k)};" for q, (x, k) in enumerate(parts)))
    for j in range(nt):
        x0 = f"{wc_base} + {8 * j} + {g}"
        gen.out.line(
            f"bf_[{j}][0] = {at(sb, x0, f'kk_ + {k_lo}')}; bf_[{j}][1] = {at(sb, x0, f'kk_ + {k_hi}')};"
        )
    for i in range(mt):
        for jj in range(nt):
            gen.out.line(
                f"mma_tf32({c}[{2 * i}][{2 * jj}], {c}[{2 * i}][{2 * jj + 1}], "
                f"{c}[{2 * i + 1}][{2 * jj}], {c}[{2 * i + 1}][{2 * jj + 1}], af_[{i}], bf_[{jj}]);"
            )
    gen.out.close()


def _offset_expr(tile: MmaTile, kk: str, x: int) -> str:
    if tile.k_contiguous:
        return f"{x * tile.ld} + {kk}"
    return f"{kk} * {tile.ld} + {x}"


# -- staging into shared memory -------------------------------------------------------------------


def copy_plan(gen, tile: MmaTile, load: ir.Load) -> dict | None:
    """16-byte cp.async copies of `load` (stored as it lies in memory) or None: the tensor's last
    dim and the slice start along it must be multiples of 8 elements, and the fill zero."""
    from compiler.cuda import analysis

    param = gen.tensor(load.tensor, load.span)
    if param.dtype != tile.dtype or isinstance(load.index[-1], ir.SliceIndex):
        return None
    if load.fill is not None:
        fill = load.fill
        if not (isinstance(fill, ir.Const) and float(fill.value) == 0.0):
            return None
    v = tile.vector
    if gen.dims_of(param)[-1] % v:
        return None
    last = load.index[-1]
    if isinstance(last, ir.SliceRange) and analysis.int_range(last.start, gen.ranges).divisor % v:
        return None
    chunks = tile.rows * tile.cols // v
    return {"chunks": chunks, "per_row": tile.cols // v, "iters": -(-chunks // gen.grid.threads)}


def issue_copy(gen, plan: dict, tile: MmaTile, load: ir.Load) -> None:
    """Issue the cp.async copies of one operand tile (the caller commits and waits)."""
    t = gen.grid.threads
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int it_ = 0; it_ < {plan['iters']}; ++it_)")
    gen.out.line(f"const int e_ = it_ * {t} + th_id;")
    if plan["chunks"] % t:
        gen.out.line(f"if (e_ >= {plan['chunks']}) break;")
    gen.out.line(f"const int o_ = e_ / {plan['per_row']}, q_ = (e_ % {plan['per_row']}) * {tile.vector};")
    ptr, pred = gen.element_address(gen.tensor(load.tensor, load.span), load.index, ("o_", "q_"))
    if pred == "true":
        gen.out.line(f"cp_async16({tile.ptr} + o_ * {tile.ld} + q_, &{ptr}, true);")
    else:  # out of bounds: zero-filled, from a valid address
        gen.out.line(f"const bool in_ = {pred};")
        base = f"t_{load.tensor}"
        gen.out.line(f"cp_async16({tile.ptr} + o_ * {tile.ld} + q_, in_ ? &{ptr} : {base}, in_);")
    gen.out.close()


def write_elements(gen, tile: MmaTile, load: ir.Load) -> None:
    """Element by element (converted to the operand type), where no 16-byte copy fits."""
    from compiler.cuda.values import Ctx

    t = gen.grid.threads
    total = tile.rows * tile.cols
    gen.out.line("#pragma unroll 4")
    gen.out.open(f"for (int e_ = th_id; e_ < {total}; e_ += {t})")
    gen.out.line(f"const int q_ = e_ % {tile.cols}; const int o_ = e_ / {tile.cols};")
    ctx = Ctx((tile.rows, tile.cols), "2d", ("0", "0"), ("o_", "q_"), native=False)
    value = gen.load_elem(load, ctx)
    gen.out.line(f"{tile.ptr}[o_ * {tile.ld} + q_] = {from_f32(tile.dtype, value)};")
    gen.out.close()


def write_registers(gen, tile: MmaTile, val, transposed: bool) -> None:
    """A register tile (any layout) into the operand buffer, rounded to the operand type."""
    ctx = gen.ctx_for("2d", val.shape)
    row, col = ("_c", "_r") if transposed else ("_r", "_c")  # operand coordinates
    k, x = (col, row) if tile.role == "a" else (row, col)
    r, c = (x, k) if tile.k_contiguous else (k, x)
    gen.emit_loop(ctx, [f"{tile.ptr}[{r} * {tile.ld} + {c}] = {from_f32(tile.dtype, gen.access(val, ctx))};"])


# -- lowering one dot ------------------------------------------------------------------------------


def alloc_tile(gen, role: str, k: int, x: int, k_contiguous: bool, dtype: str, span) -> MmaTile:
    probe = make_tile("", role, k, x, k_contiguous, dtype, span)
    ptr = f"reinterpret_cast<{probe.ctype}*>{gen.alloc_perm(tile_floats(probe))}"
    return make_tile(f"({ptr})", role, k, x, k_contiguous, dtype, span)


def operand_orientation(role: str, arg: ir.Expr) -> tuple[ir.Expr, bool, bool]:
    """(inner expression, transposed, k_contiguous) of a dot operand staged from `arg`."""
    transposed = isinstance(arg, ir.Call) and arg.func == "transpose"
    inner = arg.args[0] if transposed else arg
    if isinstance(inner, ir.Load) and inner.ty.rank == 2:
        return inner, transposed, (role == "a") != transposed
    return inner, transposed, role == "a"


def stage_load(gen, tile: MmaTile, load: ir.Load) -> bool:
    """Copy `load` into `tile`; True when cp.async copies were issued (the caller commits)."""
    plan = copy_plan(gen, tile, load)
    if plan is None:
        write_elements(gen, tile, load)
        return False
    issue_copy(gen, plan, tile, load)
    return True


def register_operand(gen, role: str, arg: ir.Expr, m: int, kk: int):
    """The register Val that feeds A fragments directly, or None (see the module doc)."""
    from compiler.cuda.values import Val

    if role != "a" or gen.grid.warps_n != 1 or isinstance(arg, ir.Load):
        return None
    if isinstance(arg, ir.Call) and arg.func == "transpose":
        return None
    v = gen.vals.get(arg.name) if isinstance(arg, ir.Name) else None
    if isinstance(v, Val) and v.kind == "2d" and v.shape == (m, kk):
        return v
    if isinstance(arg, ir.Name):
        return None
    return gen.materialize(arg, "2d")


def lower_dot(gen, e: ir.Call, into, dtype: str):
    """dtype: the tensor-core type ('bf16', 'f16', 'tf32')."""
    a, b = e.args
    m, kk = (gen.size(s) for s in a.ty.shape)
    n = gen.size(b.ty.shape[1])
    gen.out.line(f"// dot [{m}x{kk}] x [{kk}x{n}] on tensor cores ({dtype})")
    ops, writes = [], []
    for role, arg in (("a", a), ("b", b)):
        staged = gen.staged_operand(arg)
        if isinstance(staged, MmaTile):
            ops.append(staged)
            continue
        regs = register_operand(gen, role, arg, m, kk)
        if regs is not None:
            ops.append(regs)
            continue
        inner, transposed, k_contiguous = operand_orientation(role, arg)
        x = m if role == "a" else n
        tile = alloc_tile(gen, role, kk, x, k_contiguous, storage_dtype(dtype), e.span)
        if not (isinstance(inner, ir.Load) and inner.ty.rank == 2):
            inner = gen.materialize(inner, "2d")
        ops.append(tile)
        writes.append((tile, inner, transposed))
    if writes:
        gen.sync_before_overwrite()
        copied = False
        for tile, src, transposed in writes:
            if isinstance(src, ir.Load):
                copied |= stage_load(gen, tile, src)
            else:
                write_registers(gen, tile, src, transposed)
        if copied:
            gen.out.line("cp_async_commit(); cp_async_wait<0>();")
        gen.sync()
    if into is None:
        into = gen.declare(None, "2d", (m, n), "f32")
        ctx = gen.ctx_for("2d", (m, n))
        gen.emit_loop(ctx, [f"{gen.access(into, ctx)} = 0.0f;"])
    if dtype == "tf32":
        emit_mma_tf32(gen, into, ops[0], ops[1], m, n, kk)
    else:
        emit_mma(gen, into, ops[0], ops[1], m, n, kk, dtype)
    return into
