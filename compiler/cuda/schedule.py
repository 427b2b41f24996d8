"""Code-generator choices that do not change a kernel's meaning, only its speed: the tuner
searches them beside the kernel's own @autotune values (tuning/autotune.py)."""

from __future__ import annotations

from dataclasses import dataclass

from common import options

# A max or min fold of at least CHAINED_FOLD elements per thread runs by default as this many
# interleaved chains (reductions.py): a single chain of 32 dependent fmaxf is the critical path of
# attention's softmax (the exponentials wait for the row maximum, and under ping-pong one warp per
# scheduler runs it alone). The chains cost registers and the combining tree instructions: on the
# H100, full attention at N = 4096 ran 7% faster with one chain, causal GQA 3% slower
# (benchmarks/results/h100-2026-12-07-s3/call1/attn), so the tuner tries both (Schedule.fold_chains).
FOLD_CHAINS = 4


@dataclass(frozen=True)
class Schedule:
    warps_m: int | None = None  # tensor-core warp layout: warps along the rows (None: the heuristic)
    stages: int = 3  # depth of the cp.async pipeline of tensor-core operands in loops
    order: str = "row"  # CTA order of a 2-D grid: "row" (launch order) or "grouped" (group-major)
    group: int = 8  # CTAs along x per group in the grouped order
    threads: int | None = None  # CTA size (None: the kernel's @launch, else 256)
    wgmma: bool = False  # Hopper warpgroup MMA for dots whose b is in shared memory (mainloops/wgmma/mma.py)
    # where a loop iteration issues the copies of a later stage: after the barrier at its top
    # (False) or at its end, once its dots are issued (True: the tensor cores get work sooner)
    late_copies: bool = False
    # warpgroup MMA fed by bulk tensor copies from a producer warpgroup through mbarriers
    # (mainloops/tma_ws/ring.py)
    tma: bool = False
    # warpgroup MMA in a loop of two or more dots (attention): the last dot (P V) is issued in the
    # next iteration right after the first (S = Q K^T), so the tensor cores run it while that
    # iteration's softmax runs (loops.Rotation); no effect on other kernels
    rotate: bool = False
    # a rotated loop's two warpgroups hand the ring's stages over by mbarriers instead of a
    # CTA-wide barrier and take turns issuing their dots, one's softmax under the other's dots
    # (mainloops/pingpong/handover.py); copies run stages - 3 ahead
    pingpong: bool = False
    # the TMA ring's epilogue (mainloops/tma_ws/store.py): a 2-D tile stored from the accumulator layout goes
    # through shared memory (the spent ring, 128-byte swizzled) and out by bulk tensor stores
    tma_store: bool = False
    # the TMA ring on a persistent grid of this many CTAs (0: one CTA per output tile): each CTA walks the
    # tiles in the CTA order, its producer warpgroup copying the next tile's operands while the consumers
    # store this one's (mainloops/tma_ws/persistent.py); no effect without `tma`
    persistent: int = 0
    # an fp8 dot's per-k-tile promotion (mainloops/wgmma/fp8_promote.py) in 64-column pieces alternating
    # between two temporaries, the next piece's MMA issued before the last one is added (no effect on others)
    fp8_overlap: bool = False
    # CUDA-core dots: two shared buffers per register-prefetched operand of a loop, one barrier
    # per iteration instead of two (mainloops/simt/policy.py); no effect on tensor-core dots
    double_buffer: bool = False
    # interleaved chains of a max/min fold of CHAINED_FOLD or more elements per thread (reductions.py);
    # 1: one chain. The result is the same bit for bit (max and min are exact in any order)
    fold_chains: int = FOLD_CHAINS

    def key(self) -> str:
        order = f"grouped{self.group}" if self.order == "grouped" else self.order
        mma = "-wgmma" if self.wgmma else ""
        late = "-late" if self.late_copies else ""
        rot = "-rot" if self.rotate else ""
        tma = "-tma" if self.tma else ""
        pp = "-pp" if self.pingpong else ""
        st = "-tmast" if self.tma_store else ""
        st += f"-ps{self.persistent}" if self.persistent else ""
        flags = f"{mma}{late}{rot}{tma}{pp}{st}" + ("-fp8ov" if self.fp8_overlap else "")
        flags += "-db" if self.double_buffer else ""
        flags += f"-fc{self.fold_chains}" if self.fold_chains != FOLD_CHAINS else ""
        return f"t{self.threads or 0}-wm{self.warps_m or 0}-s{self.stages}-{order}{flags}"


DEFAULT = Schedule()
SIMT_DOUBLE_BUFFER = Schedule(double_buffer=True)  # CUDA-core dots' second candidate (tuning/autotune.py)
# CUDA-core dots' third candidate: the double-buffered loop on a CTA of 128 threads, so that a
# 128 x 128 tile is a 16 x 8 register block per thread (8 x 8 on 256): per k step 6 float4 shared
# loads feed 128 FMAs instead of 4 feeding 64, the FMAs 92% of the loop's instructions instead of
# 89% (SASS of matmul.phk at 8192^3, TILE_K = 8), and two CTAs of 230 registers fit a multiprocessor
SIMT_WIDE_BLOCK = Schedule(threads=128, double_buffer=True)
WGMMA_PROBE = Schedule(stages=4, order="grouped", wgmma=True)  # warpgroup MMA's first guess, per tile point
# For a kernel with one dot (matmul): as many stages as fit (the ring is cut to the shared memory),
# since the copies in flight, (stages - 2) stages' bytes, are what hides the memory latency: at
# 128 x 256 the k = 64 tile fits 4 stages (96 KB in flight), the k = 32 tile 8 (144 KB).
WGMMA_DEEP_PROBE = Schedule(stages=8, order="grouped", wgmma=True)
DEEP_STAGES = (6, 8)
# TF32 on the TMA ring (mainloops/tma_ws/tf32.py) probes its own tile shapes: as many stages as fit (4 at
# 256 x 128, 6 at 128 x 128)
TF32_TMA_PROBE = Schedule(stages=6, order="grouped", wgmma=True, tma=True)
# A loop of two dots (attention) may also run on four warpgroups sharing one K/V ring: BR = 256
# at 64 rows per warpgroup, K and V copied once for twice the rows of the 256-thread CTA.
WIDE_THREADS = 512
PINGPONG_STAGES = (5, 6)  # Schedule.pingpong: copies 2 or 3 iterations ahead
# A rotated loop of two dots fed by a producer warpgroup's bulk tensor copies (mainloops/tma_ws/ring.py): K
# and V of a key block share a stage, released once its P V is done, so copies run stages - 2 ahead; one CTA
# per multiprocessor (the producer hands its registers to the consumers), ping-pong or not
TMA_ATTENTION_STAGES = (3, 4)
TMA_ATTENTION_TUNED = True  # its GPU tests passed on the H200 (results/nvidia-h200/tc-2026-12-01-attn3)
# The persistent TMA ring (Schedule.persistent): with the TMA store its staging tile takes a buffer of its
# own beside the ring (the producer is filling the ring with the next tile meanwhile), so fewer stages fit
PERSISTENT_STAGES = (4, 6)
# searched once its GPU tests (tests/cuda/test_persistent_gpu.py) had passed on a device, as the tuner
# measures speed, not correctness: 12 of 12 on an H100 (benchmarks/results/h100-2026-12-07-s3/call1/
# persist). Turning it on changed the search: compiled.COMPILER_VERSION went up with it (the tuning
# caches' key)
PERSISTENT_TUNED = True
TMA_ATTENTION_PROBE = Schedule(stages=4, order="grouped", wgmma=True, rotate=True, tma=True, pingpong=True)

# Shared memory a copy ring leaves to the rest of the kernel by default: the ring is allocated when
# its loop starts, before the tiles staged later and the scratch of layout changes and reductions
# are known, so it keeps a margin for them rather than taking all it could.
RING_HEADROOM = 32 * 1024


def ring_stages(asked: int, fewest: int, stage_floats: int, held_floats: int, smem_limit: int,
                headroom: int = RING_HEADROOM) -> int:
    """How many stages a copy ring gets: the schedule's `asked` depth (at least `fewest`), one
    fewer at a time while the ring's stages of `stage_floats` words each, beside the `held_floats`
    words the kernel already holds, would leave less than `headroom` bytes of `smem_limit`; never
    fewer than `fewest` (a point that does not fit then is pruned where the kernel's total is checked)."""
    stages = max(fewest, asked)
    while stages > fewest and (held_floats + stages * stage_floats) * 4 > smem_limit - headroom:
        stages -= 1
    return stages


def wide_blocks_searched() -> bool:
    """Whether CUDA-core dots are also searched on 16 x 8 / 8 x 16 register blocks (SIMT_WIDE_BLOCK,
    and 128 x 256 / 256 x 128 on 256 threads by codegen.KERNEL_REGISTER_BUDGET): on since their GPU
    tests passed and the seed's SGEMM at 8192^3 reached 0.958x cuBLAS with them on an H100 (0.85x
    without); PHOBOS_CUDA_WIDE_BLOCKS=0 turns it off."""
    return options.current().cuda_wide_blocks


def tma_searched() -> bool:
    """Whether the tuner tries the warp-specialized TMA ring (mainloops/tma_ws/ring.py); PHOBOS_CUDA_TMA=0
    leaves it out (for comparing, or on a GPU whose driver lacks tensor maps)."""
    return options.current().cuda_tma


def persistent_searched() -> bool:
    """Whether the tuner tries the persistent TMA ring: PHOBOS_CUDA_PERSISTENT=1 or 0 where set (to
    compare), else PERSISTENT_TUNED."""
    asked = options.current().cuda_persistent
    return PERSISTENT_TUNED if asked is None else asked


def tensor_core_space(warps: int, deep: bool = False, rotates: bool = False,
                      sm_count: int | None = None) -> list[Schedule]:
    """The schedules the tuner tries for a kernel whose dots run on tensor cores; `deep` adds
    the deeper warpgroup-MMA rings (DEEP_STAGES) and, with tma_searched(), the warp-specialized
    TMA rings for kernels with a single dot, `rotates` the rotated loop (Schedule.rotate) for
    kernels with a loop of two or more dots (attention), with tma_searched() also fed by a
    producer warpgroup's bulk tensor copies (TMA_ATTENTION_STAGES), each with its softmax's row
    maximum in FOLD_CHAINS chains and in one (Schedule.fold_chains); `sm_count` (the GPU's
    multiprocessors) adds the TMA rings on a persistent grid of that many CTAs (PERSISTENT_STAGES, once
    persistent_searched()), which codegen prunes where they cannot pay (mainloops/tma_ws/persistent.py)."""
    layouts = [None] + [w for w in (1, 2, 4, 8) if w <= warps and warps % w == 0]
    orders = ("row", "grouped")
    out = []
    for wm in layouts:
        for stages in (2, 3, 4):
            for order in orders:
                out.append(Schedule(wm, stages, order))
    # warpgroup MMA keeps a group in flight past its iteration: copies run stages - 2 ahead
    out += [
        Schedule(None, stages, order, wgmma=True, late_copies=late, rotate=rot)
        for stages in (3, 4, 5) + (DEEP_STAGES if deep else ())
        for order in orders
        for late in (False, True)
        for rot in ((False, True) if rotates else (False,))
    ]
    if rotates:  # ping-pong: two more stages than the copies run ahead, plus one of slack
        out += [
            Schedule(None, stages, order, wgmma=True, late_copies=late, rotate=True, pingpong=True)
            for stages in PINGPONG_STAGES
            for order in orders
            for late in (False, True)
        ]
    # each with the plain epilogue and with the TMA store (mainloops/tma_ws/store.py)
    if deep and tma_searched():
        out += [
            Schedule(None, s, order, wgmma=True, tma=True, tma_store=st)
            for s in (4, 6)
            for order in orders
            for st in (False, True)
        ]
        out += [
            Schedule(None, s, "grouped", wgmma=True, tma=True, tma_store=st, persistent=sm_count)
            for s in PERSISTENT_STAGES
            for st in (False, True)
        ] if sm_count and persistent_searched() else []
    if rotates and tma_searched() and TMA_ATTENTION_TUNED:
        out += [
            Schedule(None, s, order, wgmma=True, rotate=True, tma=True, pingpong=pp, fold_chains=chains)
            for s in TMA_ATTENTION_STAGES
            for order in orders
            for pp in (False, True)
            for chains in (FOLD_CHAINS, 1)
        ]
    return out
