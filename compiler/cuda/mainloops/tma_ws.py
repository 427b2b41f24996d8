"""The warp-specialized TMA mainloop (tma.py): a producer warpgroup fills the ring by bulk tensor
copies through mbarriers, the consumers only wait and multiply; with `pingpong` the consumers
also take turns (pingpong.py); with `tma_store` the epilogue's tile stores leave through the
spent ring by bulk tensor stores (tma_store.py). TF32 dots take their own TMA ring (tma_tf32.py,
C^T by role swap)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import tma, tma_tf32
from compiler.cuda.mainloops.base import Mainloop
from compiler.cuda.mainloops.wgmma import tf32_tiles


@dataclass(frozen=True)
class TmaWarpSpecialized(Mainloop):
    pingpong: bool = False  # the consumer warpgroups take turns issuing their dots
    tma_store: bool = False  # the epilogue's tile stores go out through shared memory (tma_store.py)

    name = "tma_ws"
    features = ("wgmma", "tma", "setmaxnreg", "mbarrier")
    producer = True

    def ring_prologue(self, gen, s, tiles, bounds) -> dict:
        from compiler.cuda.loops import deferred_dot

        if tf32_tiles(tiles):  # raw tiles by bulk tensor copies, rounded in shared memory
            return tma_tf32.ring_prologue(gen, s, tiles, *bounds)
        return tma.ring_prologue(gen, s, tiles, bounds, deferred_dot(gen, s) is not None)

    def ring_lets(self, gen, lets) -> None:
        if gen.loop.pipelined[lets[0].name][0] == "tmatf32":
            return tma_tf32.ring_lets(gen, lets)
        tma.ring_lets(gen, lets)
