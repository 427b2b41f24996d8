"""Ping-pong attention (Schedule.pingpong): the two warpgroups of a rotated warpgroup-MMA loop
(loops.Rotation, attention) stop marching in step, so that one runs its softmax while the
other's dots run.

Two changes to the cp.async ring of loops.copy_pipeline:
- The stages are handed over by mbarriers instead of one CTA-wide barrier per iteration. Per
  stage, full[s] takes one arrival per thread, made by the copy engine once that thread's
  copies into the stage have landed (`cp.async.mbarrier.arrive.noinc`), and empty[s] one per
  warp, made at the top of iteration i + 2 for the stage of iteration i (its P V, carried into
  iteration i + 1, was waited for there). A refill waits until its stage was released; copies
  run stages - 3 iterations ahead, so a warpgroup may lead the other by about one iteration.
- The warpgroups take turns issuing their dots (named barriers 2 and 3, 256 threads each):
  warpgroup w waits on barrier 2 + w before issuing S = Q K^T and the carried P V, and then
  lets the other go (`bar.arrive` on 3 - w). Warpgroup 1 lets warpgroup 0 go first before the
  loop, and warpgroup 0 takes that last turn after it, so every barrier is balanced.

Takes a rotated loop at the kernel's top level, two warpgroups and at least 4 stages of a
cp.async ring; anything else is pruned.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import mbarriers
from compiler.frontend import ir

PRELUDE = r"""
__device__ __forceinline__ void cp_async_mbar_arrive(unsigned bar) {  // once this thread's copies land
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" :: "r"(bar) : "memory");
}
template <int ID> __device__ __forceinline__ void turn_wait() {  // immediate ids: ptxas reserves
  asm volatile("bar.sync %0, 256;" :: "n"(ID) : "memory");          // all 16 for a register id
}
template <int ID> __device__ __forceinline__ void turn_pass() {
  asm volatile("bar.arrive %0, 256;" :: "n"(ID) : "memory");
}
""".strip("\n")

THREADS = 256  # two warpgroups
MIN_STAGES = 4  # copies run stages - 3 ahead
FIRST_BARRIER = 2  # 0 is __syncthreads, 1 the TMA ring's consumers (mainloops/tma_ws/ring.py)


@dataclass(frozen=True)
class Handover:
    bars: str  # C name of the shared address of full[0]; empty[s] follows the stages of full
    stages: int

    def full(self, stage: str) -> str:
        return f"{self.bars} + 8 * ({stage})"

    def empty(self, stage: str) -> str:
        return f"{self.bars} + 8 * ({self.stages} + {stage})"


def check(gen, s: ir.For, rotates: bool) -> None:
    """Prune what the handover cannot take (see the module's docstring); `rotates`: the loop
    has a dot to carry (loops.deferred_dot)."""
    if not (gen.plan.wgmma and gen.plan.mainloop.rotate and rotates) or gen.out.depth != 1:
        raise gen.pruned(s.span, "ping-pong takes a rotated warpgroup-MMA loop at the kernel's top level")
    if gen.plan.grid.threads != THREADS:
        raise gen.pruned(s.span, f"ping-pong takes two warpgroups ({THREADS} threads)")


def setup(gen, stages: int) -> Handover:
    """The mbarriers, initialised before the ring's first copies (after the loop, warpgroup 0
    takes warpgroup 1's last turn: loops.issue_kept calls last_turn)."""
    bars = mbarriers.ring(gen, stages, THREADS, THREADS // 32)
    gen.loop.handover = Handover(bars, stages)
    takes_turns(gen)
    return gen.loop.handover


def takes_turns(gen) -> None:
    """The loop about to be emitted has its warpgroups take turns (the cp.async handover above,
    or a TMA ring's consumers, mainloops/tma_ws/ring.py)."""
    gen.loop.turns = True
    gen.used.pingpong = True


def filled(gen, stage: str) -> None:
    """After a thread's copies into `stage`: full[stage] counts them once they land."""
    gen.out.line(f"cp_async_mbar_arrive({gen.loop.handover.full(stage)});")


def first_turn(gen) -> None:
    gen.out.line(f"if ((th_warp >> 2) == 1) turn_pass<{FIRST_BARRIER}>();  // warpgroup 0 issues first")


def last_turn(gen) -> None:
    gen.out.line(f"if ((th_warp >> 2) == 0) turn_wait<{FIRST_BARRIER}>();  // warpgroup 1's last pass")
    gen.loop.handover = None
    gen.loop.turns = False


def top(gen, it: str) -> None:
    """Top of iteration `it`: release iteration it - 2's stage, wait until this one is full."""
    h = gen.loop.handover
    gen.out.line(f"if ({it} >= 2 && th_lane == 0) mbar_arrive({h.empty(f'({it} - 2) % {h.stages}')});")
    gen.out.line(f"mbar_wait({h.full(f'{it} % {h.stages}')}, ({it} / {h.stages}) & 1);")
    gen.out.line("fence_async_smem();  // what cp.async wrote, read next by the tensor cores")


def before_refill(gen, fill: str) -> None:
    """Before the copies of iteration `fill`: its stage was released by iteration fill - stages."""
    h = gen.loop.handover
    slot = f"{fill} % {h.stages}"
    gen.out.line(f"if ({fill} >= {h.stages}) mbar_wait({h.empty(slot)}, (({fill} / {h.stages}) + 1) & 1);")


def wait_turn() -> str:
    """Warpgroup w waits on barrier FIRST_BARRIER + w."""
    a, b = FIRST_BARRIER, FIRST_BARRIER + 1
    return f"if ((th_warp >> 2) == 0) turn_wait<{a}>(); else turn_wait<{b}>();"


def pass_turn() -> str:
    """Warpgroup w lets the other one go: an arrival on FIRST_BARRIER + 1 - w."""
    a, b = FIRST_BARRIER, FIRST_BARRIER + 1
    return f"if ((th_warp >> 2) == 0) turn_pass<{b}>(); else turn_pass<{a}>();"
