"""TF32 warpgroup MMA fed by bulk tensor copies (Schedule.tma with a TF32 dot), by role swap:
each CTA computes its tile of C^T = B^T A^T, so that no operand is turned or rounded by the
threads.

wgmma reads TF32 only K-major from shared memory, and matmul's B[k, n] is n-contiguous. With the
roles swapped:
- wgmma's b (shared memory, K-major) is A^T: A[m, k] row-major is k-contiguous. It arrives as one
  box of 32 f32 x TILE_M rows with the 128-byte swizzle, exactly wgmma.CoreTile's K-major k = 32
  layout (row m's 16-byte chunk c at c ^ (m % 8)); wgmma's N is TILE_M (<= 256).
- wgmma's a (registers, the `wgmma ... RS` form, which TF32 has) is B^T: B[k, n] arrives as
  TILE_N / 32 boxes of 32 n x 32 k rows (`raw_offset`), and each consumer loads its fragments
  with 32-bit loads. Fragment row r of a warp stands for column `frag_n` of the CTA's tile: any
  permutation of the rows of C^T is a valid product, and this one makes every load instruction
  meet 32 distinct banks (tests/cuda/test_cuda_tma_tf32.py checks it).
- Both maps have the data type TFLOAT32 (mainloops/tma_ws/maps.py): the copy rounds every f32 to TF32,
  to nearest with ties to even, the language's TF32 rounding, on the way into shared memory. So
  the loop has no rounding instruction and every byte is written once, by the copy.
Shared-memory traffic per 256 (m) x 128 (n) x 32 k tile: the copies write 48 KB, the fragment
loads read 16 KB and the two warpgroups' wgmma read A^T, 64 KB: 128 KB, as the bf16 ring's
128 x 256 x 64 (docs/performance.md compares the TF32 designs by these bytes).

Each consumer warpgroup owns 64 columns n of the tile (64 rows of C^T) and all its rows m, or,
with more warpgroups than TILE_N / 64, an equal share of them (wgmma's N: TILE_M, or TILE_M / 2
for 256 x 64 on two warpgroups). Its accumulator `acc_t` holds its 64 x N of C^T; after the
loop it goes through shared memory
(the ring's, free by then) into the kernel's accumulator in its usual layout (`finish`), so the
epilogue (alpha, beta C, bias, activation, the output cast, the stores) is the kernel's own.

Consumer iteration i, per k step s of 8 (4 a tile): wait until at most 3 groups are in flight
(the group that last read fragment registers s, step s of iteration i - 1, is then done, which
PTX requires before they are written), load them, fence, issue the wgmma, commit. The last wait
of iteration i leaves none of iteration i - 1 in flight, and the end of the body releases its
stage (tma.consume), so copies run up to S - 2 tiles ahead, as in the bf16 ring.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import analysis
from compiler.cuda.mainloops.tma_ws import ring as tma
from compiler.cuda.mainloops.tma_ws.maps import MapSpec
from compiler.cuda.mainloops.wgmma import mma as wgmma
from compiler.cuda.schedule import ring_stages
from compiler.frontend import ir

BOX = 32  # f32 values in one 128-byte swizzled row, and the k tile
STEPS = BOX // 8  # wgmma k steps (k8) of one k tile
IN_FLIGHT = STEPS - 1  # k-step groups left in flight while the next step's fragments load
MARGIN = 4 * 1024  # bytes of shared memory left to the rest of the kernel
PAD = 2  # words after each row of the epilogue's staging: its stores meet 32 distinct banks
WHAT = (
    "TF32 bulk tensor copies swap the roles (C^T = B^T A^T): they take acc += dot(a, b) of 2-D slices "
    "of 2-D f32 tensors in 16-byte rows, a k-contiguous, b n-contiguous, k = 32, TILE_N in 64s (one "
    "warpgroup's rows of C^T) that split the warpgroups (a CTA of at least one warpgroup), and each "
    "warpgroup's share of TILE_M in 8s, <= 256"
)


@dataclass(frozen=True)
class Swap:
    a: tma.Operand  # A[m, k] stages, K-major [TILE_M][32]: wgmma's b
    b: tma.Operand  # B[k, n] stages, TILE_N / 32 boxes of [32 k][32 n]: wgmma's a, by fragments
    m: int  # TILE_M
    n: int  # TILE_N: 64 per warpgroup along n
    wn: int  # wgmma's N: the columns m of C^T each warpgroup takes (all of m, or a share)
    acc_t: str  # C name of the C^T accumulator, float [2][wn / 4] (wgmma's register order)
    region: str  # C name of the ring's shared memory, which `finish` reuses
    warp: str  # C name of the warp's index among the warps that share its m columns
    m0: str  # C name of the warpgroup's first column m


@dataclass(frozen=True)
class _Acc:  # wgmma.issue's view of the C^T accumulator
    cname: str


def raw_offset(k: str, x: str, k_rows: int) -> str:
    """Offset of element (k, x) in a stage of B[k, n]: 32-wide boxes of k_rows rows, each with
    the 128-byte swizzle (row k's chunk c at c ^ (k % 8))."""
    chunk = f"(((({x}) % {BOX}) / 4) ^ (({k}) % 8))"
    return f"((({x}) / {BOX}) * {BOX * k_rows} + ({k}) * {BOX} + {chunk} * 4 + ({x}) % 4)"


def frag_n(h: int, warp: str, lane: str = "th_lane") -> str:
    """The tile column n of fragment row g + 8 h (g = lane / 4) of warp `warp` (its index
    among the 4 TILE_N / 64 warps that share its columns m, `warp_along_n`): warps
    2 j and 2 j + 1 share n = 32 j .. 32 j + 31 (one box), and n % 32 = 16 (g / 4) + 4 c + g % 4
    with c = 2 (warp % 2) + h: with k % 8 = t (+ 4) for the lane's t = lane % 4, the swizzled
    chunk (4 (g / 4) + c) ^ (k % 8) takes 4 distinct values per g / 4 over t, and g % 4 picks
    the word: 32 distinct banks."""
    g = f"(({lane}) >> 2)"
    return f"((({warp}) / 2) * 32 + ({g} >> 2) * 16 + (2 * (({warp}) % 2) + {h}) * 4 + ({g} & 3))"


def frag_k(step: int, q: int, lane: str = "th_lane") -> str:
    """The k (in the tile) of fragment register q of k step `step`: wgmma's register a of
    m64nNk8 TF32 holds (row g, k t), (g + 8, t), (g, t + 4), (g + 8, t + 4) in a0..a3."""
    return f"({8 * step + 4 * (q // 2)} + (({lane}) & 3))"


def warp_along_n(groups: int, warp: str = "th_warp") -> str:
    """A consumer warp's index among the warps of the warpgroups along n (`groups` = TILE_N /
    64 of them; the others, if any, take the other columns m)."""
    return f"(((({warp}) / 4) % {groups}) * 4 + ({warp}) % 4)"


def first_m(groups: int, wn: int, warp: str = "th_warp") -> str:
    """The first column m (of C^T) of a consumer warp's warpgroup."""
    return f"((({warp}) / {4 * groups}) * {wn})"


def acc_index(j: int, lane: str = "th_lane") -> str:
    """The tile row m of accumulator register [h][j]: wgmma's column 8 (j / 2) + 2 t + j % 2."""
    return f"({8 * (j // 2) + j % 2} + 2 * (({lane}) & 3))"


def _check(gen, s: ir.For, entries) -> tuple:
    """(a entry, b entry, TILE_M, TILE_N, wgmma's N), or pruned with WHAT."""
    if len(gen.plan.tc_dots) != 1 or gen.loop.barriers or gen.out.depth != 1:
        raise gen.pruned(s.span, "bulk tensor copies take a single dot's loop at the kernel's top level")
    at = analysis.tc_dots_at(gen.plan.tc_dots, s)
    if len(entries) != 2 or len(at) != 1:
        raise gen.pruned(s.span, WHAT)
    (i, dot), names = at[0], {st.name: (st, role, tr, tile) for st, role, tr, tile in entries}
    stmt = s.body[i]
    a, b = (names.get(x.name) if isinstance(x, ir.Name) else None for x in dot.args)
    ok = a is not None and b is not None and not a[2] and not b[2] and isinstance(stmt, ir.Assign)
    if ok:
        split, rest = gen.dot_split(stmt)
        ok = split is dot and (rest is None or (isinstance(rest, ir.Name) and rest.name == stmt.name))
        ok = ok and not any(analysis.touches(x, stmt.name) for x in s.body if x is not stmt)
    if not ok or not all(_copyable(gen, e[0].value) for e in (a, b)):
        raise gen.pruned(s.span, WHAT)
    m, n, groups = a[3].x, b[3].x, gen.plan.grid.threads // 128
    along_m = groups // max(1, n // 64)
    # fewer than 128 threads hold no whole warpgroup (along_m would be 0)
    if groups < 1 or a[3].k != BOX or n % 64 or groups % (n // 64) or m % (8 * along_m) or m // along_m > 256:
        raise gen.pruned(s.span, WHAT)
    return a, b, m, n, m // along_m


def _copyable(gen, load: ir.Load) -> bool:
    param = gen.tensor(load.tensor, load.span)
    dims = gen.dims_of(param)
    if param.dtype != "f32" or len(dims) != 2 or dims[-1] % 4 or load.tensor in gen.stored_tensors():
        return False
    if load.fill is not None and not (isinstance(load.fill, ir.Const) and float(load.fill.value) == 0.0):
        return False
    return all(isinstance(i, ir.SliceRange) for i in load.index)


def ring_prologue(gen, s: ir.For, entries, start: str, stop_name: str, step: str) -> dict:
    """The ring (A and B stages in one region, big enough for `finish`'s staging too), the
    mbarriers and the producer (tma.split), and the C^T accumulator, zeroed; `entries`:
    (let, role, transposed, tile) with tile's ptr unset."""
    a, b, m, n, wn = _check(gen, s, entries)
    stage = BOX * (m + n)
    # held beside the kernel's words: up to 256 words of padding that align the region to 1024
    # bytes; as few as 1 stage, which the check below prunes with this ring's own reason
    used = gen.smem.perm_floats + 256
    stages = ring_stages(gen.plan.mainloop.stages, 1, stage, used, gen.plan.smem_limit, MARGIN)
    if stages < 3:
        raise gen.pruned(s.span, "TF32 bulk tensor copies need 3 stages in shared memory")
    region = gen.fresh("ring")
    region_words = max(stages * stage, m * (n + PAD))
    words = gen.smem.alloc_perm(region_words, 256)
    gen.smem.spent_ring = (gen.smem.perm_floats - (region_words + 3) // 4 * 4, region_words)
    gen.out.line(f"float* const {region} = reinterpret_cast<float*>{words};")
    ops = []
    for (st, _, _, tile), at, box_rows in ((a, 0, m), (b, stages * m * BOX, BOX)):
        rows, cols = gen.dims_of(gen.tensor(st.value.tensor, st.value.span))
        spec = MapSpec(f"tm_{st.name}", st.value.tensor, box_rows, BOX, rows, cols, dtype="tf32")
        ops.append(tma.Operand(st, tile, spec, f"({region} + {at})", tile.elements))

    def copies(o: tma.Operand, dst: str, cols: str) -> list[tuple[str, str]]:
        if o is ops[0]:
            return [(dst, cols)]
        return [(f"{dst} + {j * BOX * BOX}", f"{cols} + {j * BOX}") for j in range(n // BOX)]

    ring = tma.split(gen, s, ops, stages, (start, stop_name, step), copies)
    acc_t, warp, m0 = gen.fresh("acc_t"), gen.fresh("warp_n"), gen.fresh("m0")
    gen.out.line(f"const int {warp} = {warp_along_n(n // 64)}, {m0} = {first_m(n // 64, wn)};")
    gen.out.line(f"float {acc_t}[2][{wn // 4}];")
    gen.out.line(f"for (int j_ = 0; j_ < {wn // 4}; ++j_) {acc_t}[0][j_] = {acc_t}[1][j_] = 0.0f;")
    gen.loop.swap = Swap(ops[0], ops[1], m, n, wn, acc_t, region, warp, m0)
    return {o.let.name: ("tmatf32", o, ring) for o in ops}


def ring_lets(gen, lets: list[ir.Let]) -> None:
    """One consumer iteration's top: wait for its stage (tma.consume, which also releases
    iteration i - 1's at the end of the body); the dot (`dot`) reads the stage."""
    _, _, stage = tma.consume(gen, lets)
    for s in lets:
        o = gen.loop.pipelined[s.name][1]
        cur = gen.fresh("stage")
        gen.out.line(f"float* const {cur} = {o.base} + ({stage}) * {o.size};")
        gen.scope.vals[s.name] = _Stage(cur)


@dataclass(frozen=True)
class _Stage:  # a swapped operand's stage in this iteration (not a tile the other emitters read)
    ptr: str


def swapped(gen, e: ir.Call) -> bool:
    return gen.loop.swap is not None and all(
        isinstance(x, ir.Name) and isinstance(gen.scope.vals.get(x.name), _Stage) for x in e.args
    )


def dot(gen, e: ir.Call, into):
    """acc += dot(a, b) of one k tile, as C^T += B^T A^T into `acc_t` (the module doc's steps);
    `finish` adds it to `into` (acc) after the loop."""
    sw = gen.loop.swap
    sa, sb = (gen.scope.vals[x.name].ptr for x in e.args)
    gen.used.wgmma = True
    gen.loop.swap_acc = into
    what = f"C^T[{sw.n}x{sw.m}] += B^T A^T, k8 TF32 (N = {sw.wn}), a in registers"
    gen.out.line(f"// warpgroup MMA by role swap: {what}")
    frag = gen.fresh("frag")
    gen.out.line(f"unsigned {frag}[{STEPS}][4];")
    for step in range(STEPS):
        gen.out.line(f'asm volatile("wgmma.wait_group.sync.aligned {IN_FLIGHT};" ::: "memory");')
        for q in range(4):
            at = raw_offset(frag_k(step, q), frag_n(q % 2, sw.warp), BOX)
            gen.out.line(f"{frag}[{step}][{q}] = __float_as_uint({sb}[{at}]);")
        gen.out.line("wg_fence();")
        core = wgmma.CoreTile(f"({sa} + {sw.m0} * {BOX} + {step * 8})", "b", BOX, sw.wn, "f32")
        frags = [[f"{frag}[{step}][{q}]" for q in range(4)]]
        gen.out.block(wgmma.issue(_Acc(sw.acc_t), frags, core, sw.wn, 8, "tf32", False))
        gen.out.line("wg_commit();")
    return into


def finish(gen) -> None:
    """After the loop and the wait for every group: acc += (C^T)^T through shared memory (the
    ring's region; each consumer warpgroup waited for its groups, and the barrier orders the
    other's), in the kernel's layout of acc."""
    sw, acc = gen.loop.swap, gen.loop.swap_acc
    gen.loop.swap = None
    if acc is None:
        return
    ld = sw.n + PAD
    gen.sync()
    for h in range(2):
        gen.out.open("")
        gen.out.line(f"const int n_ = {frag_n(h, sw.warp)};")
        for j in range(sw.wn // 4):
            gen.out.line(f"{sw.region}[({sw.m0} + {acc_index(j)}) * {ld} + n_] = {sw.acc_t}[{h}][{j}];")
        gen.out.close()
    gen.sync()
    ctx = gen.ctx_for("2d", (sw.m, sw.n))
    row, col = ctx.pos
    gen.emit_loop(ctx, [f"{gen.access(acc, ctx)} += {sw.region}[({row}) * {ld} + ({col})];"])
    gen.sync()
