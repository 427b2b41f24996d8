"""The mma.sync mainloop: warp-level tensor-core dots (mma.py) fed by a ring of shared buffers
filled by cp.async (cp_async_ring.py), stages - 1 iterations ahead."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda.mainloops import cp_async_ring
from compiler.cuda.mainloops.base import Mainloop


@dataclass(frozen=True)
class MmaSync(Mainloop):
    name = "mma_sync"

    def ring_prologue(self, gen, s, tiles, bounds) -> dict:
        return cp_async_ring.prologue(gen, self, s, tiles, bounds)

    def ring_lets(self, gen, lets) -> None:
        cp_async_ring.iteration(gen, self, lets)
