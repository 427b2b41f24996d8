"""TF32 warpgroup MMA fed by bulk tensor copies (Schedule.tma with a TF32 dot): the producer
warpgroup of tma.py copies raw f32 tiles several k tiles ahead, and the consumers round them (and
turn B) in shared memory before their wgmma reads them.

wgmma reads TF32 only K-major and would take a value's top 19 bits as they are, where the
language rounds to nearest, ties away (cvt.rna, the interpreter's TF32 model). So:
- A k-contiguous operand (matmul's A[m, k]) arrives in one box of 32 f32 x rows with the 128-byte
  swizzle: exactly wgmma.CoreTile's K-major k = 32 layout (row r's 16-byte chunk c at c ^ (r % 8)).
  The consumers round it in place, 16 bytes a thread, and the wgmma reads that stage.
- An x-contiguous operand (matmul's B[k, n]) arrives as x / 32 boxes of 32 x by k rows, each the
  128-byte-swizzled [k][32] block (`raw_offset`). The consumers turn it in 4x4 register blocks
  (wgmma_tf32's transposing plan: the store instructions are free of bank conflicts, and each
  load instruction reads 8 distinct 16-byte bank groups per 8 threads) into one of two K-major
  buffers, rounding on the way.
Per k tile at 128 x 256 x 32 the pass reads 48 KB and writes 48 KB of shared memory beside the
copies' 48 KB and the two warpgroups' wgmma reads (80 KB): 224 KB, against about 131 KB that
128 bytes a cycle move in the ~1025 cycles of tensor work at the TF32 peak. The pass is what
bounds this path (near 58 % of the peak); see patches/tf32-unverified/README.md.

Consumer iteration i: wait full[i % S]; the pass (A stage i % S in place, B into K-major buffer
i % 2); proxy fence and the consumers' barrier; wgmma group i; wait for group i - 1; release its
stage; the consumers' barrier again, after which no group reads K-major buffer (i + 1) % 2
(group i - 1 was its last reader). The copies run up to S - 2 tiles ahead of the pass.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from compiler.cuda import tma, wgmma_tf32
from compiler.cuda.layout import SMEM_LIMIT
from compiler.cuda.tensor_maps import MapSpec
from compiler.cuda.wgmma import point_at_stage
from compiler.frontend import ir

BOX = 32  # f32 values in one 128-byte swizzled row
BUFFERS = 2  # K-major buffers of a turned operand
MARGIN = 4 * 1024  # bytes of shared memory left to the rest of the kernel
WHAT = "TF32 bulk tensor copies take 2-D slices of 2-D f32 tensors, 16-byte rows, k = 32, x in 32s"


@dataclass(frozen=True)
class Entry:
    op: tma.Operand  # the raw ring: `size` f32 values a stage
    plan: wgmma_tf32.Plan  # direct: rounded in place; else turned into `kmajor`
    kmajor: str | None  # C name of the first K-major buffer of a turned operand


def turn_origin(e: str = "e_") -> tuple[str, str]:
    """(x, k) of the 4x4 block that unit e turns. Unit j = e % 8 of each 8 takes k = 4 j, as in
    wgmma_tf32.unit_origin, so that the 8 stores of a K-major row hit 8 distinct 16-byte bank
    groups; but the 8 take 8 different 4-row blocks of x, (g + j) % 8 of their 32-row group
    (g = e / 8), since the raw boxes swizzle by k: with one x for all 8, their loads (rows
    4 j + i, x % 32 / 4 ^ k % 8) would meet in 2 bank groups."""
    g, j = f"(({e}) / 8)", f"(({e}) % 8)"
    return f"(({g} / 8) * 8 + ({g} % 8 + {j}) % 8) * 4", f"{j} * 4"


def raw_offset(k: str, x: str, k_rows: int) -> str:
    """Offset of element (k, x) in a turned operand's raw stage: 32-wide boxes of k_rows rows."""
    chunk = f"(((({x}) % {BOX}) / 4) ^ (({k}) % 8))"
    return f"((({x}) / {BOX}) * {BOX * k_rows} + ({k}) * {BOX} + {chunk} * 4 + ({x}) % 4)"


def _copyable(gen, load: ir.Load) -> bool:
    param = gen.tensor(load.tensor, load.span)
    dims = gen.dims_of(param)
    if len(dims) != 2 or dims[-1] % 4 or load.tensor in gen.stored_tensors():
        return False
    return all(isinstance(i, ir.SliceRange) for i in load.index)


def _plans(gen, s: ir.For, entries) -> list[wgmma_tf32.Plan]:
    """How each operand is rounded (in place, or turned), or pruned: not a single dot's loop at
    the kernel's top level, or an operand without 16-byte rows, k = 32 or (turned) x in 32s."""
    if len(gen.leaf.plan.tc_dots) != 1 or gen.loop_barriers or gen.out.depth != 1:
        raise gen.pruned(s.span, "bulk tensor copies take a single dot's loop at the kernel's top level")
    plans = [wgmma_tf32.plan(gen, tile, st.value) for st, _, _, tile in entries]
    for (st, _, _, tile), p in zip(entries, plans, strict=True):
        if p is None or not _copyable(gen, st.value) or (not p.direct and tile.x % BOX):
            raise gen.pruned(s.span, WHAT)
    return plans


def ring_prologue(gen, s: ir.For, entries, start: str, stop_name: str, step: str) -> dict:
    """The raw ring, the K-major buffers, the mbarriers and the producer (tma.split);
    `entries`: (let, role, transposed, tile) with tile the K-major CoreTile, ptr unset."""
    plans = _plans(gen, s, entries)
    raw = sum(tile.elements for *_, tile in entries)
    turned = sum(tile.elements for (*_, tile), p in zip(entries, plans, strict=True) if not p.direct)
    room = (SMEM_LIMIT - MARGIN) // 4 - gen.perm_floats - BUFFERS * turned
    stages = min(gen.schedule.stages, room // raw)
    if stages < 3:
        raise gen.pruned(s.span, "TF32 bulk tensor copies need 3 raw stages in shared memory")
    out = []
    for (st, _, _, tile), p in zip(entries, plans, strict=True):
        base = gen.fresh("ring")
        ring = gen.alloc_perm(stages * tile.elements, 256)
        gen.out.line(f"float* const {base} = reinterpret_cast<float*>{ring};")
        kbase = None
        if not p.direct:
            kbase = gen.fresh("kmajor")
            buffers = gen.alloc_perm(BUFFERS * tile.elements, 256)
            gen.out.line(f"float* const {kbase} = reinterpret_cast<float*>{buffers};")
        rows, cols = gen.dims_of(gen.tensor(st.value.tensor, st.value.span))
        box_rows = tile.x if p.direct else tile.k
        spec = MapSpec(f"tm_{st.name}", st.value.tensor, box_rows, BOX, rows, cols, elem_bytes=4)
        out.append(Entry(tma.Operand(st, tile, spec, base, tile.elements), p, kbase))
    direct = {e.op.let.name: e.plan.direct for e in out}

    def copies(o: tma.Operand, dst: str, cols: str) -> list[tuple[str, str]]:
        if direct[o.let.name]:
            return [(dst, cols)]
        return [(f"{dst} + {j * BOX * o.tile.k}", f"{cols} + {j * BOX}") for j in range(o.tile.x // BOX)]

    ring = tma.split(gen, s, [e.op for e in out], stages, (start, stop_name, step), copies)
    return {e.op.let.name: ("tmatf32", e, ring) for e in out}


def ring_lets(gen, lets: list[ir.Let]) -> None:
    """One consumer iteration (the module doc): wait, round and turn, fence, barrier; the release
    and the second barrier go to the end of the body, after the dot's wait for group i - 1."""
    entries = [gen.pipelined[s.name][1] for s in lets]
    _, it, stage = tma.consume(gen, lets, after_release=gen.sync)
    for s, e in zip(lets, entries, strict=True):
        src = gen.fresh("raw")
        gen.out.line(f"float* const {src} = {e.op.base} + ({stage}) * {e.op.size};")
        if e.plan.direct:
            _round_in_place(gen, src, e.op.size)
            point_at_stage(gen, s.name, e.op.tile, e.op.base, e.op.size, stage)
            continue
        regs = wgmma_tf32.declare(gen, e.plan)
        _load_raw(gen, e.plan, src, regs, e.op.tile.k)
        dst = f"({e.kmajor} + ({it} % {BUFFERS}) * {e.op.size})"
        wgmma_tf32.store(gen, e.plan, replace(e.op.tile, ptr=dst), regs, turn_origin())
        point_at_stage(gen, s.name, e.op.tile, e.kmajor, e.op.size, f"{it} % {BUFFERS}")
    gen.out.line("fence_async_smem();")
    gen.sync()


def _round_in_place(gen, src: str, size: int) -> None:
    """Every f32 of a stage rounded to TF32 where it lies (the layout does not matter)."""
    t = gen.grid.threads
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int e_ = th_id; e_ < {size // 4}; e_ += {t})")
    gen.out.line(f"const float4 v_ = reinterpret_cast<const float4*>({src})[e_];")
    rounded = ", ".join(f"tf32_of(v_.{c})" for c in "xyzw")
    gen.out.line(f"reinterpret_cast<uint4*>({src})[e_] = make_uint4({rounded});")
    gen.out.close()


def _load_raw(gen, p: wgmma_tf32.Plan, src: str, regs: str, k_rows: int) -> None:
    """This thread's 4x4 blocks from a turned operand's raw stage: rows k_..k_+3, x_..x_+3."""
    wgmma_tf32.unit(gen, p, turn_origin())
    for i in range(4):
        at = raw_offset(f"k_ + {i}", "x_", k_rows)
        gen.out.line(f"{regs}[it_ * 4 + {i}] = *reinterpret_cast<const float4*>({src} + {at});")
    gen.out.close()
    gen.out.close()
