"""dot on Hopper's warpgroup MMA: `wgmma.mma_async.m64nNk16` with bf16 / f16 operands, b from
shared memory, a from shared memory or from registers (attention's P), f32 accumulators in
registers. A tuner choice (Schedule.wgmma) for kernels whose tensor-core dots read b from shared
memory (matmul, attention); PTX for compute_90a.

Each warpgroup (4 consecutive warps) computes 64 rows x all N columns: the CTA is laid out as
MmaGrid(WR = warps, WC = 1), 16 rows per warp, whose register order is wgmma's accumulator order
(register 4s + 2h + e of a thread is its element acc[h][2s + e]).

Operands sit in shared memory in the orientation of their source, so that staging is a straight
16-byte cp.async copy, and the descriptor tells the tensor cores which it is:
- K-major (a k-contiguous source, matmul's A[m, k]): 8x8 core matrices of 16-bit elements (8 rows
  of 16 bytes, 128 contiguous bytes). Rows of exactly 128 bytes (k = 64) use the 128-byte swizzle
  (8-row groups 1024 bytes apart); otherwise no swizzle: neighbours along k 128 bytes apart (the
  leading byte offset), 8-row groups k/8 * 128 bytes apart (the stride byte offset). The 8 chunks
  of consecutive threads fill one core matrix or one swizzled row: no bank conflict.
- MN-major (a source contiguous along x, matmul's B[k, n], x a multiple of 64): blocks of 64 x
  (128 bytes) by all k rows, 128-byte swizzle (row r's chunk c at c ^ (r % 8)); with the
  transpose bit of wgmma (imm-trans) the leading byte offset is the stride between 64-wide x
  blocks and the stride byte offset the one between 8-row groups of k (1024 bytes). Consecutive
  threads copy consecutive 16-byte chunks of a source row: coalesced, one 128-byte row per 8.
An x-contiguous operand whose x is not a multiple of 64 is copied as mma.py does and transposed
into the K-major layout (transpose_into: 4 blocks of 8x8 per ldmatrix.trans, one 4-byte store per
block and thread). Writes by threads are made visible to the tensor cores' async proxy
(fence.proxy.async) before the barrier.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler import builtins
from compiler.cuda.mainloops.pingpong import handover as pingpong
from compiler.cuda.mainloops.wgmma import fp8_promote
from compiler.cuda.operands import element_bytes, element_ctype
from compiler.frontend import ir

MAX_N = 256


@dataclass(frozen=True)
class CoreTile:
    """An operand in a layout the wgmma descriptor reads: K-major ([x][k] core matrices of 8 rows
    of 16 bytes) or, `mn_major` (16-bit only), the source's [k][x] in 64-wide swizzled blocks (see
    the module doc). `dtype` is the storage type: bf16, f16, or f32 holding TF32 values (K-major
    with 128-byte rows only: k = 32)."""

    ptr: str  # C expression of type ctype*
    role: str
    k: int
    x: int
    dtype: str
    mn_major: bool = False
    # K-major with rows wider than 128 bytes (k a multiple of row_elems), stored as k / row_elems
    # blocks of [x][row_elems], each 128-byte swizzled: what 128-byte-wide bulk tensor copies write
    # (mainloops/tma_ws/ring.py: attention's K at D = 128, 16-bit; an fp8 k tile of 256)
    blocked: bool = False

    @property
    def elem_bytes(self) -> int:
        return element_bytes(self.dtype)

    @property
    def ctype(self) -> str:
        return element_ctype(self.dtype)

    @property
    def vector(self) -> int:  # elements in one 16-byte chunk
        return 16 // self.elem_bytes

    @property
    def row_elems(self) -> int:  # elements in one 128-byte swizzled row
        return 128 // self.elem_bytes

    @property
    def k_contiguous(self) -> bool:
        return not self.mn_major

    @property
    def rows(self) -> int:  # stored rows, as the source lies: [x][k] or [k][x]
        return self.k if self.mn_major else self.x

    @property
    def cols(self) -> int:
        return self.x if self.mn_major else self.k

    @property
    def swizzled(self) -> bool:
        """128-byte swizzle: MN-major blocks always; K-major rows of exactly 128 bytes (k = 64
        16-bit or 32 TF32 values). Row r's 16-byte chunk c sits at chunk c ^ (r % 8) of the row
        (the tile 1024-byte aligned)."""
        return self.mn_major or self.blocked or self.k * self.elem_bytes == 128

    @property
    def sbo(self) -> int:  # bytes between 8-row groups (of x, or of k when MN-major)
        return 1024 if self.swizzled else self.k // 8 * 128

    @property
    def lbo(self) -> int:  # bytes between 64-wide x blocks (MN-major), core matrices along k (K-major)
        if self.mn_major:
            return self.k * 128
        return 16 if self.swizzled else 128  # 16: unused with a swizzle

    @property
    def mma_k(self) -> int:  # k of one wgmma: 32 bytes of each row (16 16-bit values, 8 TF32)
        return 32 // self.elem_bytes

    @property
    def k_step(self) -> int:  # elements from one wgmma k step to the next, in the descriptor
        if self.mn_major:
            return 16 * 64
        return self.mma_k if self.swizzled else 128

    def k_offset(self, step: int) -> int:
        """Elements from the tile's start to k step `step` in the descriptor (a blocked tile
        moves to the next block every row_elems / mma_k steps)."""
        if self.blocked:
            k, w = step * self.mma_k, self.row_elems
            return (k // w) * self.x * w + k % w
        return step * self.k_step

    @property
    def x_block(self) -> int:  # elements from one 64-wide x block (a warpgroup's rows of a) to the next
        return 64 * (self.row_elems if self.blocked else self.k)

    @property
    def elements(self) -> int:
        return self.x * self.k

    def chunk(self, e: str, per_row: int) -> tuple[str, str]:
        """(row, col) of 16-byte chunk number e: eight consecutive chunks fill 128 contiguous bytes."""
        assert not self.blocked, "a blocked tile is written by bulk tensor copies, not by threads"
        v = self.vector
        if self.mn_major:
            return f"(({e}) / {per_row})", f"((({e}) % {per_row}) * {v})"
        if self.swizzled:
            return f"(({e}) / 8)", f"((({e}) % 8) * {v})"
        return f"(({e}) % 8 + (({e}) / {8 * per_row}) * 8)", f"(((({e}) / 8) % {per_row}) * {v})"

    def offset(self, row: str, col: str) -> str:
        v, w = self.vector, self.row_elems
        if self.blocked:  # row: x, col: k; block col / w holds [x][w]
            inner = f"(({row}) * {w} + (((({col}) % {w}) / {v}) ^ (({row}) % 8)) * {v} + ({col}) % {v})"
            return f"((({col}) / {w}) * {self.x * w} + {inner})"
        if self.mn_major:  # row: k, col: x
            return (
                f"((({col}) / 64) * {self.x_block} + ({row}) * 64"
                f" + (((({col}) % 64) / 8) ^ (({row}) % 8)) * 8 + ({col}) % 8)"
            )
        if self.swizzled:
            return f"(({row}) * {w} + (((({col}) / {v}) ^ (({row}) % 8)) * {v}) + ({col}) % {v})"
        return f"((({row}) / 8) * {self.sbo // 2} + (({col}) / 8) * 64 + (({row}) % 8) * 8 + ({col}) % 8)"


def point_at_stage(gen, name: str, tile: CoreTile, base: str, size: int, stage: str) -> None:
    """Let `name` read stage `stage` (a C expression) of the ring at `base` (`size` elements a
    stage), laid out as `tile`; the stage is a ring tile (a wgmma group may stay in flight on it)."""
    cur = gen.fresh("stage")
    gen.out.line(f"{tile.ctype}* const {cur} = {base} + ({stage}) * {size};")
    gen.loop.ring_tiles.add(cur)
    gen.scope.vals[name] = replace(tile, ptr=cur)


def core_layout(k_contiguous: bool, x: int) -> bool | None:
    """mn_major for an operand stored as its source lies, or None where the descriptor cannot
    read that orientation (x-contiguous with x not a multiple of 64: transposed instead)."""
    if k_contiguous:
        return False
    return True if x % 64 == 0 else None


def alloc_core(gen, role: str, k: int, x: int, dtype: str, mn_major: bool) -> CoreTile:
    from compiler.cuda.operands import tile_floats

    probe = CoreTile("", role, k, x, dtype, mn_major)
    ptr = f"(reinterpret_cast<{probe.ctype}*>{gen.smem.alloc_perm(tile_floats(probe), 256)})"
    return CoreTile(ptr, role, k, x, dtype, mn_major)


PRELUDE = r"""
__device__ __forceinline__ unsigned long long wg_desc(const void* p, unsigned lbo_bytes, unsigned sbo_bytes,
                                                      unsigned swizzle) {
  unsigned long long a = smem_u32(p);
  return ((a & 0x3FFFFull) >> 4) | ((unsigned long long)(lbo_bytes >> 4) << 16)
       | ((unsigned long long)(sbo_bytes >> 4) << 32) | ((unsigned long long)swizzle << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait_one() {  // all but the group just issued are done
  asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
}
__device__ __forceinline__ void wg_commit_wait_one() { wg_commit(); wg_wait_one(); }
__device__ __forceinline__ void wg_commit_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
__device__ __forceinline__ void wg_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}
__device__ __forceinline__ void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
""".strip("\n")


def operand_in_shared(e: ir.Expr, shared: dict) -> bool:
    """A dot operand that lives in shared memory: a 2-D load or a shared let, maybe transposed."""
    if builtins.is_transpose(e):
        e = e.args[0]
    if isinstance(e, ir.Load):
        return e.ty.rank == 2
    return isinstance(e, ir.Name) and e.name in shared


def fits(gen, m: int, n: int) -> bool:
    grid = gen.plan.grid
    return (
        grid.warps_n == 1 and grid.warps_m % 4 == 0 and m == 16 * grid.warps_m and n % 8 == 0 and n <= MAX_N
    )


def transpose_into(gen, staged, core: CoreTile) -> None:
    """The x-contiguous staging buffer `staged` (MmaTile, [k][x]) into `core` ([x][k] core matrices)."""
    warps = gen.plan.grid.threads // 32
    units = (core.k // 8) * (core.x // 32)
    gen.out.open(f"for (int u_ = th_warp; u_ < {units}; u_ += {warps})")
    gen.out.line(f"const int kb_ = u_ % {core.k // 8}, xb_ = (u_ / {core.k // 8}) * 4;")
    gen.out.line("unsigned t4_[4];")
    row, col = "(kb_ * 8 + (th_lane & 7))", "(xb_ + (th_lane >> 3)) * 8"
    gen.out.line(f"ldsm_x4_t(t4_, {staged.ptr} + {row} * {staged.ld} + {col});")
    gen.out.line("#pragma unroll")
    if core.swizzled:  # row n = (xb_ + q_) * 8 + g, k = kb_ * 8 + 2t
        at = "(xb_ + q_) * 512 + (th_lane >> 2) * 64 + ((kb_ ^ (th_lane >> 2)) * 8) + (th_lane & 3) * 2"
    else:
        at = f"(xb_ + q_) * {core.sbo // 2} + kb_ * 64 + (th_lane >> 2) * 8 + (th_lane & 3) * 2"
    gen.out.line(f"for (int q_ = 0; q_ < 4; ++q_) *reinterpret_cast<unsigned*>({core.ptr} + {at}) = t4_[q_];")
    gen.out.close()


def emit_wgmma(
    gen, acc, sa, sb: CoreTile, m: int, n: int, kk: int, dtype: str, wait: str, fresh: bool = False
) -> None:
    """acc[M, N] += a b: per k step one wgmma per warpgroup (k16 for 16-bit operands, k8 for
    TF32), then commit and wait: for "all" groups; or for all but this one ("one": it runs on
    while the next iteration copies and transposes; the loop's end waits for it before acc is
    read; with late copies, or a register-staged ring (mainloops/wgmma/tf32.py), the wait goes to the end
    of the loop body, after the copies or stores of a later stage, loops.ring_lets). In a
    rotated loop (loops.Rotation) the first dot ends at "rotated": commit, then the slot where
    the carried dot is issued; the last dot is "carried": its A fragments and b stage are kept
    for the next iteration, which issues it. `sa` is a CoreTile or a register tile in the
    accumulator layout (attention's P): each warp's 16 rows of a k step are then the A fragment
    of mma.m16n8k16, which is wgmma's register A layout per warp. TF32 takes both operands
    K-major from shared memory and has no transpose bits. `fresh`: acc holds nothing yet; the
    first k step ignores it (scale-d 0) rather than have it zeroed, since ordinary writes of
    accumulator registers while another group is in flight make ptxas serialize. An fp8 dot
    adding into acc goes through mainloops/wgmma/fp8_promote.py (a fresh chain per k tile, added in f32)."""
    mma_k = _mma_k(dtype)
    from_regs = not isinstance(sa, CoreTile)
    where = ", a from registers" if from_regs else ""
    gen.out.line(f"// warpgroup MMA: m64n{n}k{mma_k} {dtype}, {kk // mma_k} k steps{where}")
    if wait == "carried":
        rot = gen.loop.rotation
        for s in range(kk // 16):
            frag = _register_fragment(sa.cname, s, dtype)
            gen.out.line(" ".join(f"{rot.frag}[{s}][{q}] = {f};" for q, f in enumerate(frag)))
        gen.out.line(f"{rot.stage} = {sb.ptr};")
        frags = [[f"{rot.frag}[{s}][{q}]" for q in range(4)] for s in range(kk // 16)]
        kept = replace(sb, ptr=rot.stage)
        rot.issue = issue(acc, frags, kept, n, kk, dtype, fresh)
        return
    if dtype in ir.FP8 and not fresh and wait not in ("rotated", "carried"):  # never continue acc's chain
        return fp8_promote.emit(gen, acc, sa, sb, n, kk, dtype, issue)
    # ping-pong: this warpgroup's turn (mainloops/pingpong/handover.py)
    if wait == "rotated" and gen.loop.turns:
        gen.out.line(pingpong.wait_turn())
    gen.out.line("wg_fence();")
    frags = [_register_fragment(sa.cname, s, dtype) for s in range(kk // 16)] if from_regs else sa
    gen.out.block(issue(acc, frags, sb, n, kk, dtype, fresh))
    late = gen.plan.mainloop.late_copies
    if wait == "rotated":
        gen.out.line("wg_commit();")
        gen.loop.rotation.slot = (len(gen.out.lines), gen.out.depth)
    # the later stage out before the wait (a TMA ring releases group i - 1's stage after it instead)
    elif wait == "one" and (late or gen.loop.register_ring) and not gen.loop.tma_split:
        gen.out.line("wg_commit();")
        gen.loop.tail.append(lambda: gen.out.line("wg_wait_one();"))
    else:
        gen.out.line("wg_commit_wait_one();" if wait == "one" else "wg_commit_wait();")


def issue(acc, sa, sb: CoreTile, n: int, kk: int, dtype: str, fresh: bool) -> list[str]:
    """The wgmma instructions of acc += a b (acc = a b when `fresh`), one block per k step; `sa`
    a CoreTile or, per k step, the four C expressions of this lane's A fragment. The shared-memory
    descriptors are made once (the tile's start) and each k step adds its offset in 16-byte units
    to the start-address field (step_descriptor): in an attention loop that left 592 SASS
    instructions per iteration of the 714 that a descriptor made from each step's address took."""
    mma_k = _mma_k(dtype)
    regs = n // 2
    outs = []
    for i in range(regs):
        s, h, e = i // 4, (i // 2) % 2, i % 2
        outs.append(f'"+f"({acc.cname}[{h}][{2 * s + e}])')
    d = ", ".join(f"%{i}" for i in range(regs))
    lines = ["{", f"  const unsigned long long db0_ = {_desc(sb, sb.ptr)};"]
    if isinstance(sa, CoreTile):  # this warpgroup's 64 rows of a
        a_rows = f"{sa.ptr} + (th_warp / 4) * {sa.x_block}"
        lines.append(f"  const unsigned long long da0_ = {_desc(sa, a_rows)};")
    for s in range(kk // mma_k):
        lines.append("  {")
        lines.append(f"    const unsigned long long db_ = db0_ + {step_descriptor(sb, s)};")
        if not isinstance(sa, CoreTile):
            lines.append("    const unsigned " + ", ".join(f"a{q}_ = {f}" for q, f in enumerate(sa[s])) + ";")
            a_op, trans, b_op = "{" + ", ".join(f"%{regs + q}" for q in range(4)) + "}", "", f"%{regs + 4}"
            a_in = ", ".join(f'"r"(a{q}_)' for q in range(4))
        else:
            lines.append(f"    const unsigned long long da_ = da0_ + {step_descriptor(sa, s)};")
            a_op, a_in, trans, b_op = f"%{regs}", '"l"(da_)', f"{int(sa.mn_major)}, ", f"%{regs + 1}"
        # TF32 and fp8 read K-major operands only: no transpose bits
        imm = "p, 1, 1" if dtype == "tf32" or dtype in ir.FP8 else f"p, 1, 1, {trans}{int(sb.mn_major)}"
        lines.append(
            f'    asm volatile("{{ .reg .pred p; setp.ne.b32 p, {int(not (fresh and s == 0))}, 0; '
            f"wgmma.mma_async.sync.aligned.m64n{n}k{mma_k}.f32.{dtype}.{dtype} {{{d}}}, {a_op}, {b_op}, "
            f'{imm}; }}" : {", ".join(outs)} : {a_in}, "l"(db_));'
        )
        lines.append("  }")
    lines.append("}")
    return lines


def _mma_k(dtype: str) -> int:
    """k of one wgmma: 32 bytes of each operand row (8 TF32, 16 16-bit, 32 fp8 values)."""
    return 8 if dtype == "tf32" else 32 if dtype in ir.FP8 else 16


def step_descriptor(t: CoreTile, step: int) -> int:
    """What k step `step` adds to the descriptor of the tile's start: its offset in 16-byte units,
    the unit of the start-address field (bits 0-13, the shared address >> 4). Adding is exact: the
    offset is a multiple of 16 bytes and the stepped address stays inside the CTA's shared memory
    (below 2^18 bytes), so the field cannot carry into the byte offsets above it."""
    off = t.k_offset(step) * t.elem_bytes
    assert off % 16 == 0, (t, step)
    return off // 16


def _register_fragment(p: str, step: int, dtype: str) -> list[str]:
    """This lane's A fragment of k step `step` from register tile p (rows g, g + 8 in p[0],
    p[1]; k columns 16 step + 2t, +1 at local 4 step, +1 and + 8 at 4 step + 2, + 3), packed
    and rounded to the operand type."""
    pack, j = ("pack_bf16x2" if dtype == "bf16" else "pack_f16x2"), 4 * step
    return [f"{pack}({p}[{h}][{j + q}], {p}[{h}][{j + q + 1}])" for q in (0, 2) for h in (0, 1)]


def _desc(t: CoreTile, ptr: str) -> str:
    return f"wg_desc({ptr}, {t.lbo}, {t.sbo}, {int(t.swizzled)})"
