"""The ping-pong mainloop (mainloops/pingpong/handover.py's handover): the warpgroup-MMA cp.async ring, its
stages handed over by mbarriers instead of a CTA-wide barrier, the two warpgroups taking turns issuing their
dots; copies run stages - 3 ahead. Takes a rotated warpgroup-MMA loop at the kernel's top level
(pingpong.check prunes anything else)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda.mainloops.pingpong import handover as pingpong
from compiler.cuda.mainloops.wgmma.policy import Wgmma


@dataclass(frozen=True)
class PingPong(Wgmma):
    name = "pingpong"
    features = ("wgmma", "mbarrier")
    fewest_stages = pingpong.MIN_STAGES
    handover = True

    def copies_ahead(self, stages: int) -> int:
        return stages - 3
