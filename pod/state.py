"""The pod's pure state machine for one job: which instruction may start, when a buffer may be
served to peers or freed, which generation is current.

No I/O here: the pod's machine (pod/machine.py) keeps one PodState per job and routes the job's
stimuli to `PodState.handle(event)`; the shells carry out the actions. Tested without sockets.

Rules
- An instruction starts once every dep has completed. A Free additionally waits until peers have
  released (finished fetching) its buffer `serves` times: a peer's fetch is not a local
  instruction, so the count is the owner's only way to know.
- A buffer is servable to peers once every instruction that fills it has completed: its Allocate,
  Load or Fetch, and each Compute binding it to a parameter the leaf writes (`leaf_writes`; a leaf
  missing from it counts every binding as a write, which is safe but may serve later).
- Generations: a plan or a peer request of an older generation than the job's current one is
  refused; a newer generation drops the current plan (its running work finishes, but the results
  are discarded and nothing more of it starts).
- The first failed instruction stops the plan: nothing more starts, the buffers stay servable
  until the job is cancelled or re-planned, and the scheduler is told.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from schemas.instructions import Allocate, Compute, Fetch, Free, Instruction, Load, NodePlan, Store, kind_of
from schemas.remote_errors import FailureKind, Refused

BAD_PLAN, STALE = FailureKind.BAD_PLAN, FailureKind.STALE_GENERATION


@dataclass(frozen=True)
class CheckedPlan:
    """A plan `validate_plan` accepted: the type says it needs no second look."""

    plan: NodePlan


# ---- events (stimuli) -------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanSubmitted:
    plan: NodePlan | CheckedPlan  # a NodePlan is validated here, a CheckedPlan was already
    leaf_writes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class InstructionFinished:
    generation: int
    id: int
    ok: bool = True
    message: str = ""


@dataclass(frozen=True)
class TileServed:
    """A peer finished fetching `buffer` (its `release` call)."""

    generation: int
    buffer: int
    node: int


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


Action = StartInstruction | BufferServable | DropGeneration | PlanFinished


# ---- one plan ------------------------------------------------------------------------------------


def _written_buffers(ins: Instruction, leaf_writes: Mapping[str, tuple[str, ...]]) -> tuple[int, ...]:
    if isinstance(ins, Allocate | Load | Fetch):
        return (ins.buffer,)
    if isinstance(ins, Compute):
        writes = leaf_writes.get(ins.leaf)
        return tuple(buf for param, buf in ins.bindings if writes is None or param in writes)
    return ()


def _used_buffers(ins: Instruction) -> tuple[int, ...]:
    if isinstance(ins, Compute):
        return tuple(buf for _, buf in ins.bindings)
    return (ins.buffer,)


def validate_plan(plan: NodePlan) -> CheckedPlan:
    """Refuse a plan that breaks the schema's invariants: duplicate ids, deps naming unknown ids,
    a dependency cycle, a buffer allocated or freed twice, a buffer used without an Allocate, a
    load or store naming a tensor the plan has no URI for."""
    ids: set[int] = set()
    for ins in plan.instructions:
        if ins.id in ids:
            raise Refused(f"plan for node {plan.node}: instruction id {ins.id} appears twice", BAD_PLAN)
        ids.add(ins.id)
        if isinstance(ins, Load | Store) and not 0 <= ins.tensor < len(plan.uris):
            raise Refused(f"plan for node {plan.node}: instruction {ins.id} ({kind_of(ins)}) names tensor "
                          f"{ins.tensor}, but the plan states {len(plan.uris)} URIs", BAD_PLAN)
    _check_buffers(plan, ids)
    _check_acyclic(plan, ids)
    return CheckedPlan(plan)


def _check_buffers(plan: NodePlan, ids: set[int]) -> None:
    allocated: set[int] = set()
    freed: set[int] = set()
    for ins in plan.instructions:
        for dep in ins.deps:
            if dep not in ids:
                raise Refused(f"plan for node {plan.node}: instruction {ins.id} depends on unknown id {dep}",
                              BAD_PLAN)
        if isinstance(ins, Allocate):
            if ins.buffer in allocated:
                raise Refused(f"plan for node {plan.node}: buffer {ins.buffer} is allocated twice", BAD_PLAN)
            allocated.add(ins.buffer)
        elif isinstance(ins, Free):
            if ins.buffer in freed:
                raise Refused(f"plan for node {plan.node}: buffer {ins.buffer} is freed twice", BAD_PLAN)
            freed.add(ins.buffer)
    for ins in plan.instructions:
        for buf in _used_buffers(ins):
            if buf not in allocated:
                raise Refused(f"plan for node {plan.node}: instruction {ins.id} ({kind_of(ins)}) uses "
                              f"buffer {buf}, which no Allocate creates", BAD_PLAN)


def _check_acyclic(plan: NodePlan, ids: set[int]) -> None:
    # Kahn's algorithm: every instruction must be reachable in dependency order.
    indegree = {ins.id: len(set(ins.deps)) for ins in plan.instructions}
    dependents: dict[int, list[int]] = {i: [] for i in ids}
    for ins in plan.instructions:
        for dep in set(ins.deps):
            dependents[dep].append(ins.id)
    ready = [i for i, n in indegree.items() if n == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in dependents[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                ready.append(j)
    if seen != len(ids):
        raise Refused(f"plan for node {plan.node}: the dependencies form a cycle", BAD_PLAN)


class PlanState:
    """Progress of one plan: pending dep counts, running and done sets, buffer readiness."""

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
        self.served: dict[int, int] = {}  # buffer -> peer releases so far
        self.waiting_frees: set[int] = set()  # Free ids whose deps are done, waiting for serves
        self.running: set[int] = set()
        self.done: set[int] = set()
        self.failed: str | None = None
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

    @property
    def finished(self) -> bool:
        return len(self.done) == len(self.by_id)

    def servable(self, buffer: int) -> bool:
        return self.producers_left.get(buffer, 1) == 0

    def produces(self, buffer: int) -> bool:
        """Whether some instruction of this plan fills `buffer` (servable once they are done)."""
        return buffer in self.producers_left

    def _may_start(self, ins: Instruction) -> bool:
        if isinstance(ins, Free) and ins.serves:
            return self.served.get(ins.buffer, 0) >= ins.serves
        return True

    def _start(self, ids: list[int], actions: list[Action]) -> None:
        for i in ids:
            ins = self.by_id[i]
            if self._may_start(ins):
                self.running.add(i)
                actions.append(StartInstruction(self.generation, ins))
            else:
                self.waiting_frees.add(i)

    def start_ready(self) -> list[Action]:
        actions: list[Action] = []
        self._start([i for i, n in self.missing_deps.items() if n == 0], actions)
        return actions

    def finish(self, ident: int, ok: bool, message: str) -> list[Action]:
        if ident not in self.running:
            return []  # unknown or repeated report: nothing to do
        self.running.discard(ident)
        actions: list[Action] = []
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
        if self.failed is None:
            newly_ready = []
            for j in self.dependents[ident]:
                self.missing_deps[j] -= 1
                if self.missing_deps[j] == 0:
                    newly_ready.append(j)
            self._start(newly_ready, actions)
            if self.finished:
                actions.append(PlanFinished(self.generation, True))
        return actions

    def serve_done(self, buffer: int) -> list[Action]:
        if buffer not in self.producers_left:
            raise Refused(f"buffer {buffer} is not in the plan of generation {self.generation}")
        self.served[buffer] = self.served.get(buffer, 0) + 1
        free = self.free_of.get(buffer)
        actions: list[Action] = []
        waiting = free is not None and free.id in self.waiting_frees
        if self.failed is None and waiting and self._may_start(free):
            self.waiting_frees.discard(free.id)
            self._start([free.id], actions)
        return actions


def _describe(ins: Instruction) -> str:
    if isinstance(ins, Compute):
        return f"compute leaf {ins.leaf}, unit {ins.unit}"
    if isinstance(ins, Load | Store):
        return f"{kind_of(ins)} of {ins.region.tensor}"
    if isinstance(ins, Fetch):
        return f"fetch buffer {ins.peer_buffer} from node {ins.peer}"
    return f"{kind_of(ins)} buffer {ins.buffer}"


def check_leaves(plan: NodePlan, leaves: Mapping[str, frozenset[str]]) -> None:
    """Refuse a plan whose computes name a leaf (or a leaf's parameter) the program lacks."""
    for ins in plan.instructions:
        if not isinstance(ins, Compute):
            continue
        if ins.leaf not in leaves:
            raise Refused(f"instruction {ins.id}: no leaf {ins.leaf!r} in the program "
                          f"(it has: {', '.join(sorted(leaves)) or 'none'})", BAD_PLAN)
        for param, _ in ins.bindings:
            if param not in leaves[ins.leaf]:
                raise Refused(f"instruction {ins.id}: leaf {ins.leaf} has no tensor parameter {param!r}",
                              BAD_PLAN)


# ---- one job --------------------------------------------------------------------------------------


class PodState:
    """One job on this pod: its current generation and the plan running under it."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.generation = 0
        self.plan: PlanState | None = None
        self.cancelled = False

    def check_generation(self, generation: int) -> None:
        """Refuse a request from an older generation (or for a cancelled job)."""
        if self.cancelled:
            raise Refused(f"job {self.job_id} was cancelled", STALE)
        if generation < self.generation:
            raise Refused(f"job {self.job_id}: generation {generation} is older than {self.generation}",
                          STALE)

    def is_current(self, generation: int) -> bool:
        return not self.cancelled and generation == self.generation and self.plan is not None

    def running(self) -> list[int]:
        return sorted(self.plan.running) if self.plan else []

    def unservable(self, generation: int, buffer: int, patience_s: float) -> Refused:
        """Why a peer waited `patience_s` for `buffer` in vain: not ready yet (ask again), or
        nothing here will ever fill it (the asker must not wait on this node again)."""
        if not self.is_current(generation) or not self.plan.produces(buffer):
            return Refused(f"buffer {buffer}: no plan of generation {generation} on this node "
                           f"produces it (waited {patience_s:g} s)", STALE)
        return Refused(f"buffer {buffer} was not ready within {patience_s:g} s", FailureKind.NOT_READY)

    def handle(self, event: Event) -> list[Action]:
        if isinstance(event, PlanSubmitted):
            return self._submit(event)
        if isinstance(event, InstructionFinished):
            if not self.is_current(event.generation):
                return []  # work of a dropped plan: its result is discarded
            return self.plan.finish(event.id, event.ok, event.message)
        if isinstance(event, TileServed):
            self.check_generation(event.generation)
            if not self.is_current(event.generation):
                raise Refused(f"job {self.job_id}: no plan of generation {event.generation}", STALE)
            return self.plan.serve_done(event.buffer)
        if isinstance(event, GenerationChanged):
            self.check_generation(event.generation)
            return self._advance(event.generation, f"generation {event.generation} replaces it")
        if isinstance(event, Cancelled):
            self.cancelled = True
            return self._drop("the job was cancelled")
        raise TypeError(f"unknown event {event!r}")

    def _drop(self, reason: str) -> list[Action]:
        if self.plan is None:
            return []
        old, self.plan = self.plan, None
        return [DropGeneration(old.generation, reason)]

    def _advance(self, generation: int, reason: str) -> list[Action]:
        actions: list[Action] = []
        if generation > self.generation:
            actions = self._drop(reason)
            self.generation = generation
        return actions

    def _submit(self, event: PlanSubmitted) -> list[Action]:
        raw = event.plan.plan if isinstance(event.plan, CheckedPlan) else event.plan
        generation = raw.generation
        self.check_generation(generation)
        if generation == self.generation and self.plan is not None:
            raise Refused(f"job {self.job_id}: a plan for generation {generation} was already submitted")
        checked = event.plan if isinstance(event.plan, CheckedPlan) else validate_plan(raw)
        plan = PlanState(checked, event.leaf_writes)  # validated before anything changes
        actions = self._advance(generation, f"generation {generation} replaces it")
        self.plan = plan
        actions += plan.start_ready()
        if plan.finished:
            actions.append(PlanFinished(generation, True))
        return actions


__all__ = [
    "Action", "BufferServable", "Cancelled", "CheckedPlan", "DropGeneration", "Event", "GenerationChanged",
    "InstructionFinished", "PlanFinished", "PlanSubmitted", "PodState", "Refused", "StartInstruction",
    "TileServed", "check_leaves", "validate_plan",
]
