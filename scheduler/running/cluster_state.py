"""The scheduler's own state machine: what is stored, who is alive, when to re-plan or give up.

Pure (Dask's `handle_stimulus -> instructions` style): every method takes a stimulus (a pod's
heartbeat, a batch of its events, its `finished` report, a lost connection, the clock) and returns
the actions the asyncio shell must carry out (`Submit`, `Cancel`, `Failed`, `Succeeded`). No
sockets, no clocks of its own: `now` is always passed in, so tests drive it tick by tick.

Rules (docs/runtime.md states them for users):
- A unit is stored once every output of it has an acknowledged store event, from a live node,
  under the current generation. Events from dead nodes and older generations are ignored.
- A node that sends nothing (heartbeat, events, finished) for `heartbeat_timeout` seconds, or
  whose connection drops, is declared dead. Only ITS units not yet stored are re-planned, over the
  nodes left, under a new generation that runs beside the plans before it (the live nodes keep
  their running work), with their inputs loaded again from storage. The new plan's peer list tells
  the live nodes the node is lost: they stop waiting for its fetches of their tiles, and abandon
  their own fetches from it not yet done, with what depends on them (`abandoned_by`); each such
  fetch comes back as a failed fetch event, and the units it abandoned are re-planned at the next
  tick (one re-plan for the reports of every node).
  So at most the dead node's unstored units, and the units that needed a tile only it held, run
  again. Every re-plan is a `Replanned` action naming the units and where they came from.
- Instruction ids are unique within the job (each plan is numbered after the last), so a
  heartbeat's running ids and an event's id name one instruction whatever its generation.
- A dead node's crash is charged to the units it was computing: those of its last heartbeat's
  running computes not reported finished since, and those of its computes that were ready
  (every dependency reported finished, the compute itself not), which catches a unit that kills
  its node before any heartbeat saw it running (a pod starts a unit's first compute only after
  the scheduler took the events before it, so even a crash at once is seen as a ready compute).
  One crash per unit per death; a unit charged
  `max_attempts` times fails the job, naming the instruction and kernel.
- An instruction that fails on a live node (a bad leaf, a storage error) fails the job at once:
  such errors repeat wherever the unit runs. Except a failed fetch: the peer that could not serve
  the tile (it died, hung past the fetch timeout, or sent a corrupt tile) is declared dead, and the
  units the fetch abandoned are re-planned with the dead peer's, their regions loaded again from
  storage.
- No node left: the job fails. The job succeeds when every unit is stored and every live node
  has finished the current generation's plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from common.errors import UserError
from scheduler.planning.planner import NodeFigure, Plan
from scheduler.running.cluster_messages import (
    TRANSITIONS,
    Action,
    Cancel,
    EventInfo,
    Failed,
    InstructionInfo,
    NodeFailure,
    Replanned,
    Stimulus,
    Submit,
    Succeeded,
    describe_instructions,
)
from schemas.instructions import Fetch, Free, abandoned_by, used_buffers
from schemas.program import ClusterProgram, Unit
from schemas.remote_errors import FailureKind

# ---- the state ---------------------------------------------------------------------------------

Planner = Callable[[Sequence[NodeFigure], int, Sequence[Unit], int], Plan]


@dataclass
class ClusterState:
    program: ClusterProgram
    figures: dict[int, NodeFigure]
    planner: Planner  # (live figures, generation, units, first instruction id) -> Plan
    heartbeat_timeout: float = 5.0
    max_attempts: int = 3
    # A failed fetch blames the serving peer only if the fetching node is still alive this long
    # afterwards: a node being killed can see its own fetches break and report that just before
    # its connection drops, which must not condemn a healthy peer (seen in the kill matrix).
    fetch_blame_grace: float = 0.5

    generation: int = 0  # the newest plan's
    next_id: int = 0  # the first instruction id of the next plan
    live: set[int] = field(default_factory=set)
    failures: list[NodeFailure] = field(default_factory=list)
    plan: Plan | None = None  # the newest plan
    plans: dict[int, Plan] = field(default_factory=dict)  # generation -> plan (all run side by side)
    placement: dict[int, tuple[int, int]] = field(default_factory=dict)  # unit -> (node, generation)
    stored: set[int] = field(default_factory=set)  # unit indices fully stored
    outputs_stored: dict[tuple[int, int], int] = field(default_factory=dict)  # (unit, gen) -> stores
    outputs_per_unit: dict[int, int] = field(default_factory=dict)
    crashes: dict[int, int] = field(default_factory=dict)  # unit -> times its node died under it
    last_seen: dict[int, float] = field(default_factory=dict)
    running: dict[int, tuple[int, ...]] = field(default_factory=dict)  # node -> running ids
    done: dict[int, set[int]] = field(default_factory=dict)  # node -> ids reported finished (ok)
    finished_plans: set[tuple[int, int]] = field(default_factory=set)  # (node, generation) ran to the end
    abandoned: set[int] = field(default_factory=set)  # ids a pod dropped (a failed fetch's dependents)
    # unit -> node: abandoned on that live node because a fetch of it failed; re-planned at once
    # when the fetch's peer is already dead, else with the next death (the peer's once blamed)
    stranded: dict[int, int] = field(default_factory=dict)
    # some of them wait on a peer already dead: re-planned at the next tick, so that the reports of
    # every live node (one batch per node and generation) go out in one re-plan, not one each
    strand_due: bool = False
    instruction_info: dict[int, InstructionInfo] = field(default_factory=dict)
    fetch_peers: dict[int, int] = field(default_factory=dict)  # fetch id -> peer
    fetch_buffers: dict[int, int] = field(default_factory=dict)  # fetch id -> the peer's buffer
    # peer -> (since, fetching node, message, fetch id): a fetch from it failed; blamed after the
    # grace unless the tile it asked for will never be filled there (its own input was lost)
    fetch_suspects: dict[int, tuple[float, int, str, int]] = field(default_factory=dict)
    # node -> (since, message): its plan stopped at a failed instruction; the job fails after the
    # grace unless the node is declared dead meanwhile
    failed_plans: dict[int, tuple[float, str]] = field(default_factory=dict)
    replans: list[Replanned] = field(default_factory=list)
    charged_together: set[int] = field(default_factory=set)  # units charged by the deaths being handled
    outcome: Action | None = None
    # ("unit", u), ("node", n) or ("job",) -> what happened to it, as (what, *details): story()
    stories: dict[tuple, list[tuple]] = field(default_factory=dict)

    def __post_init__(self):
        self.live = set(self.figures)
        scratch = {t.name for t in self.program.tensors if t.role == "partial"}  # never stored
        self.outputs_per_unit.update(self.program.units.writes_per_unit(scratch))

    # ---- the entry point ----

    def handle(self, stimulus: Stimulus) -> list[Action]:
        """The actions `stimulus` calls for, decided by its row of TRANSITIONS."""
        rule = getattr(self, TRANSITIONS[type(stimulus)].rule)
        fields = {k: getattr(stimulus, k) for k in stimulus.__dataclass_fields__}
        return rule(**fields)

    def story(self, key: tuple) -> tuple[str, ...]:
        """What happened to a unit ("unit", u), a node ("node", n) or the job ("job",), in order."""
        return tuple(_STORY[what].format(*details) for what, *details in self.stories.get(key, ()))

    def death_of(self, node: int) -> str:
        """Why `node` was declared dead ("" while it is alive)."""
        return next((f.reason for f in reversed(self.failures) if f.node == node), "")

    def _tell(self, key: tuple, *entry) -> None:
        self.stories.setdefault(key, []).append(entry)

    # ---- stimuli ----

    def start(self, now: float) -> list[Action]:
        for node in self.live:
            self.last_seen[node] = now
        return self._plan(self.program.units)  # as they are: a compiled program's make no objects

    def heartbeat(self, node: int, generation: int, running: Sequence[int], now: float) -> list[Action]:
        if node not in self.live:
            return []
        self.last_seen[node] = now
        self.running[node] = tuple(running)  # ids are unique in the job: no generation needed
        return []

    def events(self, node: int, generation: int, events: Sequence[EventInfo], now: float) -> list[Action]:
        if node not in self.live:
            return []
        self.last_seen[node] = now
        if generation not in self.plans or self.outcome is not None:
            return []
        failed_fetches, from_lost = [], False
        for event in events:
            if not event.ok:
                peer = self.fetch_peers.get(event.id)
                info = self.instruction_info.get(event.id)
                if peer is None or peer == node or info is None or info.node != node:
                    return self._fail(f"node {node}: {self._name(event.id)} failed: {event.message}")
                failed_fetches.append(event.id)
                doomed = self._doomed_tile(event.id)  # not the peer's fault: its own input was lost
                if peer in self.live and not doomed:
                    self.fetch_suspects.setdefault(peer, (now, node, event.message, event.id))
                from_lost = from_lost or peer not in self.live or doomed
                continue
            if event.kind != "serve":  # a serve event's id is a buffer, not an instruction
                self.done.setdefault(node, set()).add(event.id)
            if event.kind == "store":
                self._stored(node, generation, event.id)
        if failed_fetches:
            self._strand(node, generation, failed_fetches)
            self.strand_due = self.strand_due or from_lost
        return self._check_done()

    def finished(self, node: int, generation: int, ok: bool, message: str, now: float) -> list[Action]:
        if node not in self.live or generation not in self.plans or self.outcome is not None:
            return []
        self.last_seen[node] = now
        if not ok:
            # Its node may be dying (its report racing its connection's end): decide once the
            # fetch-blame grace has passed.
            self.failed_plans.setdefault(node, (now, message))
            self._tell(("node", node), "plan_failed", generation, message)
            return []
        self.finished_plans.add((node, generation))
        self._tell(("node", node), "finished", generation)
        return self._check_done()

    def disconnected(self, node: int, reason: str, now: float) -> list[Action]:
        if node not in self.live or self.outcome is not None:
            return []
        return self._declare_dead([node], reason, now)

    def submit_failed(self, node: int, kind: FailureKind, message: str, now: float) -> list[Action]:
        if node not in self.live or self.outcome is not None:
            return []  # declared dead, or the job ended, while the submit was in flight
        if kind in (FailureKind.DISCONNECTED, FailureKind.TIMEOUT):
            return self._declare_dead([node], f"submit failed: {message}", now)
        return self._fail(f"node {node} refused its plan: {message}")

    def tick(self, now: float) -> list[Action]:
        if self.outcome is not None:
            return []
        late = sorted(n for n in self.live if now - self.last_seen.get(n, now) > self.heartbeat_timeout)
        if late:
            return self._declare_dead(late, f"no heartbeat for {self.heartbeat_timeout:g} s", now)
        if self.strand_due and self.stranded:
            nodes = ", ".join(str(n) for n in sorted(set(self.stranded.values())))
            return self._replan(dict(self.stranded), f"node {nodes} dropped work that needed a tile only "
                                "a lost node held", now)
        return self._blame_fetch_failures(now)

    def _blame_fetch_failures(self, now: float) -> list[Action]:
        """Declare dead a peer whose tile could not be fetched once the grace has passed with the
        fetching node still alive; forget the suspicion when either of the two died meanwhile."""
        for peer, (since, fetcher, message, fetch) in sorted(self.fetch_suspects.items()):
            if peer not in self.live or fetcher not in self.live:
                del self.fetch_suspects[peer]
            elif self._doomed_tile(fetch):  # the peer's report of its lost input came meanwhile
                del self.fetch_suspects[peer]
                self.strand_due = True
            elif now - since >= self.fetch_blame_grace:
                del self.fetch_suspects[peer]
                return self._declare_dead([peer], f"node {fetcher} could not fetch from it: {message}", now)
        for node, (since, message) in sorted(self.failed_plans.items()):
            if node not in self.live:
                del self.failed_plans[node]
            elif now - since >= 2 * self.fetch_blame_grace and not self.fetch_suspects:
                return self._fail(f"node {node}: {message}")
        return []

    def fail(self, reason: str) -> list[Action]:
        """Fail the job for a reason found outside the state machine (a pod refusing its plan)."""
        return self._fail(reason)

    def suspects(self, node: int) -> list[int]:
        """The instructions `node` was running as far as the scheduler knows, heartbeat first: its
        last heartbeat's running ids not reported finished since, then its computes that were
        ready (every dependency reported finished, the compute itself not). The pod starts an
        instruction as soon as its dependencies are done, so a ready compute was running (or
        about to) even if it started and crashed the node between two heartbeats."""
        done = self.done.get(node, set())
        skip = done | self.abandoned
        info = self.instruction_info
        heard = [i for i in self.running.get(node, ())
                 if i not in skip and i in info and info[i].node == node]
        ready = sorted(i for i, x in info.items()
                       if x.node == node and x.kind == "compute" and i not in skip
                       and all(d in done for d in x.deps))
        return heard + [i for i in ready if i not in heard]

    # ---- internals ----

    def _stored(self, node: int, generation: int, ins_id: int) -> None:
        """An acknowledged store: counts towards its unit where that unit is placed now."""
        info = self.instruction_info.get(ins_id)
        if info is None or info.unit is None or info.node != node or info.generation != generation:
            return
        if self.placement.get(info.unit) != (node, generation):
            return
        key = (info.unit, generation)
        self.outputs_stored[key] = self.outputs_stored.get(key, 0) + 1
        if self.outputs_stored[key] >= self.outputs_per_unit[info.unit]:
            self.stored.add(info.unit)
            self._tell(("unit", info.unit), "stored", node, generation)

    def _strand(self, node: int, generation: int, fetches: list[int]) -> None:
        """The pod dropped these fetches and what depends on them (the same `abandoned_by`):
        their units, where still placed there, wait for a re-plan."""
        dropped = abandoned_by(self.plans[generation].node_plans[node].instructions, fetches)
        self.abandoned |= dropped
        for ins_id in dropped:
            info = self.instruction_info[ins_id]
            # (a split unit's piece on another node than its root breaks the unit as well)
            if info.kind == "compute" and info.unit not in self.stored \
                    and self.placement.get(info.unit, (None, None))[1] == generation:
                self.stranded[info.unit] = node
                self._tell(("unit", info.unit), "stranded", node)

    def _doomed_tile(self, fetch: int) -> bool:
        """Whether the tile `fetch` asked for will never be filled on its peer: an instruction
        there that fills or reads it was dropped (a split reduction's merge whose own input was
        lost with a node). The peer refuses such a fetch at once; that is not its fault."""
        info = self.instruction_info.get(fetch)
        peer_plan = self.plans[info.generation].node_plans.get(self.fetch_peers.get(fetch)) if info else None
        if peer_plan is None:
            return False
        buffer = self.fetch_buffers[fetch]
        return any(ins.id in self.abandoned for ins in peer_plan.instructions
                   if not isinstance(ins, Free) and buffer in used_buffers(ins))

    def _declare_dead(self, nodes: list[int], reason: str, now: float) -> list[Action]:
        actions: list[Action] = []
        self.charged_together = set()
        for node in nodes:
            self.live.discard(node)
            self.failures.append(NodeFailure(node, now, reason))
            self._tell(("node", node), "dead", reason)
            actions.append(Cancel(node))
            charged = self._charge(node, reason)
            if charged:
                return actions + charged
        if not self.live:
            dead = ", ".join(f"node {f.node}: {f.reason}" for f in self.failures)
            return actions + self._fail(f"no node left to run the job ({dead})")
        moved = {u: n for u, (n, _) in self.placement.items() if n in nodes and u not in self.stored}
        moved.update(self.stranded)
        done = self._check_done()
        if done:  # everything is stored and the nodes left have finished: nothing to tell them
            return actions + done
        names = ", ".join(str(n) for n in nodes)
        return actions + self._replan(moved, f"node {names} died ({reason})", now)

    def _charge(self, node: int, reason: str) -> list[Action]:
        """One crash per unit per death, and only for a compute: a leaf is the unit's own code,
        while a load, fetch or store running when a node dies is the node's business (a cascade
        of machines dying must not add up against the units they were loading)."""
        culprits: dict[int, int] = {}
        for ins_id in self.suspects(node):
            info = self.instruction_info.get(ins_id)
            if info is None or info.kind != "compute" or info.unit in self.stored:
                continue
            culprits.setdefault(info.unit, ins_id)
        self.running.pop(node, None)
        self.charged_together |= culprits.keys()
        for unit, ins_id in sorted(culprits.items()):
            self.crashes[unit] = self.crashes.get(unit, 0) + 1
            self._tell(("unit", unit), "charged", node, self.crashes[unit], self.max_attempts)
            if self.crashes[unit] >= self.max_attempts:
                return self._fail(f"unit {unit} killed its node {self.crashes[unit]} times; the last "
                                  f"time node {node} was running {self._name(ins_id)} ({reason})")
        return []

    def _replan(self, moved: dict[int, int], cause: str, now: float) -> list[Action]:
        """Plan the units in `moved` (unit -> the node it leaves) over the live nodes, as a new
        generation beside the running ones. With no unit to move it still goes out (empty): its
        peer list is how the live nodes learn who was lost."""
        for unit in moved:
            self.stranded.pop(unit, None)
        self.strand_due = False
        # Units charged with the same death go first, so that they land on distinct nodes (one
        # each while there are nodes enough): a leaf that crashes again then charges itself, not
        # the innocent unit that happened to share a node with it (the planner deals units round
        # robin and keeps this order among units of equal work).
        every = self.program.units  # by index: only the moved units' objects are made (UnitColumns)
        chosen = [every[p] for p, index in enumerate(every.unit_index.tolist()) if index in moved]
        units = sorted(chosen, key=lambda u: u.index not in self.charged_together)
        self.charged_together = set()
        try:
            actions = self._plan(units)
        except UserError as err:  # e.g. the nodes left lack the memory
            return self._fail(f"re-planning after: {cause}: {err}")
        record = Replanned(self.generation, now, cause,
                           tuple((u, moved[u], self.plan.placement[u]) for u in sorted(moved)))
        self.replans.append(record)
        for unit, source, target in record.moved:
            self._tell(("unit", unit), "moved", source, target, cause)
        return [record, *actions]

    def _room(self, node: int) -> NodeFigure:
        """The node's figure for a new plan: its memory less the peaks of its plans still running
        (a re-plan runs beside them)."""
        figure = self.figures[node]
        if not figure.vram_bytes:
            return figure
        busy = sum(p.node_plans[node].peak_bytes for g, p in self.plans.items()
                   if node in p.node_plans and (node, g) not in self.finished_plans)
        return NodeFigure(node, max(1, figure.vram_bytes - busy))

    def _plan(self, units: Sequence[Unit]) -> list[Action]:
        self.generation += 1
        figures = [self._room(n) for n in sorted(self.live)]
        plan = _as_objects(self.planner(figures, self.generation, units, self.next_id))
        self.plan = plan
        self.plans[self.generation] = plan
        for node_plan in plan.node_plans.values():
            self.instruction_info.update(describe_instructions(node_plan))
            for ins in node_plan.instructions:
                self.next_id = max(self.next_id, ins.id + 1)
                if isinstance(ins, Fetch):
                    self.fetch_peers[ins.id] = ins.peer
                    self.fetch_buffers[ins.id] = ins.peer_buffer
        for unit, node in plan.placement.items():
            self.placement[unit] = (node, self.generation)
            self._tell(("unit", unit), "planned", node, self.generation)
        for node, node_plan in plan.node_plans.items():
            self._tell(("node", node), "plan", self.generation, len(node_plan.instructions))
        actions: list[Action] = [Submit(node, p) for node, p in sorted(plan.node_plans.items())]
        return actions + self._check_done()

    def _check_done(self) -> list[Action]:
        if self.outcome is not None or len(self.stored) < len(self.program.units):
            return []
        for generation, plan in self.plans.items():
            if any(n in self.live and (n, generation) not in self.finished_plans for n in plan.node_plans):
                return []
        self.outcome = Succeeded()
        self._tell(("job",), "succeeded")
        return [self.outcome]

    def _fail(self, reason: str) -> list[Action]:
        if self.outcome is not None:
            return []
        self.outcome = Failed(reason)
        self._tell(("job",), "failed", reason)
        return [self.outcome]

    def _name(self, ins_id: int) -> str:
        info = self.instruction_info.get(ins_id)
        if info is None:
            return f"instruction {ins_id}"
        what = f"{info.kind} {ins_id}"
        if info.leaf:
            what += f" (leaf {info.leaf} of kernel {self.program.kernel})"
        else:
            what += f" (kernel {self.program.kernel})"
        if info.unit is not None:
            what += f" of unit {info.unit}"
        return what


_STORY = {  # each story entry's words; its details fill the braces in order
    "planned": "planned on node {0} (generation {1})",
    "stored": "stored by node {0} (generation {1})",
    "moved": "re-planned from node {0} to node {1}: {2}",
    "stranded": "stranded on node {0}: a fetch it needed failed",
    "charged": "charged with the death of node {0} ({1} of {2})",
    "plan": "plan of generation {0}: {1} instructions",
    "finished": "ran its plan of generation {0} to the end",
    "plan_failed": "its plan of generation {0} stopped: {1}",
    "dead": "declared dead: {0}",
    "succeeded": "succeeded",
    "failed": "failed: {0}",
}


def _as_objects(plan: Plan) -> Plan:
    """The plan with each node's instructions decoded once (NodePlan.decoded): the scheduler
    reads a running plan many times (its bookkeeping, the messages to the pods, a failure's
    look-ups)."""
    return dataclasses.replace(plan, node_plans={node: p.decoded() for node, p in plan.node_plans.items()})
