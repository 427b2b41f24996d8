"""What goes into and comes out of the scheduler's state machine (scheduler/running/cluster_state.py).

Stimuli are what happened (a pod's report, a lost connection, a refused submit, the clock), each
with the time it happened at; actions are what the asyncio shell (scheduler/running/run.py) must do.
TRANSITIONS is the table `ClusterState.handle` dispatches through: one row per stimulus, naming
the rule that decides. Pure data: no I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.instructions import Compute, NodePlan, Store, kind_of
from schemas.remote_errors import FailureKind

# ---- stimuli -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    now: float


@dataclass(frozen=True)
class Heartbeat:
    node: int
    generation: int
    running: tuple[int, ...]
    now: float


@dataclass(frozen=True)
class Events:
    node: int
    generation: int
    events: Sequence[EventInfo]
    now: float


@dataclass(frozen=True)
class Finished:
    node: int
    generation: int
    ok: bool
    message: str
    now: float


@dataclass(frozen=True)
class Disconnected:
    node: int
    reason: str
    now: float


@dataclass(frozen=True)
class SubmitFailed:
    """A node's submit failed: `kind` tells a refusal from a lost connection."""

    node: int
    kind: FailureKind
    message: str
    now: float


@dataclass(frozen=True)
class Tick:
    now: float


Stimulus = Started | Heartbeat | Events | Finished | Disconnected | SubmitFailed | Tick


@dataclass(frozen=True)
class Transition:
    rule: str  # the ClusterState method that decides
    effect: str  # what it may do, for readers (docs/runtime.md states the rules in full)


TRANSITIONS: dict[type, Transition] = {
    Started: Transition("start", "plan every unit over the live nodes: Submit each node's plan"),
    Heartbeat: Transition("heartbeat", "the node is seen; its running ids are kept (charged if it dies)"),
    Events: Transition("events", "stores count towards their units; a failed fetch strands what needed "
                                 "it and suspects its peer; any other failure fails the job"),
    Finished: Transition("finished", "the node ran a plan to the end (Succeeded once all are stored), or "
                                     "stopped at a failure (the job fails after the grace)"),
    Disconnected: Transition("disconnected", "the node is dead: Cancel it, charge its running units, "
                                             "Replanned + Submit its unstored units over the others"),
    SubmitFailed: Transition("submit_failed", "a dropped connection or no answer: as Disconnected; a "
                                              "refusal: the job fails with the pod's reason"),
    Tick: Transition("tick", "a node silent past --heartbeat-timeout is dead; stranded units re-planned; "
                             "a fetch's peer blamed after the grace"),
}

# ---- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Submit:
    node: int
    plan: NodePlan


@dataclass(frozen=True)
class Cancel:
    """Best effort: tell a node declared dead to drop the job (it may be alive but too slow)."""

    node: int


@dataclass(frozen=True)
class Failed:
    reason: str


@dataclass(frozen=True)
class Succeeded:
    pass


@dataclass(frozen=True)
class Replanned:
    """A re-plan (for the log and the trace): `moved` holds (unit, from node, to node)."""

    generation: int
    time: float
    cause: str
    moved: tuple[tuple[int, int, int], ...]


Action = Submit | Cancel | Failed | Succeeded | Replanned


@dataclass(frozen=True)
class NodeFailure:
    node: int
    time: float
    reason: str


@dataclass(frozen=True)
class EventInfo:
    """What the state machine needs of one pod event (the shell converts the wire form)."""

    id: int
    kind: str
    ok: bool = True
    message: str = ""


@dataclass(frozen=True)
class InstructionInfo:
    kind: str
    unit: int | None
    leaf: str | None
    node: int
    deps: tuple[int, ...] = ()
    generation: int = 0


def describe_instructions(plan: NodePlan) -> dict[int, InstructionInfo]:
    """Every instruction's kind and unit: allocations, loads and fetches belong to the unit whose
    first compute follows them; frees to the unit before."""
    out: dict[int, InstructionInfo] = {}
    waiting: list = []
    last_unit = None
    for ins in plan.instructions:
        unit = ins.unit if isinstance(ins, Compute | Store) else None
        leaf = ins.leaf if isinstance(ins, Compute) else None
        if unit is None and kind_of(ins) in ("allocate", "load", "fetch"):
            waiting.append(ins)
            continue
        if unit is not None:
            for w in waiting:
                out[w.id] = InstructionInfo(kind_of(w), unit, None, plan.node, w.deps, plan.generation)
            waiting.clear()
            last_unit = unit
        out[ins.id] = InstructionInfo(kind_of(ins), unit if unit is not None else last_unit, leaf, plan.node,
                                      ins.deps, plan.generation)
    for w in waiting:
        out[w.id] = InstructionInfo(kind_of(w), last_unit, None, plan.node, w.deps, plan.generation)
    return out


