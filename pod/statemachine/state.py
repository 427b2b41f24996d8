"""The pod's pure state machine for one job: which instruction may start, when a buffer may be
served to peers or freed, which generation is current.

No I/O here: the pod's machine (pod/statemachine/machine.py) keeps one PodState per job and routes the job's
stimuli to `PodState.handle(event)`; the shells carry out the actions. Tested without sockets.

Rules
- An instruction starts once every dep has completed. A Free additionally waits until peers have
  released (finished fetching) its buffer `serves` times: a peer's fetch is not a local
  instruction, so the count is the owner's only way to know.
- A buffer is servable to peers once every instruction that fills it has completed: its Allocate,
  Load or Fetch, and each Compute binding it to a parameter the leaf writes (`leaf_writes`; a leaf
  missing from it counts every binding as a write, which is safe but may serve later).
- Generations: a re-plan after a node's death is a new generation that runs BESIDE the plans
  before it (they keep their running work); plans are dropped only by `GenerationChanged` (every
  plan older than it) or by cancelling the job, and requests for a dropped generation are refused.
- Lost peers: every submit names the job's live nodes; a node named before and missing now is
  lost, for good. Each plan then stops waiting for it: a Free no longer waits for its fetch, and
  a fetch from it not yet done is abandoned with everything that depends on it except Frees
  (`schemas.instructions.abandoned_by`), so the plan's other units go on. A failed fetch is
  abandoned the same way (the scheduler blames the peer and re-plans what was abandoned).
- Any other failed instruction stops the plan: nothing more starts, the buffers stay servable
  until the job is cancelled, and the scheduler is told.
- Nothing waits on a peer silently or for ever. A fetch this plan abandons (failed, or dropped
  with what it fed) from a peer still live is given up (`FetchGivenUp`): the shell tells that
  owner, whose Free of the tile then waits for this node no longer. A give-up can reach the
  owner before its plan of that generation does (the fetch failed while the owner had none: the
  owner said no plan of it produced the tile); it is kept and counted when the plan comes. A
  Free held for its peers says which (`FreeWaits`), for the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pod.statemachine import plan_check
from pod.statemachine.plan_check import CheckedPlan
from schemas.instructions import (
    Allocate,
    Compute,
    Fetch,
    Free,
    Instruction,
    Load,
    NodePlan,
    Store,
    abandoned_by,
    kind_of,
    used_buffers,
)
from schemas.remote_errors import FailureKind, Refused

STALE = FailureKind.STALE_GENERATION


# ---- events (stimuli) -------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanSubmitted:
    plan: NodePlan | CheckedPlan  # a NodePlan is validated here, a CheckedPlan was already
    leaf_writes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    peers: frozenset[int] | None = None  # the job's live nodes as of this plan (None: not said)


@dataclass(frozen=True)
class InstructionFinished:
    generation: int
    id: int
    ok: bool = True
    message: str = ""


@dataclass(frozen=True)
class TileServed:
    """A peer finished fetching `buffer` (its `release` call), or gave up on it (`gave_up`)."""

    generation: int
    buffer: int
    node: int
    gave_up: bool = False


@dataclass(frozen=True)
class GenerationChanged:
    generation: int


@dataclass(frozen=True)
class Cancelled:
    pass


Event = PlanSubmitted | InstructionFinished | TileServed | GenerationChanged | Cancelled


# ---- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartInstruction:
    generation: int
    instruction: Instruction


@dataclass(frozen=True)
class BufferServable:
    generation: int
    buffer: int


@dataclass(frozen=True)
class DropGeneration:
    """Free every buffer of `generation` (and wake its waiting peers with a refusal)."""

    generation: int
    reason: str


@dataclass(frozen=True)
class PlanFinished:
    generation: int
    ok: bool
    message: str = ""


@dataclass(frozen=True)
class BufferDoomed:
    """`buffer` will never be filled (an instruction filling it was abandoned): refuse the peers
    waiting for it at once, so that they drop what needs it instead of asking again."""

    generation: int
    buffer: int


@dataclass(frozen=True)
class FetchAbandoned:
    """A fetch from a lost peer will not run (its dependents neither): tell the scheduler."""

    generation: int
    instruction: Fetch
    reason: str


@dataclass(frozen=True)
class FetchGivenUp:
    """This plan will not fetch `instruction`'s tile (the fetch failed, or was dropped with what
    it fed) and its owner is live: tell the owner, whose Free of the tile waits for it."""

    generation: int
    instruction: Fetch


@dataclass(frozen=True)
class FreeWaits:
    """`instruction` (a Free) is held until `peers` have fetched its buffer or given up."""

    generation: int
    instruction: Free
    peers: tuple[int, ...]


Action = (StartInstruction | BufferServable | DropGeneration | PlanFinished | FetchAbandoned | BufferDoomed
          | FetchGivenUp | FreeWaits)


# ---- one plan ------------------------------------------------------------------------------------


def _written_buffers(ins: Instruction, leaf_writes: Mapping[str, tuple[str, ...]]) -> tuple[int, ...]:
    if isinstance(ins, Allocate | Load | Fetch):
        return (ins.buffer,)
    if isinstance(ins, Compute):
        writes = leaf_writes.get(ins.leaf)
        return tuple(buf for param, buf in ins.bindings if writes is None or param in writes)
    return ()


class PlanState:
    """Progress of one plan: pending dep counts, running, done and abandoned sets, buffer readiness."""

    def __init__(self, checked: CheckedPlan, leaf_writes: Mapping[str, tuple[str, ...]]):
        plan = checked.plan
        self.plan = plan
        self.generation = plan.generation
        self.by_id: dict[int, Instruction] = {ins.id: ins for ins in plan.instructions}
        self.missing_deps: dict[int, int] = {}
        self.dependents: dict[int, list[int]] = {ins.id: [] for ins in plan.instructions}
        self.producers_left: dict[int, int] = {}  # buffer -> fill instructions not yet done
        self.fills: dict[int, tuple[int, ...]] = {}  # instruction -> buffers it fills
        self.free_of: dict[int, Free] = {}  # buffer -> its Free
        self.users: dict[int, list[int]] = {}  # buffer -> the instructions using it, but its Free
        self.served: dict[int, set[int]] = {}  # buffer -> peers that released it so far
        self.lost: set[int] = set()  # peers lost to the job: no Free waits for them
        self.waiting_frees: set[int] = set()  # Free ids whose deps are done, waiting for serves
        self.running: set[int] = set()
        self.done: set[int] = set()
        self.abandoned: set[int] = set()  # will never run (a fetch from a lost or failing peer)
        self.doomed: set[int] = set()  # buffers an abandoned instruction was to fill
        self.failed: str | None = None
        self.reported = False  # PlanFinished sent
        for ins in plan.instructions:
            deps = set(ins.deps)
            self.missing_deps[ins.id] = len(deps)
            for dep in deps:
                self.dependents[dep].append(ins.id)
            fills = _written_buffers(ins, leaf_writes)
            self.fills[ins.id] = fills
            for buf in fills:
                self.producers_left[buf] = self.producers_left.get(buf, 0) + 1
            if isinstance(ins, Free):
                self.free_of[ins.buffer] = ins
            else:
                for buf in used_buffers(ins):
                    self.users.setdefault(buf, []).append(ins.id)

    @property
    def finished(self) -> bool:
        return len(self.done) + len(self.abandoned) == len(self.by_id)

    def servable(self, buffer: int) -> bool:
        return self.producers_left.get(buffer, 1) == 0

    def fetchers(self, buffer: int) -> tuple[int, ...]:
        """The peers still to fetch `buffer` (its Free names them; lost ones and those that
        released it already left out)."""
        free = self.free_of.get(buffer)
        if free is None:
            return ()
        served = self.served.get(buffer, ())
        return tuple(p for p in free.peers if p not in self.lost and p not in served)

    def produces(self, buffer: int) -> bool:
        """Whether some instruction of this plan fills `buffer` (servable once they are done)."""
        return buffer in self.producers_left

    def _may_start(self, ins: Instruction) -> bool:
        if not isinstance(ins, Free):
            return True
        # Its deps imply every user is done, unless some were abandoned: then a user outside the
        # abandoned set (an earlier launch on the same output) may still be running.
        done, abandoned = self.done, self.abandoned
        if not all(u in done or u in abandoned for u in self.users.get(ins.buffer, ())):
            return False
        if ins.buffer in self.doomed:
            return True  # never filled: no peer can fetch it, so none is waited for
        served = self.served.get(ins.buffer, set())
        return all(p in served or p in self.lost for p in ins.peers)

    def _wake_frees(self, buffers, actions: list[Action]) -> None:
        """Start the waiting Frees of `buffers` that may start now."""
        for buf in buffers:
            free = self.free_of.get(buf)
            if free is not None and free.id in self.waiting_frees and self._may_start(free):
                self.waiting_frees.discard(free.id)
                self._start([free.id], actions)

    def _start(self, ids: list[int], actions: list[Action]) -> None:
        for i in ids:
            ins = self.by_id[i]
            if self._may_start(ins):
                self.running.add(i)
                actions.append(StartInstruction(self.generation, ins))
            else:
                self.waiting_frees.add(i)
                pending = self.fetchers(ins.buffer)
                if pending and all(u in self.done for u in self.users.get(ins.buffer, ())):
                    actions.append(FreeWaits(self.generation, ins, pending))

    def start_ready(self) -> list[Action]:
        actions: list[Action] = []
        idle = self.running | self.waiting_frees | self.done | self.abandoned
        self._start([i for i, n in self.missing_deps.items() if n == 0 and i not in idle], actions)
        return actions

    def finish(self, ident: int, ok: bool, message: str) -> list[Action]:
        if ident not in self.running:
            return []  # unknown, repeated or abandoned meanwhile: nothing to do
        self.running.discard(ident)
        actions: list[Action] = []
        if not ok and isinstance(self.by_id[ident], Fetch):
            # The peer's fault or its death: this fetch's dependents cannot run, the rest can.
            self._abandon([ident], actions)
            self.finish_check(actions)
            return actions
        if not ok:
            if self.failed is None:
                ins = self.by_id[ident]
                self.failed = f"instruction {ident} ({_describe(ins)}) failed: {message}"
                actions.append(PlanFinished(self.generation, False, self.failed))
            return actions
        self.done.add(ident)
        for buf in self.fills[ident]:
            self.producers_left[buf] -= 1
            if self.producers_left[buf] == 0:
                actions.append(BufferServable(self.generation, buf))
        self._satisfied(ident, actions)
        if self.abandoned and self.failed is None:
            self._wake_frees(used_buffers(self.by_id[ident]), actions)
        self.finish_check(actions)
        return actions

    def _satisfied(self, ident: int, actions: list[Action]) -> None:
        """`ident` is done or abandoned: its dependents wait for it no longer."""
        if self.failed is not None:
            return
        newly_ready = []
        for j in self.dependents[ident]:
            self.missing_deps[j] -= 1
            if self.missing_deps[j] == 0 and j not in self.abandoned:
                newly_ready.append(j)
        self._start(newly_ready, actions)

    def finish_check(self, actions: list[Action]) -> None:
        if self.failed is None and self.finished and not self.reported:
            self.reported = True
            actions.append(PlanFinished(self.generation, True))

    def _abandon(self, roots: list[int], actions: list[Action]) -> None:
        """Drop `roots` and what depends on them (abandoned_by); the Frees they gated may go."""
        dropped = abandoned_by(self.plan.instructions, roots) - self.done - self.abandoned
        self.abandoned |= dropped
        self.running -= dropped
        self.waiting_frees -= dropped
        for ident in sorted(dropped):  # owners left waiting for this node's fetch: told
            ins = self.by_id[ident]
            if isinstance(ins, Fetch) and ins.peer not in self.lost:
                actions.append(FetchGivenUp(self.generation, ins))
        for buf in sorted({b for i in dropped for b in self.fills[i]} - self.doomed):
            self.doomed.add(buf)
            actions.append(BufferDoomed(self.generation, buf))
        for ident in sorted(dropped):
            self._satisfied(ident, actions)
        if self.failed is None:
            self._wake_frees({b for i in dropped for b in used_buffers(self.by_id[i])}, actions)

    def peers_lost(self, lost: set[int]) -> list[Action]:
        """Stop waiting for `lost`: abandon fetches from them not done, start Frees they held."""
        self.lost |= lost
        actions: list[Action] = []
        if self.failed is not None:
            return actions
        roots = [ins.id for ins in self.plan.instructions if isinstance(ins, Fetch) and ins.peer in lost
                 and ins.id not in self.done and ins.id not in self.abandoned]
        for ident in roots:
            fetch = self.by_id[ident]
            actions.append(FetchAbandoned(self.generation, fetch, f"node {fetch.peer} was lost to the job"))
        self._abandon(roots, actions)
        self._wake_frees([self.by_id[i].buffer for i in sorted(self.waiting_frees)], actions)
        self.finish_check(actions)
        return actions

    def serve_done(self, buffer: int, node: int) -> list[Action]:
        """`node` fetched `buffer`, or gave up on it: its Free waits for that node no longer."""
        if buffer not in self.producers_left:
            raise Refused(f"buffer {buffer} is not in the plan of generation {self.generation}")
        self.served.setdefault(buffer, set()).add(node)
        actions: list[Action] = []
        if self.failed is None:
            self._wake_frees([buffer], actions)
        return actions


def _describe(ins: Instruction) -> str:
    if isinstance(ins, Compute):
        return f"compute leaf {ins.leaf}, unit {ins.unit}"
    if isinstance(ins, Load | Store):
        return f"{kind_of(ins)} of {ins.region.tensor}"
    if isinstance(ins, Fetch):
        return f"fetch buffer {ins.peer_buffer} from node {ins.peer}"
    return f"{kind_of(ins)} buffer {ins.buffer}"


# ---- one job --------------------------------------------------------------------------------------


class PodState:
    """One job on this pod: its plans (one per generation, side by side) and its lost peers."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.plans: dict[int, PlanState] = {}
        self.dropped_through = -1  # generations up to this one were dropped: refused from now on
        self.peers: set[int] = set()  # the job's live nodes, as the last submit named them
        self.lost: set[int] = set()
        self.cancelled = False
        # generation -> (buffer, node) give-ups that came before that plan did: counted on arrival
        self.early_give_ups: dict[int, set[tuple[int, int]]] = {}

    @property
    def generation(self) -> int:
        """The newest generation this pod has seen for the job."""
        return max(self.plans, default=max(self.dropped_through, 0))

    def check_generation(self, generation: int) -> None:
        """Refuse a request for a dropped generation (or for a cancelled job)."""
        if self.cancelled:
            raise Refused(f"job {self.job_id} was cancelled", STALE)
        if generation <= self.dropped_through:
            raise Refused(f"job {self.job_id}: generation {generation} was dropped "
                          f"(generations up to {self.dropped_through} are)", STALE)

    def is_current(self, generation: int) -> bool:
        """Whether a plan of `generation` runs here (submitted, not dropped)."""
        return not self.cancelled and generation in self.plans

    def is_running(self, generation: int, ident: int) -> bool:
        """Whether the state still waits for instruction `ident`'s end (not abandoned meanwhile)."""
        plan = self.plans.get(generation)
        return not self.cancelled and plan is not None and ident in plan.running

    def running(self) -> list[int]:
        return sorted(i for plan in self.plans.values() for i in plan.running)

    def unservable(self, generation: int, buffer: int, patience_s: float) -> Refused:
        """Why a peer waited `patience_s` for `buffer` in vain: not ready yet (ask again), or
        nothing here will ever fill it (the asker must not wait on this node again)."""
        plan = self.plans.get(generation)
        if not self.is_current(generation) or plan is None or not plan.produces(buffer):
            return Refused(f"buffer {buffer}: no plan of generation {generation} on this node "
                           f"produces it (waited {patience_s:g} s)", STALE)
        if buffer in plan.doomed:
            return self.doomed(generation, buffer)
        return Refused(f"buffer {buffer} was not ready within {patience_s:g} s", FailureKind.NOT_READY)

    def doomed(self, generation: int, buffer: int) -> Refused | None:
        """The refusal for a peer asking for a buffer that will never be filled, else None."""
        plan = self.plans.get(generation)
        if plan is None or buffer not in plan.doomed:
            return None
        return Refused(f"buffer {buffer} of generation {generation} will not be filled here: an input "
                       "it needs was lost with a node", STALE)

    def handle(self, event: Event) -> list[Action]:
        if isinstance(event, PlanSubmitted):
            return self._submit(event)
        if isinstance(event, InstructionFinished):
            plan = self.plans.get(event.generation)
            if self.cancelled or plan is None:
                return []  # work of a dropped plan: its result is discarded
            return plan.finish(event.id, event.ok, event.message)
        if isinstance(event, TileServed):
            self.check_generation(event.generation)
            if not self.is_current(event.generation):
                if event.gave_up:  # the fetch failed before this node had the plan
                    self.early_give_ups.setdefault(event.generation, set()).add((event.buffer, event.node))
                    return []
                raise Refused(f"job {self.job_id}: no plan of generation {event.generation}", STALE)
            return self.plans[event.generation].serve_done(event.buffer, event.node)
        if isinstance(event, GenerationChanged):
            self.check_generation(event.generation)
            return self._drop_older(event.generation, f"generation {event.generation} replaces it")
        if isinstance(event, Cancelled):
            self.cancelled = True
            return self._drop_older(None, "the job was cancelled")
        raise TypeError(f"unknown event {event!r}")

    def _drop_older(self, generation: int | None, reason: str) -> list[Action]:
        """Drop every plan older than `generation` (None: every plan)."""
        old = sorted(g for g in self.plans if generation is None or g < generation)
        for g in old:
            del self.plans[g]
        if generation is not None:
            self.dropped_through = max(self.dropped_through, generation - 1)
        for g in [g for g in self.early_give_ups if generation is None or g < generation]:
            del self.early_give_ups[g]
        return [DropGeneration(g, reason) for g in old]

    def _submit(self, event: PlanSubmitted) -> list[Action]:
        raw = event.plan.plan if isinstance(event.plan, CheckedPlan) else event.plan
        generation = raw.generation
        self.check_generation(generation)
        if generation in self.plans:
            raise Refused(f"job {self.job_id}: a plan for generation {generation} was already submitted")
        checked = event.plan if isinstance(event.plan, CheckedPlan) else plan_check.validate_plan(raw)
        plan = PlanState(checked, event.leaf_writes)  # validated before anything changes
        actions: list[Action] = []
        if event.peers is not None:
            newly_lost = (self.peers - event.peers) - self.lost
            self.lost |= newly_lost
            self.peers = set(event.peers) - self.lost
            if newly_lost:
                for older in self.plans.values():
                    actions += older.peers_lost(newly_lost)
        self.plans[generation] = plan
        for buffer, node in sorted(self.early_give_ups.pop(generation, ())):
            if plan.produces(buffer):  # a peer that gave up before this plan came
                plan.served.setdefault(buffer, set()).add(node)
        if self.lost:  # a plan made before a loss it arrives after (submits may cross)
            actions += plan.peers_lost(set(self.lost))
        actions += plan.start_ready()
        plan.finish_check(actions)
        return actions


__all__ = [
    "Action", "BufferDoomed", "BufferServable", "Cancelled", "CheckedPlan", "DropGeneration", "Event",
    "FetchAbandoned", "FetchGivenUp", "FreeWaits", "GenerationChanged", "InstructionFinished", "PlanFinished",
    "PlanSubmitted", "PodState", "Refused", "StartInstruction", "TileServed",
]
