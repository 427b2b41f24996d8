"""The pod's one pure state machine: `PodMachine.handle(stimulus) -> actions`, and `story(key)`.

Every decision the pod makes is here; the shells around it only do I/O and feed back what
happened: pod/rpc/server.py (the RPC interfaces, connections), pod/rpc/link.py (heartbeats and reports
to the scheduler), pod/rpc/peers.py (fetching tiles from other pods), pod/runtime.py (running
instructions, keeping buffers). No asyncio, no sockets, no clock: a stimulus carries the time
it happened at, so tests (tests/pod/test_machine.py) drive the whole pod by hand.

Two parts:
- **The scheduler link** (LINK_TABLE below, one row per state and stimulus): a pod is *alone*
  (no scheduler: nobody can re-plan its work behind its back, stores write freely), *leased*
  (stores write only within 3/4 of --scheduler-timeout of a heartbeat the scheduler took, so a
  pod paused past the scheduler's patience never writes a late tile), or *stopping*. The
  scheduler is gone when its connection drops, when it answers a heartbeat with declaredDead, or
  after two unanswered heartbeats with --scheduler-timeout of silence (one sent just before the
  process was frozen times out the moment it wakes, however alive the scheduler is). Gone means
  exit, or with --keep-serving: drop its jobs and be alone until the next hello.
- **The jobs** (JOB_TABLE below, one row per stimulus): one `pod.statemachine.state.PodState` each
  (dependency order, serving, frees, generations); plans arrive in parts (a huge plan travels in
  several submits) and are checked once here. A fetch whose owner answers notReady is asked again
  while its plan is current. A plan may arrive before the job's outputs have their staging copies
  (the scheduler creates them beside the plan's first loads): it starts at once, and its stores
  are held until the scheduler says the outputs are staged (OutputsStaged), then go to the lease
  as any store does. Loads, computes and fetches never wait for it.

`story(key)` tells what happened to a unit ("unit", job, unit), a tile ("tile", job,
generation, buffer), a job ("job", job), the scheduler connection ("connection", "scheduler")
or a peer ("connection", node: what its answers to this pod's fetches were): one line per step,
the newest STORY_LINES kept.
"""

from __future__ import annotations

import math
from collections import deque

from pod.statemachine import plan_check
from pod.statemachine import state as st
from pod.statemachine.machine_messages import (
    Action,
    CancelJob,
    FetchFailed,
    FetchVerdict,
    ForgetJob,
    HeartbeatAnswered,
    HeartbeatFailed,
    Hello,
    InstructionDone,
    LeaveScheduler,
    OnJob,
    OutputsStaged,
    PlanPart,
    PlanReady,
    Prepare,
    ReportServed,
    SchedulerLost,
    StartHeartbeats,
    Stimulus,
    Stop,
    StoreAsked,
    StoreVerdict,
    TileReleased,
)
from schemas.instructions import Compute, Instruction, NodePlan, Store
from schemas.remote_errors import FailureKind, Refused

STORY_LINES = 64
LEASE_SHARE = 0.75  # a store writes within this share of --scheduler-timeout of a taken heartbeat

# ---- the scheduler link's states and its transition table ---------------------------------------

ALONE, LEASED, STOPPING = "alone", "leased", "stopping"

# (state, stimulus) -> what happens. Pairs not listed leave the state as it is and do nothing
# (a heartbeat of an old session, anything once stopping). `handle` dispatches through this
# table; docs/architecture.md prints it.
LINK_TABLE: dict[tuple[str, type], tuple[str, str]] = {
    (ALONE, Hello): ("_hello", "leased: heartbeats start, the lease runs from now"),
    (LEASED, Hello): ("_hello", "leased to the new scheduler: heartbeats go to it"),
    (LEASED, HeartbeatAnswered): ("_renewed", "the lease runs from that heartbeat; held stores write"),
    (LEASED, HeartbeatFailed): ("_missed", "declaredDead or a dropped connection: gone; a timeout: gone "
                                           "at the second in a row past --scheduler-timeout"),
    (LEASED, SchedulerLost): ("_lost", "gone"),
    (ALONE, Stop): ("_stop", "stopping"),
    (LEASED, Stop): ("_stop", "stopping: held stores are refused"),
}

# A job's stimuli, in any link state -> what happens (docs/architecture.md prints it too).
JOB_TABLE: dict[type, tuple[str, str]] = {
    PlanPart: ("_plan_part", "parts joined; the last checks the plan: Prepare. Not `staged`: the "
                             "job's stores wait for OutputsStaged"),
    OutputsStaged: ("_outputs_staged", "the job's stores held for their staging copies go to the lease"),
    PlanReady: ("_plan_ready", "the plan joins the job's PodState: its first instructions start"),
    InstructionDone: ("_done", "the PodState goes on: what now may start, frees, PlanFinished"),
    TileReleased: ("_released", "ReportServed (none for a give-up); a Free waiting for that fetch may go on"),
    CancelJob: ("_cancel", "every plan of the job dropped; its held stores refused"),
    StoreAsked: ("_store_asked", "stopping: refused; its job's outputs not staged: held for them; "
                                 "else written under a live lease (or alone), or held for a heartbeat"),
    FetchFailed: ("_fetch_failed", "notReady of a current plan: ask again; else the fetch fails"),
}


class PodMachine:
    """Everything the pod decides, for all its jobs and its scheduler link."""

    def __init__(self, scheduler_timeout: float, keep_serving: bool = False):
        self.scheduler_timeout = scheduler_timeout
        self.keep_serving = keep_serving
        self.link = ALONE
        self.session = 0  # raised by every hello; heartbeats of older sessions are ignored
        self.node = 0
        self.lease_from: float | None = None
        self.last_ok = 0.0
        self.unanswered = 0  # heartbeats timed out in a row
        self.jobs: dict[str, st.PodState] = {}
        self.leaves: dict[str, dict[str, frozenset[str]]] = {}  # job -> leaf -> parameters
        self.parts: dict[tuple[str, int], tuple[object, tuple[Instruction, ...]]] = {}
        self.held: set[tuple[str, int, int]] = set()  # stores waiting for a lease
        self.unstaged: set[str] = set()  # jobs whose outputs have no staging copies yet
        self.staged: set[str] = set()  # jobs the scheduler said have them (the word may come first)
        self.unstaged_stores: set[tuple[str, int, int]] = set()  # stores waiting for staging copies
        self.stories: dict[tuple, deque[str]] = {}
        self.stopped = ""  # once stopping: why, the refusal of any store still asking

    # ---- the entry points ------------------------------------------------------------------------

    def handle(self, stimulus: Stimulus) -> list[Action]:
        row = LINK_TABLE.get((self.link, type(stimulus)))
        if row is not None:
            return getattr(self, row[0])(stimulus)
        job_row = JOB_TABLE.get(type(stimulus))
        if job_row is None:
            return []  # no row: nothing changes (a stale heartbeat, a hello while stopping)
        return getattr(self, job_row[0])(stimulus)

    def story(self, key: tuple) -> tuple[str, ...]:
        return tuple(self.stories.get(key, ()))

    def job(self, job_id: str) -> st.PodState:
        state = self.jobs.get(job_id)
        if state is None:
            state = self.jobs[job_id] = st.PodState(job_id)
        return state

    def heartbeating(self, session: int) -> bool:
        return self.link == LEASED and session == self.session

    def has_parts(self, job: str, generation: int) -> bool:
        return (job, generation) in self.parts

    def running(self) -> tuple[int, list[int]]:
        """(highest current generation, running instruction ids): what a heartbeat says."""
        generation, running = 0, []
        for state in self.jobs.values():
            generation = max(generation, state.generation)
            running += state.running()
        return generation, running

    def _tell(self, key: tuple, line: str) -> None:
        story = self.stories.get(key)
        if story is None:
            story = self.stories[key] = deque(maxlen=STORY_LINES)
        story.append(line)

    # ---- the scheduler link ----------------------------------------------------------------------

    def _hello(self, s: Hello) -> list[Action]:
        self.link, self.node = LEASED, s.node
        self.session += 1
        self.lease_from = self.last_ok = s.now
        self.unanswered = 0
        self._tell(("connection", "scheduler"), f"hello as node {s.node} (session {self.session})")
        return [StartHeartbeats(self.session)] + self._release_held(s.now)

    def _renewed(self, s: HeartbeatAnswered) -> list[Action]:
        if s.session != self.session:
            return []
        self.lease_from = self.last_ok = s.sent
        self.unanswered = 0
        return self._release_held(s.now)

    def _missed(self, s: HeartbeatFailed) -> list[Action]:
        if s.session != self.session:
            return []
        if s.kind is FailureKind.DECLARED_DEAD:
            # Too late (paused, or cut off): the scheduler has re-planned this pod's work. Nothing
            # it still holds may be written or served.
            return self._leave("the scheduler declared this pod dead", s.reason,
                               f"the scheduler declared this pod dead ({s.reason})")
        self.unanswered += s.kind is FailureKind.TIMEOUT
        gone = s.now - self.last_ok > self.scheduler_timeout and self.unanswered >= 2
        if s.kind is FailureKind.DISCONNECTED or gone:
            return self._leave("scheduler unreachable", s.reason, "the scheduler is gone")
        self._tell(("connection", "scheduler"), f"heartbeat failed ({s.kind.value}: {s.reason})")
        return []

    def _lost(self, s: SchedulerLost) -> list[Action]:
        return self._leave("scheduler connection dropped", s.reason, "the scheduler is gone")

    def _stop(self, s: Stop) -> list[Action]:
        self.link, self.stopped = STOPPING, "the pod is stopping"
        self._tell(("connection", "scheduler"), f"stopping: {s.reason}")
        return self._refuse_held(self.stopped)

    def _leave(self, why: str, reason: str, refusal: str) -> list[Action]:
        """The scheduler is gone: its jobs are dropped (nothing of them may be written or served
        after this), then the pod exits or, with --keep-serving, waits alone for the next one."""
        self._tell(("connection", "scheduler"), f"{why}: {reason}")
        actions = self._refuse_held(refusal)
        for job_id in list(self.jobs):
            actions += self._cancel(CancelJob(job_id))
            actions.append(ForgetJob(job_id))
        self.jobs.clear()
        self.leaves.clear()
        self.parts.clear()
        self.staged.clear()
        self.unstaged.clear()
        self.link = ALONE if self.keep_serving else STOPPING
        self.stopped = "" if self.keep_serving else refusal
        self.lease_from = None
        return actions + [LeaveScheduler(why, reason, exit=not self.keep_serving)]

    # ---- stores under the lease ------------------------------------------------------------------

    def _store_asked(self, s: StoreAsked) -> list[Action]:
        key = (s.job, s.generation, s.id)
        if s.job in self.unstaged and self.link != STOPPING:
            self.unstaged_stores.add(key)
            self._tell(("job", s.job), f"store {s.id} waits for the job's outputs to be staged")
            return []
        return self._under_lease(key, s.now)

    def _under_lease(self, key: tuple[str, int, int], now: float | None) -> list[Action]:
        """Write now or hold for a heartbeat; `now` None (a submit carries no clock): hold."""
        if self.link == STOPPING:
            return [StoreVerdict(*key, self.stopped)]
        if self.link == ALONE or (now is not None and self._lease_live(now)):
            return [StoreVerdict(*key, None)]
        self.held.add(key)
        self._tell(("job", key[0]), f"store {key[2]} waits for a heartbeat the scheduler takes")
        return []

    def _lease_live(self, now: float) -> bool:
        return self.lease_from is not None and now - self.lease_from < self.scheduler_timeout * LEASE_SHARE

    def lease_until(self) -> float:
        """Until when (monotonic) a store granted its verdict now may start writing: the end of
        the live lease (the check `_lease_live` makes), never while alone, at once otherwise.
        A CPU pod's store that waited in its lane (pod/storage/lanes.py) past it asks again."""
        if self.link == ALONE:
            return math.inf
        if self.link == STOPPING or self.lease_from is None:
            return -math.inf
        return self.lease_from + self.scheduler_timeout * LEASE_SHARE

    def _release_held(self, now: float) -> list[Action]:
        if not self.held or not self._lease_live(now):
            return []
        held, self.held = sorted(self.held), set()
        return [StoreVerdict(*key, None) for key in held]

    def _refuse_held(self, refusal: str, job: str | None = None) -> list[Action]:
        """Refuse the held stores (of `job` only, when given), whatever they wait for."""
        held = sorted(k for k in self.held | self.unstaged_stores if job is None or k[0] == job)
        self.held.difference_update(held)
        self.unstaged_stores.difference_update(held)
        return [StoreVerdict(*key, refusal) for key in held]

    # ---- stores wait for their job's staging copies ------------------------------------------------

    def _outputs_staged(self, s: OutputsStaged) -> list[Action]:
        return self._staged_now(s.job, s.now)

    def _staged_now(self, job: str, now: float | None) -> list[Action]:
        """The job's outputs are staged (for good): its held stores go on to the lease."""
        if job in self.staged:
            return []
        self.staged.add(job)
        if job not in self.unstaged:
            return []  # no plan of it said otherwise (or the word overtook the submit it follows)
        self.unstaged.discard(job)
        waiting = sorted(k for k in self.unstaged_stores if k[0] == job)
        self.unstaged_stores.difference_update(waiting)
        self._tell(("job", job), f"outputs staged: {len(waiting)} held stores go on")
        return [verdict for key in waiting for verdict in self._under_lease(key, now)]

    # ---- jobs --------------------------------------------------------------------------------------

    def _plan_part(self, s: PlanPart) -> list[Action]:
        if s.plan.generation != s.generation:
            raise Refused(f"submit: plan generation {s.plan.generation} differs from {s.generation}")
        state = self.job(s.job)
        key = (s.job, s.generation)
        program, earlier = self.parts.pop(key, (s.program, ()))
        instructions = earlier + tuple(s.plan.instructions)  # a planner's table, in-process
        state.check_generation(s.generation)
        if s.more:
            self.parts[key] = (program, instructions)
            return []
        plan = NodePlan(node=s.plan.node, generation=s.generation, peak_bytes=s.plan.peak_bytes,
                        instructions=instructions, uris=s.plan.uris)
        checked = plan_check.validate_plan(plan)
        plan_check.check_leaves(plan, self.leaves.get(s.job) or _leaves_of(program))
        self._tell(("job", s.job), f"plan of generation {s.generation} accepted: "
                                   f"{len(instructions)} instructions")
        prepare: list[Action] = [Prepare(s.job, program, checked, s.peers)]
        if s.staged:
            return prepare + self._staged_now(s.job, None)
        if s.job not in self.staged:
            self.unstaged.add(s.job)
            self._tell(("job", s.job), "its outputs are not staged yet: its stores will wait for them")
        return prepare

    def _plan_ready(self, s: PlanReady) -> list[Action]:
        self.leaves.setdefault(s.job, _leaves_of(s.program))  # the job's first program stays its own
        return self._on_job(s.job, self.job(s.job).handle(st.PlanSubmitted(s.checked, s.writes, s.peers)))

    def _done(self, s: InstructionDone) -> list[Action]:
        state = self.jobs.get(s.job)
        if state is None or not state.is_current(s.generation):
            return []  # work of a dropped plan: its result is discarded
        ins = state.plans[s.generation].by_id.get(s.id)
        if ins is not None and isinstance(ins, Compute | Store):
            outcome = "done" if s.ok else f"failed: {s.message}"
            self._tell(("unit", s.job, ins.unit), f"{_name(ins)} (generation {s.generation}) {outcome}")
        return self._on_job(s.job, state.handle(st.InstructionFinished(s.generation, s.id, s.ok, s.message)))

    def _released(self, s: TileReleased) -> list[Action]:
        actions = self.job(s.job).handle(st.TileServed(s.generation, s.buffer, s.node, s.gave_up))
        if s.gave_up:  # nothing was served: no serve event
            self._tell(("tile", s.job, s.generation, s.buffer), f"node {s.node} gave up fetching it")
            return self._on_job(s.job, actions)
        self._tell(("tile", s.job, s.generation, s.buffer), f"served to node {s.node}")
        report = ReportServed(s.job, s.generation, s.buffer, s.node, s.nbytes, s.at)
        return [report] + self._on_job(s.job, actions)

    def _cancel(self, s: CancelJob) -> list[Action]:
        if s.job not in self.jobs:
            return []
        for key in [k for k in self.parts if k[0] == s.job]:
            del self.parts[key]
        self._tell(("job", s.job), "cancelled")
        self.unstaged.discard(s.job)
        self.staged.discard(s.job)  # a cancelled job's submits are refused from now on
        refused = self._refuse_held("the job was cancelled", s.job)
        return refused + self._on_job(s.job, self.jobs[s.job].handle(st.Cancelled()))

    def _fetch_failed(self, s: FetchFailed) -> list[Action]:
        state = self.jobs.get(s.job)
        again = s.kind is FailureKind.NOT_READY and state is not None and state.is_current(s.generation)
        line = f"fetch {s.id} from node {s.peer}: {s.kind.value}{', asking again' if again else ''}"
        self._tell(("job", s.job), line)
        self._tell(("connection", s.peer), f"job {s.job}: {line} ({s.message})")
        return [FetchVerdict(s.job, s.id, again)]

    def _on_job(self, job: str, actions: list[st.Action]) -> list[Action]:
        out: list[Action] = []
        for action in actions:
            if isinstance(action, st.StartInstruction):
                ins = action.instruction
                if isinstance(ins, Compute | Store):
                    self._tell(("unit", job, ins.unit),
                               f"{_name(ins)} (generation {action.generation}) started")
            elif isinstance(action, st.BufferServable):
                self._tell(("tile", job, action.generation, action.buffer), "filled: servable to peers")
            elif isinstance(action, st.DropGeneration):
                self._tell(("job", job), f"generation {action.generation} dropped: {action.reason}")
            elif isinstance(action, st.FetchAbandoned):
                self._tell(("job", job), f"fetch {action.instruction.id} (generation {action.generation}) "
                                         f"abandoned: {action.reason}")
            elif isinstance(action, st.PlanFinished):
                self._tell(("job", job), f"plan of generation {action.generation} "
                                         f"{'finished' if action.ok else 'failed: ' + action.message}")
            out.append(OnJob(job, action))
        return out


def _leaves_of(program) -> dict[str, frozenset[str]]:
    return {leaf.name: frozenset(leaf.tensors) for leaf in program.leaves}


def _name(ins: Instruction) -> str:
    if isinstance(ins, Compute):
        return f"compute {ins.leaf} (instruction {ins.id})"
    return f"store (instruction {ins.id})"
