"""The TMA ring's epilogue through shared memory (Schedule.tma_store, mainloops/tma_ws/policy.py): a 2-D
tile stored from the tensor-core accumulator layout is computed on registers (bias, activation,
scale, conversion: the store's whole element-wise expression), written into shared memory, and
leaves by bulk tensor stores (`cp.async.bulk.tensor ... global.shared::cta`), one per 128-byte-wide
box, issued by one thread.

Why: in the accumulator layout a warp's direct store of a 16-bit tile writes 8 rows x 16 bytes,
half a 32-byte sector per row per instruction; through shared memory the copy engine writes whole
rows of the tile, and the consumers' stores end as soon as shared memory holds the tile.

Where in shared memory: the TMA ring's own words (mainloops/tma_ws/ring.py / mainloops/tma_ws/tf32.py record
them in `gen.smem.spent_ring`). Once the loop has ended every stage has been consumed and the producer
warpgroup has returned, so after one consumer barrier (the other warpgroup's last wgmma may still read its
stage) the ring is free: the epilogue costs no shared memory of its own, and the ring keeps every stage it
had. Each box is [rows, 128 bytes] in the 128-byte swizzle the tensor map names (mainloops/tma_ws/maps.py):
the 16-byte chunk j of row r lies at chunk j ^ (r % 8), so the 8 rows x 4 threads of a warp's pair writes land
on 32 different banks.

Order: each consumer thread writes its pairs, then `fence.proxy.async.shared::cta` (its writes,
seen by the copy engine's async proxy), a consumer barrier, then one thread issues the boxes,
commits them and waits until they have been read out of shared memory (a later TMA-stored tile
reuses the words after its own barrier, which that thread reaches only after the wait; and the
CTA's shared memory must outlive the reads). Elements outside the tensor are not written (the
copy engine clips the boxes at the tensor's edges), as the masked direct store leaves them.

Takes a plain `=` at the kernel's top level after the TMA ring's loop, of a tile in the
accumulator layout (stores.pair_store_ok's layout) to a row-major f32, bf16 or f16 tensor the
kernel does not read, sliced by ranges (or `:`) along its last two axes and single positions
along any before them (at most one: a 3-D map), with a 16-byte row pitch, a width that is whole
128-byte boxes and at most 256 rows. A schedule asking for it where no store takes it is pruned
(it would time the plain schedule's code again).
"""

from __future__ import annotations

from compiler.cuda.layout import MmaDist
from compiler.cuda.mainloops.tma_ws.maps import MapSpec
from compiler.cuda.stores.values import pair_values, pair_write, pure
from compiler.cuda.values import Ctx
from compiler.frontend import ir, walk

BOX_BYTES = 128  # one row of a box: the 128-byte swizzle's width
MAX_BOX_ROWS = 256
_MAP_DTYPE = {"f32": "f32", "bf16": "u16", "f16": "u16"}
_BYTES = {"f32": 4, "bf16": 2, "f16": 2}

PRELUDE = r"""
__device__ __forceinline__ void tma_store_2d(const TmaMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
               :: "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(src)) : "memory");
}
__device__ __forceinline__ void tma_store_3d(const TmaMap* map, const void* src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];"
               :: "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(src)) : "memory");
}
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
""".strip("\n")


def asked(gen) -> bool:
    return bool(getattr(gen.plan.mainloop, "tma_store", False))


def _single_dot_ring(gen) -> bool:
    """A ring of one dot (matmul): a loop of two dots' turns and rotation leave other barriers
    and groups pending after the loop, which this epilogue does not order."""
    return len(gen.plan.tc_dots) == 1 and not gen.plan.mainloop.pingpong


def store_ok(gen, s: ir.Store, param: ir.TensorParam, ctx: Ctx) -> bool:
    """Whether store `s` (of a tile in context `ctx`) goes out through shared memory."""
    if not asked(gen) or not _single_dot_ring(gen) or s.op != "=" or ctx.kind != "2d":
        return False
    if param.dtype not in _BYTES:
        return False
    if not gen.loop.tma_split or gen.loop.barriers or gen.out.depth != 1 or gen.smem.spent_ring is None:
        return False  # at the top level, after the TMA ring's loop
    dr, dc = gen.dists(ctx.kind, ctx.shape)
    if not (isinstance(dc, MmaDist) and dc.lanes == 4) or gen.owner(ctx.kind, ctx.shape) != "true":
        return False
    if s.tensor in walk.read_tensors(gen.plan.kernel):  # the copy engine's writes, unordered with reads
        return False
    *outer, rows_item, cols_item = s.index
    if not all(isinstance(i, ir.SliceIndex) for i in outer) or len(outer) > 1:
        return False
    if not all(isinstance(i, ir.SliceRange | ir.SliceAll) for i in (rows_item, cols_item)):
        return False
    dims = gen.dims_of(param)
    rows, cols = ctx.shape
    eb = _BYTES[param.dtype]
    if dims[-1] * eb % 16 or cols * eb % BOX_BYTES or rows > MAX_BOX_ROWS or rows % 8:
        return False
    first, words = gen.smem.spent_ring
    if rows * cols * eb > words * 4:
        return False
    return pure(gen, s.value, ctx.shape)


def store(gen, s: ir.Store, param: ir.TensorParam, ctx: Ctx) -> None:
    rows, cols = ctx.shape
    eb = _BYTES[param.dtype]
    per_box = BOX_BYTES // eb  # elements of one box row
    box_bytes = rows * BOX_BYTES
    first, _ = gen.smem.spent_ring
    spec = _map_spec(gen, s, param, rows, per_box)
    tile = gen.fresh("epi")
    gen.out.line(f"// the tile through shared memory (the spent ring), then {cols // per_box} bulk stores")
    gen.out.line(f"unsigned char* const {tile} = reinterpret_cast<unsigned char*>(smem + {first});")
    gen.sync()  # the other consumer warpgroup's last dots may still read the ring
    dr, dc = gen.dists(ctx.kind, ctx.shape)
    # columns outside, rows inside: what depends on the column alone (a bias) is read once per
    # column pair and dies there, rather than held for every column across the rows
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _j = 0; _j < {dc.count}; _j += 2)")
    gen.out.line(f"const int _c = {dc.position('_j')};")
    gen.out.line("#pragma unroll")
    gen.out.open(f"for (int _i = 0; _i < {dr.count}; ++_i)")
    gen.out.line(f"const int _r = {dr.position('_i')};")
    lo, hi = pair_values(gen, s.value, ctx)
    # box _c / per_box, row _r, 16-byte chunk swizzled by the row's low 3 bits
    at = (f"{tile} + (_c / {per_box}) * {box_bytes} + _r * {BOX_BYTES}"
          f" + (((((_c % {per_box}) * {eb}) >> 4) ^ (_r & 7)) << 4) + (((_c % {per_box}) * {eb}) & 15)")
    gen.out.line(pair_write(param.dtype, at, lo, hi))
    gen.out.close()
    gen.out.close()
    gen.out.line("fence_async_smem();  // the writes above, seen by the copy engine")
    gen.sync()
    gen.out.open("if (th_id == 0)")
    col, row, *outer = _coordinates(gen, s)
    for b in range(cols // per_box):
        where = ", ".join([f"{col} + {b * per_box}", row, *outer])
        gen.out.line(f"tma_store_{spec.rank}d(&{spec.param}, {tile} + {b * box_bytes}, {where});")
    gen.out.line("tma_store_wait_read();")
    gen.out.close()
    gen.used.tma_store = True


def _map_spec(gen, s: ir.Store, param: ir.TensorParam, rows: int, per_box: int) -> MapSpec:
    *outer, trows, tcols = gen.dims_of(param)
    spec = MapSpec(f"tms_{s.tensor}_{rows}", s.tensor, rows, per_box, trows, tcols, _MAP_DTYPE[param.dtype],
                   tuple(outer))
    if spec not in gen.used.tensor_maps:
        gen.used.tensor_maps.append(spec)
    return spec


def _coordinates(gen, s: ir.Store) -> list[str]:
    """The box's start in the map's coordinates, innermost axis first."""
    def at(item) -> str:
        if isinstance(item, ir.SliceAll):
            return "0"
        return gen.scalar(item.index if isinstance(item, ir.SliceIndex) else item.start)

    return [at(i) for i in reversed(s.index)]


def check_used(gen) -> None:
    """A schedule that asked for the TMA store where no store took it is pruned."""
    if asked(gen) and not gen.used.tma_store:
        raise gen.pruned(gen.plan.kernel.span, "no tile store takes the TMA store")
