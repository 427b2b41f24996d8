"""The object planner of session 2, kept unchanged as the oracle of scheduler/planning/planner.py.

scheduler/planning/planner.py holds a plan as arrays (schemas/instruction_table.py) to plan a million units
in seconds; this is the planner it replaced, one Python object per instruction, easy to read and
slow. tests/scheduler/test_planner_oracle.py checks that both give the same instructions, peaks,
placements and errors on every kind of program (as compiler/cluster/sequential.py is the oracle of
the pods). Its rules are the planner's module doc.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from common.errors import UserError
from scheduler.planning.placement import Piece, place, root_node
from scheduler.planning.planner import NodeFigure, Plan, check_fits, stored_tensors
from schemas.instructions import ITEMSIZE, Allocate, Compute, Fetch, Free, Instruction, Load, NodePlan, Store
from schemas.program import ClusterProgram, Region, Unit
from schemas.units import no_gc_pauses

# ------------------------------------------------------------------------------------------
# Pass 1: placement and accounting
# ------------------------------------------------------------------------------------------


# Regions are keyed by plain tuples (tensor, start, shape): hashing a tuple is done in C, while a
# frozen dataclass hashes in Python, and the planner looks regions up millions of times.
Key = tuple


@dataclass(slots=True)
class _Copy:
    """One node's copy of one input region."""

    region: Region
    buffer: int
    first_pos: int
    last_pos: int
    owner: bool = False  # loads it from storage (else fetches it from the owner)
    fetched_by: list[int] = field(default_factory=list)  # owner only: the peers that fetch it
    last_fetch_round: int = -1  # owner only


@dataclass(slots=True)
class _UnitWork:
    """One piece (scheduler/planning/placement.py): a unit's launches that one node runs in one round."""

    unit: Unit
    pos: int  # the round
    outputs: dict[Key, tuple[Region, int]]  # region written -> (region, buffer)
    loaded_outputs: frozenset[Key]  # outputs also read in the unit: start from storage
    inputs: dict[Key, int]  # region only read -> buffer (a node's copy, maybe shared by units)
    launches: list[tuple[str, list[tuple[str, Key]], list[tuple[str, Key]]]]  # leaf, reads, writes
    peer_partials: dict[Key, int] = field(default_factory=dict)  # another node's partial -> buffer


@dataclass
class _NodeState:
    next_buffer: int = 0
    copies: dict[Key, _Copy] = field(default_factory=dict)
    work: list[_UnitWork] = field(default_factory=list)
    loaded_bytes: int = 0


@dataclass
class _Partials:
    """Where each partial (a split reduction's scratch region) is written, and how many other
    nodes fetch it: its writer frees it only after they have."""

    writer: dict[Key, tuple[int, int]] = field(default_factory=dict)  # key -> (node, buffer)
    fetches: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (node, buffer) -> peers


def _account(pieces: Sequence[Piece], nodes: Sequence[int], scratch: frozenset[str]
             ) -> tuple[dict[int, _NodeState], dict[Key, list], _Partials]:
    """Record every node's copies; returns node states, per input region [first round, nodes
    needing it in that round, every node needing it] (nodes in order), and the partials."""
    states = {node: _NodeState() for node in nodes}
    first_use: dict[Key, list] = {}
    partials = _Partials()
    for piece in pieces:
        state = states[piece.node]
        work = _account_piece(piece, state, first_use, scratch)
        state.work.append(work)
        for key, (_, buffer) in work.outputs.items():
            if key[0] in scratch:
                partials.writer[key] = (piece.node, buffer)
    for node, state in states.items():
        for work in state.work:
            for key in work.peer_partials:
                partials.fetches.setdefault(partials.writer[key], []).append(node)
    return states, first_use, partials


def _account_piece(piece: Piece, state: _NodeState, first_use: dict[Key, list],
                   scratch: frozenset[str]) -> _UnitWork:
    node, pos = piece.node, piece.round
    copies = state.copies
    launches = []
    written: dict[Key, tuple[Region, int]] = {}
    read_before_written: set[Key] = set()  # outputs whose old contents the unit reads
    read: set[Key] = set()
    for launch in piece.launches:
        reads = [(p, (r.tensor, r.start, r.shape)) for p, r in launch.reads]
        writes = [(p, (r.tensor, r.start, r.shape)) for p, r in launch.writes]
        launches.append((launch.leaf, reads, writes))
        read.update(key for _, key in reads)
        for (_, key), (_, region) in zip(writes, launch.writes, strict=True):
            if key not in written:
                written[key] = (region, state.next_buffer)
                state.next_buffer += 1
                if key in read:  # read by this launch or an earlier one: `beta * C_old`
                    if key[0] in scratch:
                        raise AssertionError(f"partial {key} read before any launch writes it")
                    read_before_written.add(key)
    inputs: dict[Key, int] = {}
    peer_partials: dict[Key, int] = {}
    for launch, (_, reads, _) in zip(piece.launches, launches, strict=True):
        for (_, key), (_, region) in zip(reads, launch.reads, strict=True):
            if key in written or key in inputs or key in peer_partials:
                continue
            if key[0] in scratch:  # another node's share: fetched from its writer
                peer_partials[key] = state.next_buffer
                state.next_buffer += 1
                continue
            copy = copies.get(key)
            if copy is None:
                copy = copies[key] = _Copy(region, state.next_buffer, pos, pos)
                state.next_buffer += 1
                entry = first_use.get(key)
                if entry is None:
                    first_use[key] = [pos, [node], [node]]
                else:
                    if entry[0] == pos:
                        entry[1].append(node)
                    entry[2].append(node)
            else:
                copy.last_pos = pos
            inputs[key] = copy.buffer
    return _UnitWork(piece.unit, pos, written, frozenset(read_before_written), inputs, launches,
                     peer_partials)


def _choose_owners(states: dict[int, _NodeState], first_use: dict[Key, list],
                   dtypes: Mapping[str, str]) -> None:
    """One loader per input region (see the module doc); marks owners and fetch counts."""
    # Regions in order of first round, then first appearance: dicts keep insertion order, and
    # a region first seen in a later round was inserted later.
    for key, (_, candidates, holders) in first_use.items():
        owner = candidates[0]
        if len(candidates) > 1:
            owner = min(candidates, key=lambda node: states[node].loaded_bytes)
        copy = states[owner].copies[key]
        copy.owner = True
        states[owner].loaded_bytes += math.prod(copy.region.shape) * ITEMSIZE[dtypes[key[0]]]
        for node in holders:
            if node != owner:
                copy.fetched_by.append(node)
                copy.last_fetch_round = max(copy.last_fetch_round, states[node].copies[key].first_pos)


def _owner_buffers(states: dict[int, _NodeState]) -> dict[Key, tuple[int, int]]:
    return {key: (node, copy.buffer) for node, state in states.items()
            for key, copy in state.copies.items() if copy.owner}


# ------------------------------------------------------------------------------------------
# Pass 2: unrolling one node
# ------------------------------------------------------------------------------------------


def _release_pos(copy: _Copy) -> int:
    release = copy.last_pos + 2
    if copy.owner and copy.fetched_by:
        release = max(release, copy.last_fetch_round + 1)
    return release


class _Unroll:
    """One node's instructions, piece by piece (`run`), and its peak footprint.

    Positions are rounds (placement.py); a node may have no piece in some rounds. Allocations of
    the node's i-th piece wait for the frees of its outputs of piece i - 2, and for the frees of the
    input copies released by then (a copy released in a round the node skips gates its next piece).
    """

    def __init__(self, node: int, state: _NodeState, owners: dict[Key, tuple[int, int]],
                 partials: _Partials, scratch: frozenset[str], tensor_index: Mapping[str, int],
                 dtypes: Mapping[str, str], ids: Iterator[int]):
        self.node, self.state, self.owners, self.partials = node, state, owners, partials
        self.scratch = scratch
        self.tensor_index, self.dtypes, self.ids = tensor_index, dtypes, ids
        self.out: list[Instruction] = []
        rounds = self.piece_rounds = [w.pos for w in state.work]
        self.rounds = rounds[-1] + 1 if rounds else 0
        # Which input copies are released (their frees gate allocations) at each piece, and the
        # bytes each round adds to or removes from the node's footprint.
        self.released_at: dict[int, list[int]] = {}
        self.delta = [0] * (self.rounds + 1)
        self.copy_of_buffer: dict[int, _Copy] = {}
        for copy in state.copies.values():
            release = _release_pos(copy)
            at = bisect.bisect_left(rounds, release)
            if at < len(rounds):
                self.released_at.setdefault(at, []).append(copy.buffer)
            self._hold(copy.region.shape, copy.region.tensor, copy.first_pos, self._round_of(at))
            self.copy_of_buffer[copy.buffer] = copy
        self.producer: dict[int, int] = {}  # buffer -> id of the instruction that last wrote it
        self.users: dict[int, list[int]] = {}  # buffer -> ids of local instructions using it
        self.free_id: dict[int, int] = {}  # buffer -> id of its Free
        self.unit_done: list[tuple[int, ...]] = []

    def _round_of(self, index: int) -> int:
        """The round of the node's piece `index`, or past the last round: a buffer that gates
        that piece's allocations is held until then."""
        return self.piece_rounds[index] if index < len(self.piece_rounds) else self.rounds

    def _hold(self, shape, tensor: str, start: int, stop: int) -> None:
        nbytes = math.prod(shape) * ITEMSIZE[self.dtypes[tensor]]
        self.delta[start] += nbytes
        self.delta[min(stop, self.rounds)] -= nbytes

    def _allocate(self, gate: tuple[int, ...], buffer: int, shape, tensor: str) -> int:
        alloc = next(self.ids)
        self.out.append(Allocate(alloc, gate, buffer, shape, self.dtypes[tensor]))
        return alloc

    def run(self) -> tuple[list[Instruction], int]:
        for index, work in enumerate(self.state.work):
            gate = list(self.unit_done[index - 2]) if index >= 2 else []
            gate.extend(self.free_id[b] for b in self.released_at.get(index, ()))
            self._buffers(work, tuple(gate), self._round_of(index + 2))
            self._computes(work)
            self._finish(work)
        peak = running = 0
        for d in self.delta:
            running += d
            peak = max(peak, running)
        return self.out, peak

    def _buffers(self, work: _UnitWork, gate: tuple[int, ...], freed_by: int) -> None:
        """Outputs (this piece's own, held for two rounds), input copies first needed here (loaded
        or fetched from their loader) and other nodes' partials (fetched from their writer)."""
        emit, ids = self.out.append, self.ids
        for key, (region, buffer) in work.outputs.items():
            self._hold(region.shape, region.tensor, work.pos, freed_by)
            self.producer[buffer] = self._allocate(gate, buffer, region.shape, region.tensor)
            self.users[buffer] = []
            if key in work.loaded_outputs:
                load = next(ids)
                emit(Load(load, (self.producer[buffer],), buffer, self.tensor_index[region.tensor], region))
                self.producer[buffer] = load
        for key, buffer in work.inputs.items():
            if buffer in self.producer:
                continue
            copy = self.copy_of_buffer[buffer]
            alloc = self._allocate(gate, buffer, copy.region.shape, key[0])
            get = next(ids)
            if copy.owner:
                emit(Load(get, (alloc,), buffer, self.tensor_index[key[0]], copy.region))
            else:
                peer, peer_buffer = self.owners[key]
                emit(Fetch(get, (alloc,), buffer, peer, peer_buffer))
            self.producer[buffer] = get
            self.users[buffer] = [get]
        for key, buffer in work.peer_partials.items():
            self._hold(key[2], key[0], work.pos, freed_by)
            alloc = self._allocate(gate, buffer, key[2], key[0])
            peer, peer_buffer = self.partials.writer[key]
            get = next(ids)
            emit(Fetch(get, (alloc,), buffer, peer, peer_buffer))
            self.producer[buffer] = get
            self.users[buffer] = [get]

    def _computes(self, work: _UnitWork) -> None:
        """The launches, in order; each written buffer's writes chain through `producer`."""
        outputs, inputs, peers = work.outputs, work.inputs, work.peer_partials
        for leaf, reads, writes in work.launches:
            bindings: dict[str, int] = {}
            for param, key in reads:
                out_buffer = outputs.get(key)
                bindings[param] = out_buffer[1] if out_buffer else inputs.get(key, peers.get(key))
            for param, key in writes:
                bindings[param] = outputs[key][1]
            cid = next(self.ids)
            deps = tuple(dict.fromkeys([self.producer[b] for b in bindings.values()]))
            self.out.append(Compute(cid, deps, leaf, tuple(bindings.items()), work.unit.index))
            for buffer in bindings.values():
                self.users[buffer].append(cid)
            for _, key in writes:
                self.producer[outputs[key][1]] = cid

    def _finish(self, work: _UnitWork) -> None:
        """Store each output once (a partial is never stored: its free waits for the peers that
        fetch it), free the fetched partials, and the input copies whose last local use was here."""
        emit, ids = self.out.append, self.ids
        done = []
        for key, (region, buffer) in work.outputs.items():
            deps = tuple(self.users[buffer]) or (self.producer[buffer],)
            peers: tuple[int, ...] = ()
            if key[0] in self.scratch:
                peers = tuple(self.partials.fetches.get((self.node, buffer), ()))
            else:
                sid = next(ids)
                emit(Store(sid, (self.producer[buffer],), buffer, self.tensor_index[region.tensor], region,
                           work.unit.index))
                deps = (sid,)
            done.append(self._free(deps, buffer, peers))
        self.unit_done.append(tuple(done))
        for buffer in work.peer_partials.values():
            self._free(tuple(self.users[buffer]), buffer)
        for buffer in work.inputs.values():
            copy = self.copy_of_buffer[buffer]
            if copy.last_pos == work.pos and buffer not in self.free_id:
                self._free(tuple(self.users[buffer]), buffer, tuple(copy.fetched_by) if copy.owner else ())

    def _free(self, deps: tuple[int, ...], buffer: int, peers: tuple[int, ...] = ()) -> int:
        fid = next(self.ids)
        self.out.append(Free(fid, deps, buffer, peers=peers))
        self.free_id[buffer] = fid
        return fid


# ------------------------------------------------------------------------------------------
# The entry point
# ------------------------------------------------------------------------------------------


def plan(program: ClusterProgram, nodes: Sequence[NodeFigure], uris: Mapping[str, str], generation: int = 1,
         units: Sequence[Unit] | None = None, first_id: int = 0) -> Plan:
    """scheduler.planning.planner.plan's arguments and answer, planned the object planner's way."""
    if not nodes:
        raise UserError("no node to run the job on")
    with no_gc_pauses():
        units = _longest_first(program, program.units if units is None else units)
        node_ids = [f.node for f in nodes]
        scratch = frozenset(t.name for t in program.tensors if t.role == "partial")
        plan_uris, tensor_index = stored_tensors(program, uris)
        dtypes = {t.name: t.dtype for t in program.tensors}
        return _plan(program, nodes, units, node_ids, scratch, plan_uris, tensor_index, dtypes, generation,
                     first_id)


def _plan(program, nodes, units, node_ids, scratch, plan_uris, tensor_index, dtypes, generation,
          first_id) -> Plan:
    hosts = {f.node: f.host for f in nodes}
    reduction = program.reduction
    split = reduction is not None and reduction.shares > 1
    if split:
        pieces = place(units, node_ids, hosts, reduction.hosts)
    else:  # dealt round robin, as scheduler/planning/placement.py's doc says, one Piece per unit
        n = len(node_ids)
        pieces = [Piece(unit, node_ids[k % n], k // n, unit.launches, (0,)) for k, unit in enumerate(units)]
    states, first_use, partials = _account(pieces, node_ids, scratch)
    _choose_owners(states, first_use, dtypes)
    owners = _owner_buffers(states)
    ids = itertools.count(first_id)
    node_plans: dict[int, NodePlan] = {}
    for figure in nodes:
        unroll = _Unroll(figure.node, states[figure.node], owners, partials, scratch, tensor_index, dtypes,
                         ids)
        instructions, peak = unroll.run()
        check_fits(figure, peak)
        node_plans[figure.node] = NodePlan(figure.node, generation, tuple(instructions), peak, plan_uris)
    return Plan(generation, node_plans, root_node(pieces), len(first_use))


def _longest_first(program: ClusterProgram, units: Sequence[Unit]) -> Sequence[Unit]:
    flops = {leaf.name: leaf.flops for leaf in program.leaves}
    work = [sum(flops.get(launch.leaf, 0) for launch in unit.launches) for unit in units]
    if all(w == work[0] for w in work):
        return units  # the common case: nothing to reorder
    order = sorted(range(len(units)), key=lambda i: -work[i])  # stable: equals keep their order
    return [units[i] for i in order]
