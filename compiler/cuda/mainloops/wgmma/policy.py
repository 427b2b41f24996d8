"""The warpgroup-MMA mainloop (mainloops/wgmma/mma.py): the same cp.async ring as mma.sync, but a group stays
in flight past its iteration, so the stage it reads is refilled one iteration later: copies run
stages - 2 ahead, with at least 3 stages. TF32 dots take the register-staged ring instead
(mainloops/wgmma/tf32.py: raw f32 tiles rounded on their way to shared memory)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda.mainloops import cp_async_ring
from compiler.cuda.mainloops.base import Mainloop
from compiler.cuda.mainloops.wgmma import tf32 as wgmma_tf32


def tf32_tiles(tiles) -> bool:
    """Whether a loop's operand tiles are TF32 warpgroup-MMA tiles (raw f32 in the ring)."""
    from compiler.cuda.mainloops.wgmma.mma import CoreTile

    return any(isinstance(t, CoreTile) and t.dtype == "f32" for *_, t in tiles)


@dataclass(frozen=True)
class Wgmma(Mainloop):
    name = "wgmma"
    features = ("wgmma",)
    fewest_stages = 3
    async_proxy = True

    def copies_ahead(self, stages: int) -> int:
        return stages - 2

    def ring_prologue(self, gen, s, tiles, bounds) -> dict:
        if tf32_tiles(tiles):
            return wgmma_tf32.ring_prologue(gen, s, tiles, *bounds)
        return cp_async_ring.prologue(gen, self, s, tiles, bounds)

    def ring_lets(self, gen, lets) -> None:
        if gen.loop.pipelined[lets[0].name][0] == "regring":
            return wgmma_tf32.ring_lets(gen, lets)
        cp_async_ring.iteration(gen, self, lets)
