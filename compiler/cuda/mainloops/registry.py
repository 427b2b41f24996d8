"""The registry of mainloop policies and the one place a leaf's policy is chosen."""


from __future__ import annotations

from compiler.cuda.mainloops.base import Mainloop
from compiler.cuda.mainloops.mma_sync import MmaSync
from compiler.cuda.mainloops.pingpong.policy import PingPong
from compiler.cuda.mainloops.simt.policy import Simt
from compiler.cuda.mainloops.split_loop.policy import SplitLoop
from compiler.cuda.mainloops.tma_ws.policy import TmaWarpSpecialized
from compiler.cuda.mainloops.wgmma.policy import Wgmma

REGISTRY: dict[str, type[Mainloop]] = {
    cls.name: cls for cls in (Simt, MmaSync, Wgmma, PingPong, TmaWarpSpecialized, SplitLoop)
}


def choose_mainloop(schedule, tensor_cores: bool, wgmma: bool) -> Mainloop:
    """The policy of a leaf under the tuner's `schedule` (schedule.py): `tensor_cores`, its dots
    run on tensor cores; `wgmma`, as warpgroup MMA (the schedule asked and the dots take it).
    A schedule's TMA asks nothing of mma.sync dots; its ping-pong is the handover's to prune."""
    common = dict(stages=schedule.stages, late_copies=schedule.late_copies, rotate=schedule.rotate,
                  fp8_overlap=schedule.fp8_overlap)
    if not tensor_cores:
        return Simt(**common, double_buffer=schedule.double_buffer)
    if wgmma and schedule.tma:
        return TmaWarpSpecialized(**common, pingpong=schedule.pingpong, tma_store=schedule.tma_store,
                                  persistent=schedule.persistent)
    if schedule.pingpong:
        return PingPong(**common)
    return Wgmma(**common) if wgmma else MmaSync(**common)



def choose_split(kernel, binding, split: int | None, sm_count: int | None = None,
                 fan_in: int | None = None) -> SplitLoop | None:
    """The split-loop policy of a leaf bound by `binding`, or None for the one-CTA loop. `split`:
    the factor the user forces (1: never split; a loop that cannot split is then the user's
    error, CompileError at the loop saying why), or None: the cost model's choice
    (mainloops/split_loop/plan.py) for a merge tree of `fan_in` (None: PHOBOS_SPLIT_FAN_IN), and
    only for a loop that can split."""
    from compiler.cuda.mainloops.split_loop import plan as split_plan
    from compiler.cuda.mainloops.split_loop import transform as split_loop

    if split == 1:
        return None
    if split is None:
        if split_loop.why_not_split(kernel) is not None:
            return None
        factor = split_plan.model_factor(kernel, binding, sm_count, fan_in)
        return SplitLoop(factor=factor) if factor > 1 else None
    split_loop.split_form(kernel)
    return SplitLoop(factor=split, forced=True)
