"""fp8 warpgroup MMA into an f32 accumulator, promoted once per k tile (docs/language.md §8.1).

Hopper's fp8 wgmma does not accumulate in IEEE f32. Each k32 step adds its 32 exact products
and the accumulator it continues with every one of those 33 terms truncated (toward zero) to
13 bits below the leading bit of the largest, and truncates the sum to 13 mantissa bits: an
FP22-like sum. (This model reproduces the H100's errors of a one-chain k loop bit for bit:
tests/cuda/fp8_accumulation.py, benchmarks/results/h100-2026-12-07/gpu-tests.log.) A k loop run
as one wgmma chain therefore carries that truncation relative to the whole running sum, 2-6x
outside the f32-sum tolerance at K = 512..1024.

So an fp8 dot that adds into an accumulator (`acc += dot(..)`) never continues acc's chain:
each k tile's wgmma chain starts from nothing (scale-d 0) in a temporary, and once it is done
(wait_group 0) the temporary is added into acc in f32. The tensor core's truncation then acts
within one k tile only, on partial sums of at most GROUP_PRODUCTS products started from zero,
and the tiles are summed in f32. Why one k tile (4 k32 steps) and not fewer: no promotion
interval makes the tensor core's sum an f32 sum (a single k32 step already truncates its own
32 products to 13 bits), so the interval is chosen for its error and its price together. At one
k tile the error per element is about a seventh of the one-chain's on normal data (the model, at
K = 1024), the promotion is one f32 add per accumulator element per 128 products (what
cuBLASLt's fp8 GEMM, torch._scaled_mm without fast accumulation, does as well), and the chain
keeps the whole k tile in flight; halving it doubles the adds and the waits for about half the
error. The error a kernel gets is what tests/cuda/fp8_accumulation.py computes and
tests/cuda/test_fp8_gpu.py allows.

Registers: the temporary covers at most PIECE_N columns (64 x 128 per warpgroup: 64 f32 per
thread); a wider tile (N = 256) runs its k tile as pieces of 128 columns, one after the other,
so that acc (128 per thread) and the temporary (64) fit a thread's 255 registers with no spill
at every fp8 point of the tuner's space (tests/cuda/test_fp8_cuda.py runs ptxas on them). A CTA
of one warpgroup issues twice the ring's copies per thread and needs more address registers:
its pieces are 64 columns wide (at 64 x 256 with 128-column pieces ptxas spilled 44 bytes).
The wait for each piece is where the two consumer warpgroups of a 128-row tile interleave: one
adds while the other's chain runs on the tensor cores. With the schedule's fp8_overlap the
pieces are OVERLAP_N columns wide and alternate between two temporaries (the same registers as
one 128-wide piece): piece j + 1's chain is issued before piece j is waited for (wait_group 1)
and added, so one warpgroup alone keeps the tensor cores fed through its adds; narrower MMAs
read a's k slice from shared memory once per piece. Which costs less is the tuner's to
measure (both are in its space and benchmarks/fp8_bench.py's).

A k tile of 256 (TILE_K = 256, the TMA ring only: fp8.TMA_K) is two groups, each its own chain of
GROUP_STEPS from zero over one 128-byte block of the operands' rows (CoreTile.blocked), so the
promotion interval, the sums and their order are those of TILE_K = 128. What changes is the
waiting: the groups' pieces form one stream through two temporaries (as fp8_overlap's pieces
do), so a warpgroup drains its MMA queue once per 256 of K instead of once per 128 (a 128-wide
tile: 2 x 64 temporaries beside acc's 64 registers, STREAM_REGS; a 256-wide one: 64-wide pieces).
Why not carry the stream across k tiles instead (the last piece of tile i added in iteration
i + 1, behind tile i + 1's first): ptxas serializes every wgmma of such a loop (C7514, "non wgmma
instructions reading accumulator registers ... between start and end of the pipeline stage"):
it does not follow a wait_group across the loop's back edge. Nor 128 + 64 + 64-wide pieces at
N = 256 (one 128-wide temporary and one 64-wide beside acc's 128): C7511, too few registers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

STEP_K = 32  # fp8 products per wgmma k step (32 bytes of each operand row)
GROUP_STEPS = 4  # k32 steps per tensor-core sum: one k tile (fp8.WGMMA_K = 128 = 4 x 32)
GROUP_PRODUCTS = STEP_K * GROUP_STEPS
PIECE_N = 128  # columns of the temporary accumulator
OVERLAP_N = 64  # columns of each of the two temporaries with fp8_overlap
STREAM_REGS = 192  # per thread, at most: acc's and the two temporaries of a k tile of two groups


@dataclass(frozen=True)
class _Regs:
    """What wgmma.issue reads of an accumulator: its C array name."""

    cname: str


def pieces(n: int, warpgroups: int) -> list[tuple[int, int]]:
    """(first column, width) of each piece of an N-wide warpgroup tile in a CTA of `warpgroups`
    consumer warpgroups (one: half the pieces' width, see the module doc)."""
    width = min(n, PIECE_N if warpgroups > 1 else PIECE_N // 2)
    assert n % width == 0, n
    return [(j * width, width) for j in range(n // width)]


def _issue_piece(gen, issue, temp: str, sa, sb, first: int, w: int, kk: int, dtype: str) -> None:
    """Piece [first, first + w) of the k tile's chain into `temp`, from zero, committed;
    `issue`: wgmma.issue (passed in: mainloops/wgmma/mma.py calls this module)."""
    b = replace(sb, ptr=f"({sb.ptr} + {first * sb.row_elems})", x=w)
    gen.out.line(f"// columns {first} .. {first + w - 1}: m64n{w}k32, {kk // STEP_K} k steps")
    gen.out.line("wg_fence();")
    gen.out.block(issue(_Regs(temp), sa, b, w, kk, dtype, True))
    gen.out.line("wg_commit();")


def _add_piece(gen, acc, temp: str, first: int, w: int) -> None:
    gen.out.line("#pragma unroll")
    gen.out.open("for (int h_ = 0; h_ < 2; ++h_)")
    gen.out.line("#pragma unroll")
    add = f"{acc.cname}[h_][{first // 4} + q_] += {temp}[h_][q_];"
    gen.out.line(f"for (int q_ = 0; q_ < {w // 4}; ++q_) {add}")
    gen.out.close()


def emit(gen, acc, sa, sb, n: int, kk: int, dtype: str, issue) -> None:
    """acc[M, N] += a b for an fp8 dot, one k tile: per piece, the tile's wgmma chain into a
    fresh temporary, wait for it, add it into acc (with fp8_overlap, or a k tile of two groups:
    the next piece in flight meanwhile). `sa`, `sb`: K-major CoreTiles (fp8.py keeps fp8 only for
    those); `issue`: wgmma.issue."""
    assert kk % GROUP_PRODUCTS == 0 or kk < GROUP_PRODUCTS, kk
    gen.out.line("// fp8: each k tile summed by the tensor cores from zero, then added in f32 (fp8_promote)")
    # every form below ends with wait_group 0: in a loop of this one dot, the iteration's stage is free
    gen.loop.mma_drained = len(gen.plan.tc_dots) == 1
    policy = gen.plan.mainloop
    if kk > GROUP_PRODUCTS:
        if policy.fp8_overlap:  # the stream below is already overlapped: the same code twice
            raise gen.pruned(gen.out.span, f"a k tile of {kk} always overlaps its promotion (fp8_overlap)")
        width = PIECE_N if n // 2 + PIECE_N <= STREAM_REGS else OVERLAP_N
        width = min(width, n)
        units = [(_group(sa, g), _group(sb, g), first)
                 for g in range(kk // GROUP_PRODUCTS) for first in range(0, n, width)]
        return _emit_stream(gen, issue, acc, units, width, GROUP_PRODUCTS, dtype)
    if policy.fp8_overlap and n > OVERLAP_N:
        if gen.plan.grid.threads == 128 and not policy.producer and n > PIECE_N:
            # one warpgroup issuing its own copies: ptxas spilled 68 bytes at 64 x 256
            raise gen.pruned(gen.out.span, "fp8_overlap at N = 256 takes two warpgroups or a TMA ring")
        units = [(sa, sb, first) for first in range(0, n, OVERLAP_N)]
        return _emit_stream(gen, issue, acc, units, OVERLAP_N, kk, dtype)
    temp = gen.fresh("promote")
    parts = pieces(n, gen.plan.grid.threads // 128)
    gen.out.line(f"float {temp}[2][{parts[0][1] // 4}];")
    for first, w in parts:
        _issue_piece(gen, issue, temp, sa, sb, first, w, kk, dtype)
        gen.out.line("wg_wait_all();")
        _add_piece(gen, acc, temp, first, w)


def _group(t, g: int):
    """Group g of a k tile of several (a blocked CoreTile): its 128-byte-wide block, a tile of
    GROUP_PRODUCTS k as the one-group k tile lies."""
    assert t.blocked and t.row_elems == GROUP_PRODUCTS, t
    return replace(t, ptr=f"({t.ptr} + {g * t.x * t.row_elems})", k=t.row_elems, blocked=False)


def _emit_stream(gen, issue, acc, units, width: int, kk: int, dtype: str) -> None:
    """`units` ((a, b, first column) each, a chain of kk from zero) into two temporaries in
    turn: unit u + 1's chain is issued before unit u is waited for (wait_group 1) and added."""
    temps = [gen.fresh("promote"), gen.fresh("promote")]
    for t in temps:
        gen.out.line(f"float {t}[2][{width // 4}];")
    for u, (a, b, first) in enumerate(units):
        _issue_piece(gen, issue, temps[u % 2], a, b, first, width, kk, dtype)
        if u:
            gen.out.line("wg_wait_one();  // piece u - 1 done, piece u in flight")
            _add_piece(gen, acc, temps[(u - 1) % 2], units[u - 1][2], width)
    gen.out.line("wg_wait_all();")
    _add_piece(gen, acc, temps[(len(units) - 1) % 2], units[-1][2], width)
