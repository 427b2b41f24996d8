"""TF32 operands of warpgroup MMA: K-major in shared memory, rounded to TF32 on the way in.

wgmma reads TF32 operands only K-major (it has no transpose bit for them), and it would take a
value's top 19 bits as they are, where the language rounds to nearest even (tf32.py). So the operands
do not go through cp.async: each thread loads 16-byte vectors from global memory (`__ldg`, zero past
the tensor's edge), rounds them, and stores 16-byte chunks into the 128-byte-swizzled K-major
layout (wgmma.CoreTile with k = 32: one 128-byte row per x, row x's chunk c at c ^ (x % 8)).
- k-contiguous source (matmul's A[m, k]): a float4 along k is one chunk; 8 consecutive threads
  take the 8 chunks of one row: one 128-byte global segment and one store wavefront per 8 threads.
- x-contiguous source (matmul's B[k, n]): each thread takes a 4 (k) x 4 (x) block, 4 float4 loads
  along x (rows k0..k0+3), turned in registers into 4 chunks (rows x0..x0+3, k0..k0+3). Eight
  consecutive threads share x0 and take the 8 k0 of a row, so each store instruction writes, per 8
  threads, the 8 chunks of one row at c ^ (x % 8): 8 distinct 16-byte bank groups, no conflict; a
  warp's load instruction reads 8 rows x 64 contiguous bytes.
Every byte of a stage is written to shared memory once, as a cp.async copy would write it. Copying
first and then rounding (and, for B, transposing) in shared memory would read and write every byte
once more: at 128 x 256 x 32, 48 KB written and 80 KB read by the two warpgroups' wgmma per k tile
against 96 KB more, over what the tensor cores' time per tile leaves at 128 bytes per cycle.

The ring (ring_prologue / ring_lets, chosen by loops.py): 3 stages. Tile i + 1 waits in registers
during iteration i; iteration i passes one barrier (its stage stored and fenced for the async proxy
by every thread), issues its wgmma group, stores tile i + 1 into stage (i + 1) % 3 (last read by
group i - 2, which every warpgroup waited for before the barrier), loads tile i + 2, and only then
waits for group i - 1 (wgmma.emit_wgmma with `gen.loop.register_ring`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.cuda import analysis
from compiler.cuda.mainloops.wgmma.mma import CoreTile, point_at_stage
from compiler.frontend import ir

STAGES = 3


@dataclass(frozen=True)
class Plan:
    direct: bool  # the source is k-contiguous (one float4 = one chunk)
    units: int  # chunks (direct) or 4x4 blocks (transposing) of one tile
    iters: int  # units per thread, rounded up

    @property
    def regs(self) -> int:  # float4 registers per thread
        return self.iters if self.direct else 4 * self.iters


def plan(gen, tile: CoreTile, load: ir.Load) -> Plan | None:
    """How `load` reaches `tile` through registers, or None (no 16-byte loads: the tensor's last
    dim or the slice start along it not a multiple of 4, a nonzero fill, or a tile that is not
    k = 32, whose rows would not be 128 bytes)."""
    param = gen.tensor(load.tensor, load.span)
    if tile.mn_major or not tile.swizzled or param.dtype != "f32":
        return None
    if load.ty.rank != 2 or isinstance(load.index[-1], ir.SliceIndex) or gen.dims_of(param)[-1] % 4:
        return None
    if load.fill is not None and not (isinstance(load.fill, ir.Const) and float(load.fill.value) == 0.0):
        return None
    last = load.index[-1]
    if isinstance(last, ir.SliceRange) and analysis.int_range(last.start, gen.scope.ranges).divisor % 4:
        return None
    rows, cols = (gen.size(s) for s in load.ty.shape)
    direct = cols == tile.k and rows == tile.x
    if not direct and (rows, cols) != (tile.k, tile.x):
        return None
    units = tile.x * tile.k // (4 if direct else 16)
    return Plan(direct, units, -(-units // gen.plan.grid.threads))


def declare(gen, p: Plan) -> str:
    regs = gen.fresh("tr")
    gen.out.line(f"float4 {regs}[{p.regs}];")
    return regs


def unit_origin(direct: bool, e: str = "e_") -> tuple[str, str]:
    """(x, k) of the first element of unit e: a chunk of row e / 8 (direct), or the 4x4 block at
    rows 4 (e / 8) of the tile, k 4 (e % 8) (transposing); 8 consecutive units share a row."""
    x = f"({e}) / 8" if direct else f"(({e}) / 8) * 4"
    return x, f"(({e}) % 8) * 4"


def _unit(gen, p: Plan) -> None:
    """Open the loop over this thread's units: x_, k_ (the unit's first row and k column)."""
    t = gen.plan.grid.threads
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int it_ = 0; it_ < {p.iters}; ++it_)")
    gen.out.line(f"const int e_ = it_ * {t} + th_id;")
    if p.units % t:
        gen.out.open(f"if (e_ < {p.units})")
    else:
        gen.out.open("")
    x, k = unit_origin(p.direct)
    gen.out.line(f"const int x_ = {x}, k_ = {k};")


def load(gen, p: Plan, load_: ir.Load, regs: str) -> None:
    """Global -> this thread's float4 registers (zero where outside the tensor)."""
    param = gen.tensor(load_.tensor, load_.span)
    _unit(gen, p)
    vectors = [("x_", "k_", "it_")] if p.direct else [(f"k_ + {i}", "x_", f"it_ * 4 + {i}") for i in range(4)]
    for row, col, slot in vectors:  # (row, col) as the source lies
        ptr, pred = gen.element_address(param, load_.index, (row, col))
        ld = f"{regs}[{slot}] = __ldg(reinterpret_cast<const float4*>(&{ptr}));"
        if pred == "true":
            gen.out.line(ld)
        else:
            gen.out.line(f"{regs}[{slot}] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);")
            gen.out.line(f"if ({pred}) {ld}")
    gen.out.close()
    gen.out.close()


def store(gen, p: Plan, tile: CoreTile, regs: str) -> None:
    """This thread's registers, rounded to TF32, into `tile` (16-byte stores)."""
    _unit(gen, p)

    def put(x: str, parts: list[str]) -> None:
        at = tile.offset(x, "k_")
        vals = ", ".join(f"tf32_of({v})" for v in parts)
        gen.out.line(f"*reinterpret_cast<uint4*>({tile.ptr} + {at}) = make_uint4({vals});")

    if p.direct:
        put("x_", [f"{regs}[it_].{c}" for c in "xyzw"])
    else:
        for q, c in enumerate("xyzw"):
            put(f"x_ + {q}", [f"{regs}[it_ * 4 + {i}].{c}" for i in range(4)])
    gen.out.close()
    gen.out.close()


def stage(gen, tile: CoreTile, load_: ir.Load) -> None:
    """A let or operand outside a ring: load, round and store now (the caller fences and syncs)."""
    p = plan(gen, tile, load_)
    if p is None:
        raise gen.pruned(load_.span, "TF32 warpgroup MMA needs 16-byte loads of k = 32 rows")
    regs = declare(gen, p)
    load(gen, p, load_, regs)
    store(gen, p, tile, regs)


@dataclass(frozen=True)
class RingEntry:
    let: ir.Let
    tile: CoreTile  # the operand's layout (ptr unset): each stage is this at another address
    plan: Plan
    base: str  # C name of the ring's first stage
    size: int  # elements per stage
    regs: str  # C name of the register tile
    first: str  # C name of the loop's first value


def ring_prologue(gen, s: ir.For, entries, start: str, stop_name: str, step: str) -> dict:
    """The register-staged ring of a loop's TF32 operands (`entries`: (let, role, transposed,
    tile) with tile's ptr unset): stage 0 stored, tile 1 loaded into registers; or {} when an
    operand has no 16-byte plan (the lets are then staged in the loop, as without a ring)."""
    plans = [plan(gen, tile, st.value) for st, _, _, tile in entries]
    if any(p is None for p in plans):
        return {}
    gen.loop.register_ring = True
    first = gen.fresh("first")
    gen.out.line(f"const int {first} = {start};")
    out = {}
    for (st, _, _, tile), p in zip(entries, plans, strict=True):
        base = gen.fresh("ring")
        ring = gen.smem.alloc_perm(STAGES * tile.elements, 256)
        gen.out.line(f"float* const {base} = reinterpret_cast<float*>{ring};")
        entry = RingEntry(st, tile, p, base, tile.elements, declare(gen, p), first)
        out[st.name] = ("regring", entry)
    for step_no in (0, 1):
        at = f"{first}_{step_no}"
        gen.out.line(f"const int {at} = {first} + {step_no} * ({step});")
        gen.scope.scalars[s.var] = (at, "i32")
        gen.out.open(f"if ({at} < {stop_name})")
        for _, e in out.values():
            load(gen, e.plan, e.let.value, e.regs)
            if step_no == 0:
                store(gen, e.plan, replace(e.tile, ptr=e.base), e.regs)
        gen.out.close()
    return out


def ring_lets(gen, lets: list[ir.Let]) -> None:
    """One iteration: fence and barrier (this stage's stores visible to the tensor cores), point the
    lets at this stage; the store of the next tile and the load of the one after go to the end of
    the body, after the dot's commit and before its wait (gen.loop.tail)."""
    gen.out.span = lets[0].span
    entries = [gen.loop.pipelined[s.name] for s in lets]
    e0 = entries[0][1]
    var_name, var_c, step, stop_name = entries[0][2:6]
    it = gen.fresh("it")
    gen.out.line(f"const int {it} = ({var_c} - {e0.first}) / ({step});")
    gen.loop.ring_iteration = it
    gen.out.line("fence_async_smem();")
    gen.sync()

    def refill() -> None:
        for ahead, what in ((1, "store"), (2, "load")):
            nxt = gen.fresh("ahead")
            gen.out.line(f"const int {nxt} = {var_c} + {ahead} * ({step});")
            gen.out.open(f"if ({nxt} < {stop_name})")
            gen.scope.scalars[var_name] = (nxt, "i32")
            for _, e, *_ in entries:
                if what == "load":
                    load(gen, e.plan, e.let.value, e.regs)
                    continue
                ptr = f"({e.base} + (({it} + 1) % {STAGES}) * {e.size})"
                store(gen, e.plan, replace(e.tile, ptr=ptr), e.regs)
            gen.scope.scalars[var_name] = (var_c, "i32")
            gen.out.close()

    gen.loop.tail.append(refill)
    for s, (_, e, *_) in zip(lets, entries, strict=True):
        point_at_stage(gen, s.name, e.tile, e.base, e.size, f"{it} % {STAGES}")
