"""The planner: a cluster program and the nodes' figures in, one instruction list per node out.

Pure: no I/O, no clocks. The pipeline, in two passes over the units:

1. Place and account (`_account`). Units are dealt round robin over the live nodes longest first
   (by the flops of their launches; among equals in the order given, row-major index order for a
   first plan), so that the units of causal attention's last rows, the longest, start first and
   the busiest node finishes first: the k-th unit goes to node `nodes[k % n]` as that node's
   position `k // n`. Every node runs its units in position order, so a position is
   also a "round" shared by all nodes. For every node we note which input regions it reads and
   in which positions (first and last), and give every buffer its number.
2. Choose loaders (`_choose_owners`). Each distinct input region is loaded from storage by
   exactly one node: among the nodes that need it in the first round in which anyone does, the
   one that has loaded the fewest bytes so far (so that K and V of an attention, both wanted by
   everyone in round 0, are loaded by two different nodes). Every other node that needs the
   region fetches it from that node, once, and keeps its copy until its own last use.
3. Unroll (`_unroll_node`): per node, per position: allocate, load/fetch, compute per launch, store
   each output once after the unit's last launch, free each buffer after its last local use.

Bounded memory. A unit's allocations wait for (a) the stores (and output frees) of the node's unit two
positions before and (b) the frees of every buffer "released" at this position: a buffer is released two
positions after its last local use, and a buffer that peers fetch is also held until the first
position after the last round in which a peer fetches it. So at most two units are in flight per
node, and the peak is the largest sum of buffers whose [allocation position, release position)
covers a position: `NodePlan.peak_bytes`, checked against the node's VRAM.

No deadlock: every wait points to an earlier round, except fetch -> peer's load -> peer's
allocation within one round, and allocations only wait on earlier rounds; so the wait graph has
no cycle whatever the speeds of the nodes.

A buffer holds its tensor's storage dtype (tiles are never widened), so a buffer of `n` elements
of a bf16 tensor is `2 n` bytes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from common.errors import UserError
from compiler.cluster.units import no_gc_pauses
from schemas.instructions import ITEMSIZE, Allocate, Compute, Fetch, Free, Instruction, Load, NodePlan, Store
from schemas.program import ClusterProgram, Region, Unit


@dataclass(frozen=True)
class NodeFigure:
    """What the planner needs to know about a node. `vram_bytes` 0 means unknown: not checked."""

    node: int
    vram_bytes: int = 0


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
    unit: Unit
    pos: int
    outputs: dict[Key, tuple[Region, int]]  # region written -> (region, buffer)
    loaded_outputs: frozenset[Key]  # outputs also read in the unit: start from storage
    inputs: dict[Key, int]  # region only read -> buffer (a node's copy, maybe shared by units)
    launches: list[tuple[str, list[tuple[str, Key]], list[tuple[str, Key]]]]  # leaf, reads, writes


@dataclass
class _NodeState:
    next_buffer: int = 0
    copies: dict[Key, _Copy] = field(default_factory=dict)
    work: list[_UnitWork] = field(default_factory=list)
    loaded_bytes: int = 0


def _account(units: Sequence[Unit], nodes: Sequence[int]) -> tuple[dict[int, _NodeState], dict[Key, list]]:
    """Place units and record every node's copies; returns node states and, per input region,
    [first round, nodes needing it in that round, every node needing it] (nodes in order)."""
    n = len(nodes)
    states = {node: _NodeState() for node in nodes}
    first_use: dict[Key, list] = {}
    for k, unit in enumerate(units):
        node, pos = nodes[k % n], k // n
        state = states[node]
        copies = state.copies
        launches = []
        written: dict[Key, tuple[Region, int]] = {}
        read_before_written: set[Key] = set()  # outputs whose old contents the unit reads
        read: set[Key] = set()
        for launch in unit.launches:
            reads = [(p, (r.tensor, r.start, r.shape)) for p, r in launch.reads]
            writes = [(p, (r.tensor, r.start, r.shape)) for p, r in launch.writes]
            launches.append((launch.leaf, reads, writes))
            read.update(key for _, key in reads)
            for (_, key), (_, region) in zip(writes, launch.writes, strict=True):
                if key not in written:
                    written[key] = (region, state.next_buffer)
                    state.next_buffer += 1
                    if key in read:  # read by this launch or an earlier one: `beta * C_old`
                        read_before_written.add(key)
        inputs: dict[Key, int] = {}
        for launch, (_, reads, _) in zip(unit.launches, launches, strict=True):
            for (_, key), (_, region) in zip(reads, launch.reads, strict=True):
                if key in written or key in inputs:
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
        loaded = frozenset(read_before_written)
        state.work.append(_UnitWork(unit, pos, written, loaded, inputs, launches))
    return states, first_use


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


def _unroll_node(state: _NodeState, owners: dict[Key, tuple[int, int]], uris: Mapping[str, str],
                 dtypes: Mapping[str, str], ids: Iterator[int]) -> tuple[list[Instruction], int]:
    out: list[Instruction] = []
    emit = out.append
    positions = len(state.work)
    # Which input copies are released (their frees gate allocations) at each position, and the
    # bytes each position adds to or removes from the node's footprint.
    released_at: dict[int, list[int]] = {}
    delta = [0] * (positions + 1)
    copy_of_buffer: dict[int, _Copy] = {}
    for copy in state.copies.values():
        release = _release_pos(copy)
        if release < positions:
            released_at.setdefault(release, []).append(copy.buffer)
        nbytes = math.prod(copy.region.shape) * ITEMSIZE[dtypes[copy.region.tensor]]
        delta[copy.first_pos] += nbytes
        delta[min(release, positions)] -= nbytes
        copy_of_buffer[copy.buffer] = copy

    producer: dict[int, int] = {}  # buffer -> id of the instruction that last wrote it
    users: dict[int, list[int]] = {}  # input buffer -> ids of local instructions using it
    free_id: dict[int, int] = {}  # buffer -> id of its Free
    unit_done: list[tuple[int, ...]] = []

    for work in state.work:
        pos = work.pos
        unit_index = work.unit.index
        gate = list(unit_done[pos - 2]) if pos >= 2 else []
        gate.extend(free_id[b] for b in released_at.get(pos, ()))
        gate_deps = tuple(gate)

        # Output buffers: this unit's own; they live from this position until two after it.
        for key, (region, buffer) in work.outputs.items():
            dtype = dtypes[region.tensor]
            nbytes = math.prod(region.shape) * ITEMSIZE[dtype]
            delta[pos] += nbytes
            delta[min(pos + 2, positions)] -= nbytes
            alloc = next(ids)
            emit(Allocate(alloc, gate_deps, buffer, region.shape, dtype))
            producer[buffer] = alloc
            if key in work.loaded_outputs:
                load = next(ids)
                emit(Load(load, (alloc,), buffer, uris[region.tensor], region))
                producer[buffer] = load

        # Input copies first needed here: load from storage, or fetch from the loader.
        for key, buffer in work.inputs.items():
            if buffer in producer:
                continue
            copy = copy_of_buffer[buffer]
            alloc = next(ids)
            emit(Allocate(alloc, gate_deps, buffer, copy.region.shape, dtypes[key[0]]))
            get = next(ids)
            if copy.owner:
                emit(Load(get, (alloc,), buffer, uris[key[0]], copy.region))
            else:
                peer, peer_buffer = owners[key]
                emit(Fetch(get, (alloc,), buffer, peer, peer_buffer))
            producer[buffer] = get
            users[buffer] = [get]

        # The launches, in order; each output buffer's writes chain through `producer`.
        outputs, inputs = work.outputs, work.inputs
        for leaf, reads, writes in work.launches:
            bindings: dict[str, int] = {}
            for param, key in reads:
                out_buffer = outputs.get(key)
                bindings[param] = out_buffer[1] if out_buffer else inputs[key]
            for param, key in writes:
                bindings[param] = outputs[key][1]
            cid = next(ids)
            deps = tuple(dict.fromkeys([producer[b] for b in bindings.values()]))
            emit(Compute(cid, deps, leaf, tuple(bindings.items()), unit_index))
            for _, key in writes:
                producer[outputs[key][1]] = cid
            for _, key in reads:
                if key not in outputs:
                    users[inputs[key]].append(cid)

        done = []
        for region, buffer in outputs.values():
            sid = next(ids)
            emit(Store(sid, (producer[buffer],), buffer, uris[region.tensor], region, unit_index))
            fid = next(ids)
            emit(Free(fid, (sid,), buffer))
            free_id[buffer] = fid
            done.append(fid)
        unit_done.append(tuple(done))

        # Input copies whose last local use was this unit.
        for buffer in inputs.values():
            copy = copy_of_buffer[buffer]
            if copy.last_pos == pos and buffer not in free_id:
                fid = next(ids)
                peers = tuple(copy.fetched_by) if copy.owner else ()
                emit(Free(fid, tuple(users[buffer]), buffer, peers=peers))
                free_id[buffer] = fid

    peak = running = 0
    for d in delta:
        running += d
        peak = max(peak, running)
    return out, peak


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
    refuse_partials(program)
    for tensor in program.tensors:
        if tensor.name not in uris:
            raise UserError(f"no storage URI for tensor {tensor.name}")
    dtypes = {t.name: t.dtype for t in program.tensors}
    states, first_use = _account(units, node_ids)
    _choose_owners(states, first_use, dtypes)
    owners = _owner_buffers(states)
    ids = itertools.count(first_id)
    node_plans: dict[int, NodePlan] = {}
    for figure in nodes:
        instructions, peak = _unroll_node(states[figure.node], owners, uris, dtypes, ids)
        if figure.vram_bytes and peak > figure.vram_bytes:
            raise UserError(
                f"node {figure.node} needs {_mib(peak)} of memory at its peak ({peak} bytes) but has "
                f"{_mib(figure.vram_bytes)} ({figure.vram_bytes} bytes): choose smaller @cluster values "
                f"or more nodes")
        node_plans[figure.node] = NodePlan(figure.node, generation, tuple(instructions), peak)
    placement = {w.unit.index: node for node, state in states.items() for w in state.work}
    return Plan(generation, node_plans, placement, len(first_use))


def refuse_partials(program: ClusterProgram) -> None:
    """The pods do not yet hold a reduction's partials apart from the output (an online softmax
    cluster loop, or a loop split over nodes): the sequential reference runs such programs, the
    runtime refuses them rather than run something else."""
    scratch = [t.name for t in program.tensors if t.role == "partial"]
    if scratch:
        raise UserError(f"kernel {program.kernel}: its cluster loop keeps its partials apart from the output "
                        f"({', '.join(scratch)}), which the cluster runtime does not run yet; only the "
                        "sequential reference (compiler/cluster/sequential.py) does (docs/cluster.md)")


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
