"""The one interface of a mainloop policy: how a loop's tensor-core operands reach the dots.

A policy is a small frozen value chosen once per leaf by the analyse stage (registry.py,
from the tuner's Schedule) and kept in the KernelPlan; the emit stage asks it, and only it, how
to stage a loop's operands (the ring before the loop, each iteration's wait / refill / stage)
and what the GPU must offer for it. What every policy carries:

- `stages`: the ring depth the schedule asked for (each ring cuts it to the shared memory),
- `late_copies`: an iteration issues its refill after its dots rather than at its top,
- `rotate`: a loop of two dots (attention) carries its last dot into the next iteration
  (loops.Rotation); a policy that cannot rotate ignores it, as the loop finds no dot to carry.
- `fp8_overlap`: an fp8 dot's per-k-tile promotion overlaps its adds with the next piece's MMA
  (mainloops/wgmma/fp8_promote.py); no effect without fp8 warpgroup MMA.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class Mainloop:
    stages: int = 3
    late_copies: bool = False
    rotate: bool = False
    fp8_overlap: bool = False

    name: ClassVar[str] = "base"
    # what the GPU must offer beyond mma.sync and cp.async (target.Need feature names), in the
    # order target.schedule_need names them
    features: ClassVar[tuple[str, ...]] = ()
    producer: ClassVar[bool] = False  # a producer warpgroup feeds the ring (it splits off first)
    # the cp.async ring's (cp_async_ring.py) shape: its fewest stages, whether mbarriers hand the
    # stages over (ping-pong) and whether the tensor cores' async proxy reads them (a fence)
    fewest_stages: ClassVar[int] = 2
    handover: ClassVar[bool] = False
    async_proxy: ClassVar[bool] = False

    def shared_copies(self) -> int:
        """How many shared buffers a loop's register-prefetched f32 operand gets (loops.py)."""
        return 1

    def copies_ahead(self, stages: int) -> int:
        """How many iterations ahead the cp.async ring's copies run at `stages` stages."""
        return stages - 1

    def ring_prologue(self, gen, s, tiles, bounds: tuple[str, str, str]) -> dict:
        """Before loop `s`: the ring of the tensor-core operand lets `tiles` ((let, role,
        transposed, tile) each) and its first copies; `bounds`: the loop's (start, stop, step)
        as C names. Returns the codegen `pipelined` entries of the lets ({} : not pipelined)."""
        raise NotImplementedError(f"the {self.name} mainloop stages no tensor-core operands")

    def ring_lets(self, gen, lets) -> None:
        """At the top of one iteration: wait for its stage, refill a later one (now or queued
        on gen.loop.tail) and point the lets at it."""
        raise NotImplementedError(f"the {self.name} mainloop stages no tensor-core operands")
