"""The planner: a cluster program and the nodes' figures in, one instruction list per node out.

Pure: no I/O, no clocks. The pipeline, in two passes over the units:

1. Place (scheduler/placement.py) and account (`_account`). Units are placed longest first (by
   the flops of their launches; among equals in the order given, row-major index order for a
   first plan), so that the units of causal attention's last rows, the longest, start first and
   the busiest node finishes first. A plain unit is one piece on one node; a split reduction's
   unit is one piece per node its shares run on, all in one round. Dealt round robin, the k-th
   plain unit goes to node `nodes[k % n]` in round `k // n`; every node runs its pieces in round
   order, so a round is shared by all nodes. For every node we note which input regions it reads
   and in which rounds (first and last), and give every buffer its number.
2. Choose loaders (`_choose_owners`). Each distinct input region is loaded from storage by
   exactly one node: among the nodes that need it in the first round in which anyone does, the
   one that has loaded the fewest bytes so far (so that K and V of an attention, both wanted by
   everyone in round 0, are loaded by two different nodes). Every other node that needs the
   region fetches it from that node, once, and keeps its copy until its own last use.
3. Unroll (`_Unroll`): per node, per piece: allocate, load/fetch, compute per launch, store each
   output once after the piece's last launch, free each buffer after its last local use.

Partials. A split reduction's partials (role "partial", never in storage) are written by the
piece of their share and read by the tree's merge on another node: that node fetches the partial
from its writer like any tile (a buffer is servable once every launch writing it is done, so the
fetch gets the share's final partial), and the writer frees it only after that fetch (its Free
names the fetching node, so a fetcher lost to the job is no longer waited for).

Bounded memory. A piece's allocations wait for (a) the stores and frees of the node's piece two
before it and (b) the frees of every buffer "released" by its round: a buffer is released two
rounds after its last local use, and a buffer that peers fetch is also held until the first
round after the last round in which a peer fetches it. So at most two pieces are in flight per
node, and the peak is the largest sum of buffers whose [allocation round, release round)
covers a round: `NodePlan.peak_bytes`, checked against the node's VRAM.

No deadlock: every wait points to an earlier round, except fetch -> peer's load, or peer's
compute of a partial, -> peer's allocation within one round, and allocations only wait on
earlier rounds; so the wait graph has no cycle whatever the speeds of the nodes. (The tree's
merges within one round form no cycle: a share is never merged into after it was a source.)

A buffer holds its tensor's storage dtype (tiles are never widened), so a buffer of `n` elements
of a bf16 tensor is `2 n` bytes.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from common.errors import UserError
from compiler.cluster.units import no_gc_pauses
from scheduler.placement import Piece, place, root_node
from schemas.instruction_table import ALLOCATE, COMPUTE, FETCH, FREE, LOAD, STORE, InstructionTable
from schemas.instructions import ITEMSIZE, NodePlan
from schemas.program import ClusterProgram, Region, Unit


@dataclass(frozen=True)
class NodeFigure:
    """What the planner needs to know about a node. `vram_bytes` 0 means unknown: not checked.
    `host` names the machine it runs on (a split's tree by hosts keeps each group on one)."""

    node: int
    vram_bytes: int = 0
    host: str = ""


@dataclass(frozen=True)
class Plan:
    generation: int
    node_plans: dict[int, NodePlan]  # node -> its plan (every live node, maybe with no work)
    placement: dict[int, int]  # unit index -> node
    loads_from_storage: int  # regions loaded (each distinct input region exactly once)


# ------------------------------------------------------------------------------------------
# Pass 1: placement and accounting
# ------------------------------------------------------------------------------------------


# Regions are keyed by plain tuples (tensor, start, shape): hashing a tuple is done in C, while a
# frozen dataclass hashes in Python, and the planner looks regions up millions of times.
Key = tuple

# One node's copy of one input region is a list (building a list is several times cheaper than
# an object, and there is one per unit and input): these are its fields.
BUFFER, FIRST, LAST, REGION, OWNER, FETCHED_BY, LAST_FETCH, SOURCE = range(8)
# OWNER: loads it from storage; FETCHED_BY: owner only, the peers that fetch it, in order;
# LAST_FETCH: owner only, the last round a peer fetches it in; SOURCE: a fetcher's (owner, buffer).


def _copy(buffer: int, pos: int, region: Region) -> list:
    return [buffer, pos, pos, region, False, (), -1, None]


class _Node:
    """What pass 1 notes about one node: its copies of input regions (key -> copy), its pieces
    (records, see `_account_piece`), the buffers numbered so far and the bytes it loads."""

    __slots__ = ("copies", "works", "buffers", "loaded_bytes")

    def __init__(self):
        self.copies: dict[Key, list] = {}
        self.works: list[tuple] = []
        self.buffers = 0
        self.loaded_bytes = 0


@dataclass
class _Partials:
    """Where each partial (a split reduction's scratch region) is written, and how many other
    nodes fetch it: its writer frees it only after they have."""

    writer: dict[Key, tuple[int, int]] = field(default_factory=dict)  # key -> (node, buffer)
    fetches: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (node, buffer) -> peers


def _account(pieces: Sequence[Piece], nodes: Sequence[int], scratch: frozenset[str]
             ) -> tuple[dict[int, _Node], dict[Key, list], _Partials]:
    """Record every node's copies and pieces; returns the nodes, per input region [first round,
    nodes needing it in that round, every node needing it] (nodes in order), and the partials."""
    states = {node: _Node() for node in nodes}
    first_use: dict[Key, list] = {}
    partials = _Partials()
    for piece in pieces:
        state = states[piece.node]
        work = _account_piece(piece, state, first_use, scratch)
        state.works.append(work)
        if scratch:
            for key, _, buffer, _ in work[2]:
                if key[0] in scratch:
                    partials.writer[key] = (piece.node, buffer)
    for node, state in states.items():
        for work in state.works:
            for key, _ in work[4]:
                partials.fetches.setdefault(partials.writer[key], []).append(node)
    return states, first_use, partials


def _account_piece(piece: Piece, state: _Node, first_use: dict[Key, list], scratch: frozenset[str]
                   ) -> tuple:
    """One piece's record: (unit, round, outputs, inputs, peer partials, launches) where outputs
    are (key, region, buffer, loaded from storage first) in order of first write, inputs (key,
    copy) and peer partials (key, buffer) in order of first read, and launches (leaf, bindings,
    buffers written). Outputs are numbered first, then what the piece reads."""
    pos = piece.round
    buffer_of: dict[Key, int] = {}
    outputs = []
    read: set[Key] = set()
    keyed = []
    for launch in piece.launches:
        reads = [(p, (r.tensor, r.start, r.shape), r) for p, r in launch.reads]
        read.update([k for _, k, _ in reads])
        writes = []
        for p, r in launch.writes:
            key = (r.tensor, r.start, r.shape)
            writes.append((p, key))
            if key not in buffer_of:
                loaded = key in read  # read by this launch or an earlier one: `beta * C_old`
                if loaded and key[0] in scratch:
                    raise AssertionError(f"partial {key} read before any launch writes it")
                buffer_of[key] = state.buffers
                outputs.append((key, r, state.buffers, loaded))
                state.buffers += 1
        keyed.append((launch.leaf, reads, writes))
    inputs, peer_partials = _reads(keyed, buffer_of, state, pos, piece.node, first_use, scratch)
    launches = []
    for leaf, reads, writes in keyed:
        bindings = {p: buffer_of[k] for p, k, _ in reads}
        for p, k in writes:
            bindings[p] = buffer_of[k]
        launches.append((leaf, tuple(bindings.items()), tuple(buffer_of[k] for _, k in writes)))
    return piece.unit.index, pos, outputs, inputs, peer_partials, launches


def _reads(keyed: list, buffer_of: dict[Key, int], state: _Node, pos: int, node: int,
           first_use: dict[Key, list], scratch: frozenset[str]) -> tuple[list, list]:
    """Number what a piece reads and did not write: another node's partial gets a buffer to fetch
    it into; an input region the node's copy (made here if it has none: the region's first use
    on this node, noted in `first_use`)."""
    copies = state.copies
    inputs, peer_partials = [], []
    for _, reads, _ in keyed:
        for _, key, region in reads:
            if key in buffer_of:
                continue
            if key[0] in scratch:  # another node's share: fetched from its writer
                buffer_of[key] = state.buffers
                peer_partials.append((key, state.buffers))
                state.buffers += 1
                continue
            copy = copies.get(key)
            if copy is None:
                copy = copies[key] = _copy(state.buffers, pos, region)
                state.buffers += 1
                entry = first_use.get(key)
                if entry is None:
                    first_use[key] = [pos, [node], [node]]
                else:
                    if entry[0] == pos:
                        entry[1].append(node)
                    entry[2].append(node)
            else:
                copy[LAST] = pos
            buffer_of[key] = copy[BUFFER]
            inputs.append((key, copy))
    return inputs, peer_partials


def _choose_owners(states: dict[int, _Node], first_use: dict[Key, list], dtypes: Mapping[str, str]) -> None:
    """One loader per input region (see the module doc); marks owners, their fetchers, and each
    fetcher's source."""
    # Regions in order of first round, then first appearance: dicts keep insertion order, and
    # a region first seen in a later round was inserted later.
    itemsize = {name: ITEMSIZE[dtype] for name, dtype in dtypes.items()}
    for key, (_, candidates, holders) in first_use.items():
        owner = candidates[0]
        if len(candidates) > 1:
            owner = min(candidates, key=lambda node: states[node].loaded_bytes)
        copy = states[owner].copies[key]
        copy[OWNER] = True
        states[owner].loaded_bytes += math.prod(copy[REGION].shape) * itemsize[key[0]]
        if len(holders) > 1:
            fetchers = [node for node in holders if node != owner]
            copy[FETCHED_BY] = tuple(fetchers)
            source = (owner, copy[BUFFER])
            for node in fetchers:
                theirs = states[node].copies[key]
                theirs[SOURCE] = source
                copy[LAST_FETCH] = max(copy[LAST_FETCH], theirs[FIRST])


# ------------------------------------------------------------------------------------------
# Pass 2: unrolling one node
# ------------------------------------------------------------------------------------------


def _release_pos(copy: list) -> int:
    release = copy[LAST] + 2
    if copy[OWNER] and copy[FETCHED_BY]:
        release = max(release, copy[LAST_FETCH] + 1)
    return release


class _Unroll:
    """One node's instructions, piece by piece (`run`), into an InstructionTable, and its peak
    footprint.

    Positions are rounds (placement.py); a node may have no piece in some rounds. Allocations of
    the node's i-th piece wait for the frees of its outputs of piece i - 2, and for the frees of the
    input copies released by then (a copy released in a round the node skips gates its next piece).
    Buffers are numbered densely per node, so per-buffer facts are lists indexed by buffer.
    """

    def __init__(self, node: int, state: _Node, partials: _Partials, scratch: frozenset[str],
                 tensor_index: Mapping[str, int], dtypes: Mapping[str, str], first_id: int):
        self.node, self.state, self.partials, self.scratch = node, state, partials, scratch
        self.tensor_index = tensor_index
        self.table = InstructionTable(first_id)
        self.dtype_ref = {name: self.table.name(dtype) for name, dtype in dtypes.items()}
        self.itemsize = {name: ITEMSIZE[dtype] for name, dtype in dtypes.items()}
        rounds = self.piece_rounds = [w[1] for w in state.works]
        self.rounds = rounds[-1] + 1 if rounds else 0
        # Which input copies are released (their frees gate allocations) at each piece, and the
        # bytes each round adds to or removes from the node's footprint.
        self.released_at: dict[int, list[int]] = {}
        self.delta = [0] * (self.rounds + 1)
        for copy in state.copies.values():
            at = bisect.bisect_left(rounds, _release_pos(copy))
            if at < len(rounds):
                self.released_at.setdefault(at, []).append(copy[BUFFER])
            self._hold(copy[REGION].shape, copy[REGION].tensor, copy[FIRST], self._round_of(at))
        self.producer = [-1] * state.buffers  # buffer -> id of the instruction that last wrote it
        self.users: list[list[int] | None] = [None] * state.buffers  # buffer -> local users' ids
        self.free_id = [-1] * state.buffers  # buffer -> id of its Free
        self.unit_done: list[list[int]] = []

    def _round_of(self, index: int) -> int:
        """The round of the node's piece `index`, or past the last round: a buffer that gates
        that piece's allocations is held until then."""
        return self.piece_rounds[index] if index < len(self.piece_rounds) else self.rounds

    def _hold(self, shape, tensor: str, start: int, stop: int) -> None:
        nbytes = math.prod(shape) * self.itemsize[tensor]
        self.delta[start] += nbytes
        self.delta[min(stop, self.rounds)] -= nbytes

    def run(self) -> tuple[InstructionTable, int]:
        for index, work in enumerate(self.state.works):
            gate = list(self.unit_done[index - 2]) if index >= 2 else []
            gate.extend(self.free_id[b] for b in self.released_at.get(index, ()))
            self._buffers(work, gate, self._round_of(index + 2))
            self._computes(work)
            self._finish(work)
        peak = running = 0
        for d in self.delta:
            running += d
            peak = max(peak, running)
        return self.table, peak

    def _buffers(self, work: tuple, gate: list[int], freed_by: int) -> None:
        """Outputs (this piece's own, held for two rounds), input copies first needed here (loaded
        or fetched from their loader) and other nodes' partials (fetched from their writer)."""
        _, pos, outputs, inputs, peer_partials, _ = work
        add, ref, producer, users = self.table.add, self.table.ref, self.producer, self.users
        for key, region, buffer, loaded in outputs:
            self._hold(region.shape, key[0], pos, freed_by)
            get = add(ALLOCATE, buffer, ref(region.shape), self.dtype_ref[key[0]], 0, gate)
            if loaded:
                get = add(LOAD, buffer, self.tensor_index[key[0]], ref(region), 0, (get,))
            producer[buffer] = get
            users[buffer] = []
        for key, copy in inputs:
            buffer = copy[BUFFER]
            if producer[buffer] >= 0:
                continue
            region = copy[REGION]
            alloc = add(ALLOCATE, buffer, ref(region.shape), self.dtype_ref[key[0]], 0, gate)
            if copy[OWNER]:
                get = add(LOAD, buffer, self.tensor_index[key[0]], ref(region), 0, (alloc,))
            else:
                peer, peer_buffer = copy[SOURCE]
                get = add(FETCH, buffer, peer, peer_buffer, 0, (alloc,))
            producer[buffer] = get
            users[buffer] = [get]
        for key, buffer in peer_partials:
            self._hold(key[2], key[0], pos, freed_by)
            alloc = add(ALLOCATE, buffer, ref(key[2]), self.dtype_ref[key[0]], 0, gate)
            peer, peer_buffer = self.partials.writer[key]
            producer[buffer] = get = add(FETCH, buffer, peer, peer_buffer, 0, (alloc,))
            users[buffer] = [get]

    def _computes(self, work: tuple) -> None:
        """The launches, in order; each written buffer's writes chain through `producer`."""
        unit, launches = work[0], work[5]
        add, name, producer, users = self.table.add, self.table.name, self.producer, self.users
        for leaf, bindings, written in launches:
            deps = tuple(dict.fromkeys([producer[b] for _, b in bindings]))
            extra = []
            for param, buffer in bindings:
                extra += (name(param), buffer)
            cid = add(COMPUTE, 0, name(leaf), unit, 0, deps, extra)
            for _, buffer in bindings:
                users[buffer].append(cid)
            for buffer in written:
                producer[buffer] = cid

    def _finish(self, work: tuple) -> None:
        """Store each output once (a partial is never stored: its free waits for the peers that
        fetch it), free the fetched partials, and the input copies whose last local use was here."""
        unit, pos, outputs, inputs, peer_partials, _ = work
        add, producer, users = self.table.add, self.producer, self.users
        done = []
        for key, region, buffer, _ in outputs:
            if key[0] in self.scratch:
                deps = tuple(users[buffer]) or (producer[buffer],)
                done.append(self._free(deps, buffer, self.partials.fetches.get((self.node, buffer), ())))
            else:
                sid = add(STORE, buffer, self.tensor_index[key[0]], self.table.ref(region), unit,
                          (producer[buffer],))
                done.append(self._free((sid,), buffer))
        self.unit_done.append(done)
        for _, buffer in peer_partials:
            self._free(users[buffer], buffer)
        for _, copy in inputs:
            buffer = copy[BUFFER]
            if copy[LAST] == pos and self.free_id[buffer] < 0:
                self._free(users[buffer], buffer, copy[FETCHED_BY] if copy[OWNER] else ())

    def _free(self, deps: Sequence[int], buffer: int, peers: Sequence[int] = ()) -> int:
        fid = self.free_id[buffer] = self.table.add(FREE, buffer, 0, 0, 0, deps, peers)
        return fid


# ------------------------------------------------------------------------------------------
# The entry point
# ------------------------------------------------------------------------------------------


def plan(program: ClusterProgram, nodes: Sequence[NodeFigure], uris: Mapping[str, str], generation: int = 1,
         units: Sequence[Unit] | None = None, first_id: int = 0) -> Plan:
    """Plan `units` (default: all of the program's, in index order) over `nodes`.

    Instruction ids count up from `first_id`: a re-plan runs beside the plans before it, so the
    scheduler numbers each plan after the last one and an id names one instruction of the job.

    `uris` maps each tensor to its (absolute) storage URI. Raises UserError when there is no node
    or when a node's peak memory does not fit its VRAM."""
    if not nodes:
        raise UserError("no node to run the job on")
    # The planner builds millions of small acyclic objects; the cycle collector would rescan
    # them over and over (it more than doubles the time) and has nothing to find here.
    with no_gc_pauses():  # the plan is acyclic tuples too
        return _plan(program, nodes, uris, generation, units, first_id)


def _plan(program: ClusterProgram, nodes: Sequence[NodeFigure], uris: Mapping[str, str], generation: int,
          units: Sequence[Unit] | None, first_id: int) -> Plan:
    units = _longest_first(program, program.units if units is None else units)
    node_ids = [f.node for f in nodes]
    scratch = frozenset(t.name for t in program.tensors if t.role == "partial")
    stored = [t.name for t in program.tensors if t.name not in scratch]
    for name in stored:
        if name not in uris:
            raise UserError(f"no storage URI for tensor {name}")
    plan_uris = tuple(uris[name] for name in stored)  # each URI once; instructions name an index
    tensor_index = {name: i for i, name in enumerate(stored)}
    dtypes = {t.name: t.dtype for t in program.tensors}
    hosts = {f.node: f.host for f in nodes}
    reduction = program.reduction
    split = reduction is not None and reduction.shares > 1
    pieces = place(units, node_ids, hosts, reduction.hosts if split else (), split)
    states, first_use, partials = _account(pieces, node_ids, scratch)
    _choose_owners(states, first_use, dtypes)
    next_id = first_id
    node_plans: dict[int, NodePlan] = {}
    for figure in nodes:
        unroll = _Unroll(figure.node, states[figure.node], partials, scratch, tensor_index, dtypes, next_id)
        instructions, peak = unroll.run()
        next_id += len(instructions)
        if figure.vram_bytes and peak > figure.vram_bytes:
            raise UserError(
                f"node {figure.node} needs {_mib(peak)} of memory at its peak ({peak} bytes) but has "
                f"{_mib(figure.vram_bytes)} ({figure.vram_bytes} bytes): choose smaller @cluster values "
                f"or more nodes")
        node_plans[figure.node] = NodePlan(figure.node, generation, instructions, peak, plan_uris)
    return Plan(generation, node_plans, root_node(pieces), len(first_use))


def _longest_first(program: ClusterProgram, units: Sequence[Unit]) -> Sequence[Unit]:
    flops = {leaf.name: leaf.flops for leaf in program.leaves}
    work = [sum(flops.get(launch.leaf, 0) for launch in unit.launches) for unit in units]
    if all(w == work[0] for w in work):
        return units  # the common case: nothing to reorder
    order = sorted(range(len(units)), key=lambda i: -work[i])  # stable: equals keep their order
    return [units[i] for i in order]


def _mib(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"
