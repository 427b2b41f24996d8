"""The scheduler's own state machine: what is stored, who is alive, when to re-plan or give up.

Pure (Dask's `handle_stimulus -> instructions` style): every method takes a stimulus (a pod's
heartbeat, a batch of its events, its `finished` report, a lost connection, the clock) and returns
the actions the asyncio shell must carry out (`Submit`, `Cancel`, `Failed`, `Succeeded`). No
sockets, no clocks of its own: `now` is always passed in, so tests drive it tick by tick.

Rules (docs/runtime.md states them for users):
- A unit is stored once every output of it has an acknowledged store event, from a live node,
  under the current generation. Events from dead nodes and older generations are ignored.
- A node that sends nothing (heartbeat, events, finished) for `heartbeat_timeout` seconds, or
  whose connection drops, is declared dead. Every unit not yet stored is then re-planned over the
  nodes left, under a new generation, with its inputs loaded again from storage.
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
  re-plan loads the region again from storage.
- No node left: the job fails. The job succeeds when every unit is stored and every live node
  has finished the current generation's plan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from common.errors import UserError
from scheduler.planner import NodeFigure, Plan
from schemas.instructions import Compute, Fetch, NodePlan, Store, kind_of
from schemas.program import ClusterProgram, Unit

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


Action = Submit | Cancel | Failed | Succeeded


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
                out[w.id] = InstructionInfo(kind_of(w), unit, None, plan.node, w.deps)
            waiting.clear()
            last_unit = unit
        out[ins.id] = InstructionInfo(kind_of(ins), unit if unit is not None else last_unit, leaf, plan.node,
                                      ins.deps)
    for w in waiting:
        out[w.id] = InstructionInfo(kind_of(w), last_unit, None, plan.node, w.deps)
    return out


# ---- the state ---------------------------------------------------------------------------------

Planner = Callable[[Sequence[NodeFigure], int, Sequence[Unit]], Plan]


@dataclass
class ClusterState:
    program: ClusterProgram
    figures: dict[int, NodeFigure]
    planner: Planner  # (live figures, generation, units) -> Plan
    heartbeat_timeout: float = 5.0
    max_attempts: int = 3
    # A failed fetch blames the serving peer only if the fetching node is still alive this long
    # afterwards: a node being killed can see its own fetches break and report that just before
    # its connection drops, which must not condemn a healthy peer (seen in the kill matrix).
    fetch_blame_grace: float = 0.5

    generation: int = 0
    live: set[int] = field(default_factory=set)
    failures: list[NodeFailure] = field(default_factory=list)
    plan: Plan | None = None
    plans: dict[int, Plan] = field(default_factory=dict)  # generation -> plan
    stored: set[int] = field(default_factory=set)  # unit indices fully stored
    outputs_stored: dict[int, int] = field(default_factory=dict)  # unit -> acknowledged stores
    outputs_per_unit: dict[int, int] = field(default_factory=dict)
    crashes: dict[int, int] = field(default_factory=dict)  # unit -> times its node died under it
    last_seen: dict[int, float] = field(default_factory=dict)
    running: dict[int, tuple[int, ...]] = field(default_factory=dict)  # node -> running ids
    done: dict[int, set[int]] = field(default_factory=dict)  # node -> ids reported finished (ok)
    finished_nodes: set[int] = field(default_factory=set)
    instruction_info: dict[int, InstructionInfo] = field(default_factory=dict)
    fetch_peers: dict[tuple[int, int], int] = field(default_factory=dict)  # (node, fetch id) -> peer
    # peer -> (since, fetching node, message): a fetch from it failed; blamed after the grace
    fetch_suspects: dict[int, tuple[float, int, str]] = field(default_factory=dict)
    # node -> (since, generation, message): its plan failed; the job fails after the grace unless a
    # re-plan (a peer blamed for a failed fetch) replaced that generation meanwhile
    failed_plans: dict[int, tuple[float, int, str]] = field(default_factory=dict)
    outcome: Action | None = None

    def __post_init__(self):
        self.live = set(self.figures)
        scratch = {t.name for t in self.program.tensors if t.role == "partial"}  # never stored
        for unit in self.program.units:
            written = {r for launch in unit.launches for _, r in launch.writes if r.tensor not in scratch}
            self.outputs_per_unit[unit.index] = len(written)

    # ---- stimuli ----

    def start(self, now: float) -> list[Action]:
        for node in self.live:
            self.last_seen[node] = now
        return self._plan(list(self.program.units))

    def heartbeat(self, node: int, generation: int, running: Sequence[int], now: float) -> list[Action]:
        if node not in self.live:
            return []
        self.last_seen[node] = now
        if generation == self.generation:
            self.running[node] = tuple(running)
        return []

    def events(self, node: int, generation: int, events: Sequence[EventInfo], now: float) -> list[Action]:
        if node not in self.live:
            return []
        self.last_seen[node] = now
        if generation != self.generation or self.outcome is not None:
            return []
        for event in events:
            if not event.ok:
                peer = self.fetch_peers.get((node, event.id))
                if peer is not None and peer != node:
                    if peer in self.live:
                        self.fetch_suspects.setdefault(peer, (now, node, event.message))
                    continue  # a peer already dead: its death re-planned this work
                return self._fail(f"node {node}: {self._name(event.id)} failed: {event.message}")
            if event.kind != "serve":  # a serve event's id is a buffer, not an instruction
                self.done.setdefault(node, set()).add(event.id)
            if event.kind == "store":
                info = self.instruction_info.get(event.id)
                if info is None or info.unit is None or info.node != node:
                    continue
                self.outputs_stored[info.unit] = self.outputs_stored.get(info.unit, 0) + 1
                if self.outputs_stored[info.unit] >= self.outputs_per_unit[info.unit]:
                    self.stored.add(info.unit)
        return self._check_done()

    def finished(self, node: int, generation: int, ok: bool, message: str, now: float) -> list[Action]:
        if node not in self.live or generation != self.generation or self.outcome is not None:
            return []
        self.last_seen[node] = now
        if not ok:
            # Its event report (e.g. a fetch that failed on a peer) may still be on its way and
            # the failure may be the peer's: decide once the fetch-blame grace has passed.
            self.failed_plans.setdefault(node, (now, generation, message))
            return []
        self.finished_nodes.add(node)
        return self._check_done()

    def disconnected(self, node: int, reason: str, now: float) -> list[Action]:
        if node not in self.live or self.outcome is not None:
            return []
        return self._declare_dead([node], reason, now)

    def tick(self, now: float) -> list[Action]:
        if self.outcome is not None:
            return []
        late = sorted(n for n in self.live if now - self.last_seen.get(n, now) > self.heartbeat_timeout)
        if late:
            return self._declare_dead(late, f"no heartbeat for {self.heartbeat_timeout:g} s", now)
        return self._blame_fetch_failures(now)

    def _blame_fetch_failures(self, now: float) -> list[Action]:
        """Declare dead a peer whose tile could not be fetched once the grace has passed with the
        fetching node still alive; forget the suspicion when either of the two died meanwhile."""
        for peer, (since, fetcher, message) in sorted(self.fetch_suspects.items()):
            if peer not in self.live or fetcher not in self.live:
                del self.fetch_suspects[peer]
            elif now - since >= self.fetch_blame_grace:
                del self.fetch_suspects[peer]
                return self._declare_dead([peer], f"node {fetcher} could not fetch from it: {message}", now)
        for node, (since, generation, message) in sorted(self.failed_plans.items()):
            if node not in self.live or generation != self.generation:
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
        heard = [i for i in self.running.get(node, ()) if i not in done]
        ready = sorted(i for i, info in self.instruction_info.items()
                       if info.node == node and info.kind == "compute" and i not in done
                       and all(d in done for d in info.deps))
        return heard + [i for i in ready if i not in heard]

    # ---- internals ----

    def _declare_dead(self, nodes: list[int], reason: str, now: float) -> list[Action]:
        actions: list[Action] = []
        for node in nodes:
            self.live.discard(node)
            self.failures.append(NodeFailure(node, now, reason))
            actions.append(Cancel(node))
            # One crash per unit per death, and only for a compute: a leaf is the unit's own code,
            # while a load, fetch or store running when a node dies is the node's business (a
            # cascade of machines dying must not add up against the units they were loading).
            culprits: dict[int, int] = {}
            for ins_id in self.suspects(node):
                info = self.instruction_info.get(ins_id)
                if info is None or info.kind != "compute" or info.unit in self.stored:
                    continue
                culprits.setdefault(info.unit, ins_id)
            self.running.pop(node, None)
            for unit, ins_id in sorted(culprits.items()):
                self.crashes[unit] = self.crashes.get(unit, 0) + 1
                if self.crashes[unit] >= self.max_attempts:
                    return actions + self._fail(
                        f"unit {unit} killed its node {self.crashes[unit]} times; the last "
                        f"time node {node} was running {self._name(ins_id)} ({reason})")
        if not self.live:
            dead = ", ".join(f"node {f.node}: {f.reason}" for f in self.failures)
            return actions + self._fail(f"no node left to run the job ({dead})")
        left = [u for u in self.program.units if u.index not in self.stored]
        if not left:  # everything is stored already: the nodes left only have to finish
            return actions + self._check_done()
        try:
            return actions + self._plan(left)
        except UserError as err:  # e.g. the remaining nodes lack the memory
            return actions + self._fail(f"re-planning after losing node(s) {nodes}: {err}")

    def _plan(self, units: list[Unit]) -> list[Action]:
        self.generation += 1
        figures = [self.figures[n] for n in sorted(self.live)]
        plan = self.planner(figures, self.generation, units)
        self.plan = plan
        self.plans[self.generation] = plan
        self.finished_nodes.clear()
        self.running.clear()
        self.done.clear()
        self.outputs_stored = {u: n for u, n in self.outputs_stored.items() if u in self.stored}
        self.instruction_info = {}
        self.fetch_peers = {}
        for node_plan in plan.node_plans.values():
            self.instruction_info.update(describe_instructions(node_plan))
            for ins in node_plan.instructions:
                if isinstance(ins, Fetch):
                    self.fetch_peers[(node_plan.node, ins.id)] = ins.peer
        actions: list[Action] = [Submit(node, p) for node, p in sorted(plan.node_plans.items())]
        return actions + self._check_done()

    def _check_done(self) -> list[Action]:
        if self.outcome is not None:
            return []
        if len(self.stored) == len(self.program.units) and self.live <= self.finished_nodes:
            self.outcome = Succeeded()
            return [self.outcome]
        return []

    def _fail(self, reason: str) -> list[Action]:
        if self.outcome is not None:
            return []
        self.outcome = Failed(reason)
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
