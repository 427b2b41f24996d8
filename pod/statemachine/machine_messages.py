"""What goes into and comes out of the pod's state machine (pod/statemachine/machine.py).

Stimuli are what happened (a scheduler's call, a heartbeat's answer, an instruction's end, a
peer's answer), each carrying the time it happened at where the machine needs one; actions are
what the pod's shells (pod/rpc/server.py, pod/runtime.py, pod/rpc/link.py) must do. Pure data: no I/O
here. pod/statemachine/machine.py names them all, so `machine.Hello` is this module's Hello.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pod.statemachine import plan_check
from pod.statemachine import state as st
from schemas.instructions import NodePlan
from schemas.remote_errors import FailureKind

# ---- stimuli -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """A scheduler said hello on a new connection: it is this pod's scheduler from now on."""

    node: int
    now: float


@dataclass(frozen=True)
class HeartbeatAnswered:
    session: int
    sent: float  # when the heartbeat the scheduler took was sent
    now: float


@dataclass(frozen=True)
class HeartbeatFailed:
    session: int
    kind: FailureKind  # TIMEOUT, DISCONNECTED, DECLARED_DEAD, or another
    reason: str
    now: float


@dataclass(frozen=True)
class SchedulerLost:
    """The scheduler's connection dropped."""

    reason: str


@dataclass(frozen=True)
class Stop:
    """`shutdown`, or the process is ending."""

    reason: str


@dataclass(frozen=True)
class PlanPart:
    """One submit: the whole plan, or a part of it (`more`: further parts follow)."""

    job: str
    generation: int
    plan: NodePlan  # this part's instructions
    program: object | None  # the JobProgram (first part); None on continuations
    peers: tuple = ()
    more: bool = False
    staged: bool = True  # the job's outputs have their staging copies (else: OutputsStaged follows)


@dataclass(frozen=True)
class OutputsStaged:
    """The scheduler says the job's outputs have their staging copies, their space reserved."""

    job: str
    now: float


@dataclass(frozen=True)
class PlanReady:
    """The shell confined the plan's URIs and prepared its program; the plan may start."""

    job: str
    checked: plan_check.CheckedPlan
    writes: Mapping[str, tuple[str, ...]]
    program: object  # the JobProgram the job now runs (its first)
    peers: frozenset[int] | None = None  # the job's live nodes, as the submit named them


@dataclass(frozen=True)
class InstructionDone:
    job: str
    generation: int
    id: int
    ok: bool = True
    message: str = ""


@dataclass(frozen=True)
class TileReleased:
    """A peer finished fetching a tile of ours (its `release` call), or gave up on it."""

    job: str
    generation: int
    buffer: int
    node: int
    nbytes: int = 0
    at: float = 0.0  # Unix time, for the serve event
    gave_up: bool = False  # the peer will not fetch it (its fetch failed or was dropped)


@dataclass(frozen=True)
class CancelJob:
    job: str


@dataclass(frozen=True)
class StoreAsked:
    """A store's tile is ready to write: may it?"""

    job: str
    generation: int
    id: int
    now: float


@dataclass(frozen=True)
class FetchFailed:
    """A peer's answer to a fetch was a failure of `kind`."""

    job: str
    generation: int
    id: int
    peer: int
    kind: FailureKind
    message: str


Stimulus = (Hello | HeartbeatAnswered | HeartbeatFailed | SchedulerLost | Stop | PlanPart | OutputsStaged
            | PlanReady | InstructionDone | TileReleased | CancelJob | StoreAsked | FetchFailed)

# ---- actions -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OnJob:
    """One of a job's actions (pod.statemachine.state: StartInstruction, BufferServable, DropGeneration,
    PlanFinished)."""

    job: str
    action: st.Action


@dataclass(frozen=True)
class Prepare:
    """Confine the plan's URIs, prepare the program if new, then answer PlanReady."""

    job: str
    program: object
    checked: plan_check.CheckedPlan
    peers: tuple


@dataclass(frozen=True)
class StoreVerdict:
    """Write the store (`refusal` None) or fail it with the refusal."""

    job: str
    generation: int
    id: int
    refusal: str | None


@dataclass(frozen=True)
class FetchVerdict:
    job: str
    id: int
    again: bool  # ask the owner again; else the fetch fails with the owner's answer


@dataclass(frozen=True)
class ReportServed:
    """Tell the scheduler a peer fetched a tile (a "serve" event), before what the release sets off."""

    job: str
    generation: int
    buffer: int
    node: int
    nbytes: int
    at: float


@dataclass(frozen=True)
class StartHeartbeats:
    session: int


@dataclass(frozen=True)
class LeaveScheduler:
    """The scheduler is gone: stop the process (`exit`) or forget the scheduler and serve on."""

    why: str
    reason: str
    exit: bool


@dataclass(frozen=True)
class ForgetJob:
    job: str


Action = (OnJob | Prepare | StoreVerdict | FetchVerdict | ReportServed | StartHeartbeats | LeaveScheduler
          | ForgetJob)
