"""A warp-specialized ring for warpgroup MMA (Schedule.tma): one more warpgroup, the producer,
fills the ring by bulk tensor copies (TMA, `cp.async.bulk.tensor`), and the CTA's own
warpgroups, the consumers, only wait and multiply.

Per stage s two mbarriers: full[s] (one arrival, the producer's, plus the stage's bytes, which
the copies complete) and empty[s] (one arrival per consumer warp). The producer, one thread of
the extra warpgroup, walks the loop: for iteration j it waits until stage j % S was released for
iteration j - S, announces the stage's bytes on full[s] and issues one copy per 128-byte-wide box
(a 16-bit operand's 64-wide block, an fp8 one's 128-wide block of k: the box lands in exactly the
128-byte-swizzled layout the wgmma descriptor reads, wgmma.CoreTile, and elements outside the
tensor arrive as zeros). Each consumer iteration i waits on full[i % S], issues its wgmma group,
waits for group i - 1 and then releases that group's stage: copies run up to S - 2 stages ahead
with no CTA-wide barrier in the loop, and the 256 consumer threads issue no copies. An fp8 dot's
promoted k tile ends with a wait for all of its groups (mainloops/wgmma/fp8_promote.py): its
iteration releases its own stage, and copies run S - 1 ahead. Registers:
with two consumer warpgroups `setmaxnreg` gives the producer 40 and each consumer thread 232 (the
kernel starts at 168: 384 threads, one CTA per multiprocessor); with one, 256 threads start with
enough. The producer warpgroup returns after its loop, so everything after the loop runs on the
consumers alone, and a barrier there is `bar.sync 1, consumers` (gen.sync).

The tensor maps are kernel parameters (`const __grid_constant__ TmaMap`), made at the launch
from the operand arrays and kept for later launches with the same arrays (mainloops/tma_ws/maps.py).

Takes a loop at the kernel's top level with a single tensor-core dot whose operands are 2-D slices
of 2-D 16-bit tensors with 16-byte row pitch, laid out with 128-byte rows (K-major k = 64, or
MN-major), or of fp8 tensors K-major with k = 128 or 256 (fp8.py keeps fp8 dots only in that form);
anything else is pruned, so the tuner never measures a variant that is not one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.cuda import mbarriers
from compiler.cuda.mainloops.pingpong import handover as pingpong
from compiler.cuda.mainloops.tma_ws.maps import MapSpec
from compiler.cuda.mainloops.wgmma.mma import CoreTile, point_at_stage
from compiler.cuda.schedule import ring_stages
from compiler.frontend import ir

PRODUCER_REGS, CONSUMER_REGS = 40, 232
PRODUCER_THREADS = 128  # one warpgroup
BOX_COLS = 64  # 16-bit elements in one 128-byte swizzled row

TMA_LOAD = r"""
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap* map, int c0, int c1, unsigned bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];"
               :: "r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
""".strip("\n")
TMA_LOAD_3D = r"""
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaMap* map, int c0, int c1, int c2,
                                            unsigned bar) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4}], [%5];"
               :: "r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(bar) : "memory");
}
""".strip("\n")
TMA_MAP = "struct __align__(64) TmaMap { unsigned long long v[16]; };"
PRELUDE = "\n".join([TMA_MAP, mbarriers.PRELUDE, TMA_LOAD])


def prelude(specs) -> str:
    """The helpers a kernel with these tensor maps includes (the 3-D copy only where one is)."""
    return "\n".join([PRELUDE] + ([TMA_LOAD_3D] if any(m.rank == 3 for m in specs) else []))


@dataclass(frozen=True)
class Operand:
    let: ir.Let
    tile: CoreTile  # ptr unset: each stage is this at another address
    spec: MapSpec
    base: str  # C name of the ring's first stage
    size: int  # elements per stage


def _in_boxes(tile, attention: bool):
    """A K-major operand wider than one 128-byte row as 128-byte-wide blocks, the layout such
    boxes write (CoreTile.blocked): attention's K at D = 128 (16-bit), an fp8 k tile of 256
    (fp8.keeps_fp8); matmul's 16-bit tiles are taken as they are."""
    if not isinstance(tile, CoreTile) or tile.mn_major or tile.k <= tile.row_elems or tile.k % tile.row_elems:
        return tile
    return replace(tile, blocked=True) if attention or tile.elem_bytes == 1 else tile


def _copyable(gen, tile, load: ir.Load) -> bool:
    """A 16-bit (or K-major fp8) operand in 128-byte swizzled rows, sliced from a row-major tensor
    by ranges (or `:`) along its last two axes and single positions along any before them (at most one: a 3-D
    map), which the copies read but the kernel does not write."""
    if not isinstance(tile, CoreTile) or tile.elem_bytes not in (1, 2) or not tile.swizzled:
        return False
    if tile.elem_bytes == 1 and tile.mn_major:
        return False
    if not (tile.mn_major or tile.blocked) and tile.k * tile.elem_bytes != 128:
        return False
    param = gen.tensor(load.tensor, load.span)
    dims = gen.dims_of(param)
    # a tensor map's row pitch must be a multiple of 16 bytes (cuTensorMapEncodeTiled refuses
    # others): 8 elements of 16 bits, 16 of fp8
    if len(dims) not in (2, 3) or (dims[-1] * tile.elem_bytes) % 16 or load.tensor in gen.stored_tensors():
        return False
    if load.fill is not None and not (isinstance(load.fill, ir.Const) and float(load.fill.value) == 0.0):
        return False
    *outer, rows, cols = load.index
    ranges = all(isinstance(i, ir.SliceRange | ir.SliceAll) for i in (rows, cols))
    return ranges and all(isinstance(i, ir.SliceIndex) for i in outer) and tile.rows <= 256


def _coordinates(gen, load: ir.Load) -> list[str]:
    """The box's start in the map's coordinates, innermost axis first."""
    def at(item) -> str:
        if isinstance(item, ir.SliceAll):
            return "0"
        return gen.scalar(item.index if isinstance(item, ir.SliceIndex) else item.start)

    return [at(i) for i in reversed(load.index)]


def _check(gen, s: ir.For, carried: bool) -> bool:
    """Prune what the ring cannot take; whether the loop is attention's (two dots, rotated)."""
    if gen.loop.barriers or gen.out.depth != 1:
        raise gen.pruned(s.span, "bulk tensor copies take a loop at the kernel's top level")
    if gen.plan.grid.threads > 2 * PRODUCER_THREADS:  # CONSUMER_REGS for each: 2 x 128 x 232 + 128 x 40
        raise gen.pruned(s.span, "bulk tensor copies take one or two consumer warpgroups")
    attention = len(gen.plan.tc_dots) != 1
    if attention and not (gen.plan.mainloop.rotate and carried):
        raise gen.pruned(s.span, "bulk tensor copies take a single dot's loop or a rotated loop of two")
    if gen.plan.mainloop.pingpong:  # the consumers take turns (mainloops/pingpong/handover.py)
        pingpong.check(gen, s, carried)
    return attention


def ring_prologue(gen, s: ir.For, entries, loop, carried: bool) -> dict:
    """The mbarriers, the producer's whole loop (then it returns) and the consumers' register
    raise; `entries`: (let, role, transposed, tile) with tile's ptr unset; `loop`: (start, stop,
    step) as C names; `carried`: the loop has a dot a rotation carries (loops.deferred_dot)."""
    attention = _check(gen, s, carried)
    tiles = [(st, _in_boxes(tile, attention)) for st, _, _, tile in entries]
    if not all(_copyable(gen, tile, st.value) for st, tile in tiles):
        # the words the 16-bit tiles have always been pruned with (an fp8 tile reaches here only
        # K-major with k = 128 or 256, which is copyable: fp8.keeps_fp8)
        raise gen.pruned(s.span, "bulk tensor copies take 2-D slices of 16-bit tensors in 128-byte rows")
    stage_floats = sum(t.elements * t.elem_bytes // 4 for _, t in tiles)
    stages = ring_stages(gen.plan.mainloop.stages, 3, stage_floats, gen.smem.perm_floats, gen.plan.smem_limit)
    ops = []
    ring_first = gen.smem.perm_floats + (-gen.smem.perm_floats % 256)  # the first buffer's word
    for st, tile in tiles:
        base = gen.fresh("ring")
        ring = gen.smem.alloc_perm(stages * tile.elements * tile.elem_bytes // 4, 256)
        gen.out.line(f"{tile.ctype}* const {base} = reinterpret_cast<{tile.ctype}*>{ring};")
        *outer, rows, cols = gen.dims_of(gen.tensor(st.value.tensor, st.value.span))
        box = (tile.rows, 128 // tile.elem_bytes)  # the box as the tile lies in shared memory
        kind = "u16" if tile.elem_bytes == 2 else "u8"
        spec = MapSpec(f"tm_{st.name}", st.value.tensor, *box, rows, cols, kind, tuple(outer))
        ops.append(Operand(st, tile, spec, base, tile.elements))
    gen.smem.spent_ring = (ring_first, gen.smem.perm_floats - ring_first)
    ring = split(gen, s, ops, stages, loop)
    # the consumers take turns, warpgroup 0 first (mainloops/pingpong/handover.py)
    if gen.plan.mainloop.pingpong:
        pingpong.takes_turns(gen)
        pingpong.first_turn(gen)
    return {o.let.name: ("tmaring", o, ring) for o in ops}


def split(gen, s: ir.For, ops, stages: int, loop, copies=None) -> tuple[int, str, str]:
    """The ring's mbarriers, the producer warpgroup (which then returns) and the consumers'
    register raise: (stages, the mbarriers' C name, the loop's first value's)."""
    start, stop_name, step = loop
    gen.used.tensor_maps += [o.spec for o in ops]
    consumers = gen.plan.grid.threads
    bars = mbarriers.ring(gen, stages, 1, consumers // 32)
    first = gen.fresh("first")
    gen.out.line(f"const int {first} = {start};")
    _producer(gen, s, ops, stages, bars, (first, stop_name, step), copies)
    if _shares_registers(consumers):
        gen.out.line(f'asm volatile("setmaxnreg.inc.sync.aligned.u32 {CONSUMER_REGS};");')
    gen.loop.tma_split = consumers
    return stages, bars, first


def _producer(gen, s: ir.For, ops, stages: int, bars: str, loop, copies=None) -> None:
    """The producer warpgroup; `copies(o, dst, cols)`: (destination, first column) of each box
    of operand o in a stage at `dst`, its first column `cols` (default: 16-bit operands in
    their wgmma layout, _boxes)."""
    first, stop_name, step = loop
    consumers = gen.plan.grid.threads
    copies = copies or _boxes
    nbytes = sum(o.size * o.tile.elem_bytes for o in ops)
    gen.out.line("// the producer warpgroup: one thread issues the copies, then the warpgroup returns")
    gen.out.open(f"if (th_id >= {consumers})")
    if _shares_registers(consumers):
        gen.out.line(f'asm volatile("setmaxnreg.dec.sync.aligned.u32 {PRODUCER_REGS};");')
    gen.out.open(f"if (th_id == {consumers})")
    var = gen.fresh("kp")
    gen.out.open(f"for (int {var} = {first}, j_ = 0; {var} < {stop_name}; {var} += {step}, ++j_)")
    gen.scope.scalars[s.var] = (var, "i32")
    gen.out.line(f"const int s_ = j_ % {stages};")
    gen.out.line(f"if (j_ >= {stages}) mbar_wait({bars} + 8 * ({stages} + s_), ((j_ / {stages}) + 1) & 1);")
    gen.out.line(f"mbar_expect_bytes({bars} + 8 * s_, {nbytes});")
    for o in ops:
        col, *rest = _coordinates(gen, o.let.value)
        for at, c in copies(o, f"{o.base} + s_ * {o.size}", col):
            where = ", ".join([c, *rest, f"{bars} + 8 * s_"])
            gen.out.line(f"tma_load_{o.spec.rank}d({at}, &{o.spec.param}, {where});")
    gen.out.close()
    gen.out.close()
    gen.out.line("return;")
    gen.out.close()


def _boxes(o: Operand, dst: str, cols: str) -> list[tuple[str, str]]:
    t = o.tile
    if t.mn_major:  # one box per 64-wide block of x
        return [(f"{dst} + {j * t.x_block}", f"{cols} + {j * BOX_COLS}") for j in range(t.x // BOX_COLS)]
    if t.blocked:  # one box per 128-byte-wide block of k
        w = t.row_elems
        return [(f"{dst} + {j * t.x * w}", f"{cols} + {j * w}") for j in range(t.k // w)]
    return [(dst, cols)]


def _shares_registers(consumers: int) -> bool:
    """Whether the CTA starts with fewer registers per thread than a consumer wants (two
    consumer warpgroups: 65536 / 384 -> 168), so that the producer must hand its own over."""
    return 65536 // (consumers + PRODUCER_THREADS) // 8 * 8 < CONSUMER_REGS


def before_split(gen) -> bool:
    """Whether code emitted now runs before a producer warpgroup splits off (the TMA ring of a
    loop of two dots: attention's Q is staged first), so that the producer's threads must stay
    out of what the consumers' thread count lays out."""
    return gen.plan.mainloop.producer and not gen.loop.tma_split and len(gen.plan.tc_dots) > 1


def ring_lets(gen, lets: list[ir.Let]) -> None:
    """One consumer iteration: wait until this stage is full, point the lets at it; at the end of
    the body (after the dot's wait for group i - 1) release group i - 1's stage."""
    entries = [gen.loop.pipelined[s.name] for s in lets]
    _, _, stage = consume(gen, lets)
    for s, (_, o, *_) in zip(lets, entries, strict=True):
        point_at_stage(gen, s.name, o.tile, o.base, o.size, stage)


def consume(gen, lets: list[ir.Let], after_release=None) -> tuple[int, str, str]:
    """The consumer's side of one iteration: wait for its stage and, at the end of the body,
    release group i - 1's (then `after_release()`): (stages, the iteration's C name, its stage's)."""
    gen.out.span = lets[0].span
    entry = gen.loop.pipelined[lets[0].name]
    stages, bars, first = entry[2]
    var_c, step = entry[4], entry[5]
    it = gen.fresh("it")
    gen.out.line(f"const int {it} = ({var_c} - {first}) / ({step});")
    gen.loop.ring_iteration = it
    gen.out.line(f"mbar_wait({bars} + 8 * ({it} % {stages}), ({it} / {stages}) & 1);")

    gen.loop.mma_drained = False

    def release() -> None:
        if gen.loop.mma_drained:  # the body's MMAs all waited for (fp8_promote): this stage is free now
            gen.out.line(f"if (th_lane == 0) mbar_arrive({bars} + 8 * ({stages} + {it} % {stages}));")
        else:
            stage = f"(({it} - 1) % {stages})"
            gen.out.line(f"if ({it} > 0 && th_lane == 0) mbar_arrive({bars} + 8 * ({stages} + {stage}));")
        if after_release:
            after_release()

    gen.loop.tail.append(release)
    return stages, it, f"{it} % {stages}"
