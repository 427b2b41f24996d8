"""What rendering accumulates, in small parts. The emitter (exprs.ExprEmitter, codegen.KernelGen)
holds the leaf's frozen `render_plan.RenderPlan` as `gen.plan` and, beside its output lines
(`gen.out`, emit.Emitter) and its name counter (`gen.fresh`), only these:

  gen.scope      Scope: what the kernel's names stand for at the statement being emitted
  gen.smem       SharedMemory: the shared-memory words allocated so far
  gen.registers  Registers: tile values per thread held in registers (the prune budget)
  gen.used       Used: what the code used, which decides preludes, launch bounds and target.Need
  gen.loop       LoopState: the loop being emitted and the mainloop machinery feeding its dots

Every emitter helper (one module per IR operation or mainloop) reads `gen.plan` and changes only
these parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.cuda import analysis
from compiler.cuda.values import SharedTile, Val


@dataclass
class Scope:
    """Name -> its C value: tiles (`vals`), scalars as (C name, dtype), and the integer range of
    each int scalar (for bounds checks the analysis can drop). A loop body restores it on exit."""

    vals: dict[str, Val | SharedTile] = field(default_factory=dict)
    scalars: dict[str, tuple[str, str]] = field(default_factory=dict)
    ranges: dict[str, analysis.IntRange] = field(default_factory=dict)

    def saved(self) -> tuple[dict, dict, dict]:
        return dict(self.vals), dict(self.scalars), dict(self.ranges)

    def restore(self, saved: tuple[dict, dict, dict]) -> None:
        self.vals, self.scalars, self.ranges = saved


@dataclass
class SharedMemory:
    """Words of shared memory: permanent buffers for the whole kernel (`alloc_perm`), then
    per-statement scratch after them (`alloc_scratch`, reused by the next statement)."""

    perm_floats: int = 0
    scratch_cur: int = 0
    scratch_max: int = 0
    # (first word, words) of a TMA ring: free once its loop has ended (mainloops/tma_ws/store.py reuses it)
    spent_ring: tuple[int, int] | None = None

    def alloc_perm(self, floats: int, align: int = 4) -> str:
        """`floats` words for the whole kernel, `align` words aligned (a swizzled tensor-core
        operand needs 1024 bytes: 256 words)."""
        self.perm_floats += -self.perm_floats % align
        off = self.perm_floats
        self.perm_floats += (floats + 3) // 4 * 4
        return f"(smem + {off})"

    def alloc_scratch(self, floats: int) -> str:
        off = self.scratch_cur
        self.scratch_cur += (floats + 3) // 4 * 4
        self.scratch_max = max(self.scratch_max, self.scratch_cur)
        return f"(smem + PERM + {off})"

    def bytes(self) -> int:
        return (self.perm_floats + self.scratch_max) * 4


@dataclass
class Registers:
    """Tile values per thread: `register_floats` held for the whole kernel (declared tiles,
    hoisted arrays), `let_floats` the largest let (a let dies with its statement list)."""

    register_floats: int = 0
    let_floats: int = 0
    # What a CUDA-core loop holds beside the kernel's tiles, the most of any loop: its operands
    # prefetched into registers, the largest let of its body and a k step's dot fragments
    loop_floats: int = 0
    body_let: int = 0  # of the loop being emitted: the largest let of its body
    fragments: int = 0  # of the loop being emitted: the most fragment values of one dot's k step

    def enter_loop(self) -> tuple[int, int]:
        saved = (self.body_let, self.fragments)
        self.body_let = self.fragments = 0
        return saved

    def leave_loop(self, prefetched: int, saved: tuple[int, int]) -> None:
        """Close the loop's count: `prefetched` floats of its operands in registers; a loop nested
        in it counts for the enclosing one too."""
        self.loop_floats = max(self.loop_floats, prefetched + self.body_let + self.fragments)
        self.body_let, self.fragments = max(saved[0], self.body_let), max(saved[1], self.fragments)


@dataclass
class Used:
    """What the emitted code used (read once the body is emitted: codegen.generate, target.need_of)."""

    half: bool = False  # f16 values: the half prelude
    bf16: bool = False  # bf16 values: the half prelude
    fp8: bool = False  # fp8 values (e4m3 / e5m2): the half prelude's conversions
    wgmma: bool = False  # warpgroup MMA (its prelude, 1024-byte aligned shared memory)
    pingpong: bool = False  # ping-pong handover barriers (mainloops/pingpong/handover.py)
    tf32_register_operand: bool = False  # a TF32 mma.sync dot reads a from registers (its budget)
    tensor_maps: list = field(default_factory=list)  # tensor_maps.MapSpec of the bulk copies' parameters
    # a tile left through shared memory by bulk tensor stores (mainloops/tma_ws/store.py)
    tma_store: bool = False
    int_helpers: set = field(default_factory=set)  # i64 / u32 helpers the code calls (int_ops.HELPERS)


@dataclass
class LoopState:
    """The loop being emitted and the mainloop machinery set up for its dots."""

    # one flag per enclosing loop body: has a barrier been emitted in it (at its own level)
    barriers: list[bool] = field(default_factory=list)
    pipelined: dict[str, tuple] = field(default_factory=dict)  # let name -> its prefetch / ring entry
    rotation: object = None  # loops.Rotation of the loop being emitted, if rotated
    tail: list = field(default_factory=list)  # code queued for the end of the loop's body
    handover: object = None  # pingpong.Handover of the ring being emitted, if ping-pong
    turns: bool = False  # the loop takes turns between warpgroups (mainloops/pingpong/handover.py)
    ring_iteration: str | None = None  # C name of the copy ring's iteration number
    ring_tiles: set[str] = field(default_factory=set)  # C names of operand buffers that are ring stages
    # the ring is filled from registers (TF32 warpgroup MMA, mainloops/wgmma/tf32.py)
    register_ring: bool = False
    swap: object = None  # tma_tf32.Swap of the loop being emitted (TF32 by role swap)
    swap_acc: object = None  # the accumulator the swapped dot adds into after the loop
    # consumer threads once a producer warpgroup has split off (mainloops/tma_ws/ring.py), else 0
    tma_split: int = 0
    # the iteration's MMAs have all been waited for at the end of its body (an fp8 dot's promotion):
    # a TMA ring releases this iteration's stage, not the one before (mainloops/tma_ws/ring.py)
    mma_drained: bool = False
    # a persistent grid (mainloops/tma_ws/persistent.py): the line where the consumers' tile loop opens
    # (the ring's set-up and the producer go before it), and the consumers' ring (stages, mbarriers,
    # trip count) until its loop has ended
    tiles_at: int | None = None
    persistent_ring: tuple | None = None
