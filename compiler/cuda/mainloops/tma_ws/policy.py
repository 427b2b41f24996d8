"""The warp-specialized TMA mainloop (mainloops/tma_ws/ring.py): a producer warpgroup fills the ring by bulk
tensor copies through mbarriers, the consumers only wait and multiply; with `pingpong` the consumers also take
turns (mainloops/pingpong/handover.py); with `tma_store` the epilogue's tile stores leave through the spent
ring by bulk tensor stores (mainloops/tma_ws/store.py). TF32 dots take their own TMA ring
(mainloops/tma_ws/tf32.py, C^T by role swap)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda.mainloops.base import Mainloop
from compiler.cuda.mainloops.tma_ws import ring as tma
from compiler.cuda.mainloops.tma_ws import tf32 as tma_tf32
from compiler.cuda.mainloops.wgmma.policy import tf32_tiles


@dataclass(frozen=True)
class TmaWarpSpecialized(Mainloop):
    pingpong: bool = False  # the consumer warpgroups take turns issuing their dots
    # the epilogue's tile stores go out through shared memory (mainloops/tma_ws/store.py)
    tma_store: bool = False
    # CTAs of a persistent grid walking the output tiles (0: one CTA per tile; mainloops/tma_ws/persistent.py)
    persistent: int = 0

    name = "tma_ws"
    features = ("wgmma", "tma", "setmaxnreg", "mbarrier")
    producer = True

    def ring_prologue(self, gen, s, tiles, bounds) -> dict:
        from compiler.cuda.loops import deferred_dot

        if tf32_tiles(tiles):  # raw tiles by bulk tensor copies, rounded in shared memory
            if self.persistent:
                raise gen.pruned(s.span, "a persistent grid takes a 16-bit or fp8 ring, not TF32's")
            return tma_tf32.ring_prologue(gen, s, tiles, *bounds)
        return tma.ring_prologue(gen, s, tiles, bounds, deferred_dot(gen, s) is not None)

    def ring_lets(self, gen, lets) -> None:
        if gen.loop.pipelined[lets[0].name][0] == "tmatf32":
            return tma_tf32.ring_lets(gen, lets)
        tma.ring_lets(gen, lets)
