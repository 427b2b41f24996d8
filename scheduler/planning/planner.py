"""The planner: a cluster program and the nodes' figures in, one instruction list per node out.

Pure: no I/O, no clocks. The pipeline, in two passes over the units:

1. Place (scheduler/planning/placement.py) and account (`_account`). Units are placed longest first (by
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from common.errors import UserError
from scheduler.planning import plan_arrays, plan_columns, plan_instructions
from scheduler.planning.placement import place_columns
from schemas.instructions import ITEMSIZE, NodePlan
from schemas.program import ClusterProgram
from schemas.units import Unit, UnitColumns, no_gc_pauses


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
    units = _longest_first(program, program.units if units is None else program.units.take_units(units))
    node_ids = [f.node for f in nodes]
    plan_uris, tensor_index = stored_tensors(program, uris)
    hosts = {f.node: f.host for f in nodes}
    reduction = program.reduction
    split = reduction is not None and reduction.shares > 1
    placed = place_columns(units, node_ids, hosts, reduction.hosts if split else (), split)
    flat = plan_arrays.flatten(placed, {t.name: i for i, t in enumerate(program.tensors)})
    tensors = _tensor_columns(program, tensor_index, flat.names)
    if np.any(flat.o_loaded & tensors.scratch[flat.k_tensor[flat.o_key]]):
        raise AssertionError("a partial is read before any launch writes it")
    r_scratch = tensors.scratch[flat.k_tensor[flat.r_key]]
    # The stages, in order (scheduler/planning/plan_arrays.py, plan_columns.py, plan_instructions.py):
    order = plan_arrays.node_order(flat, len(nodes))
    buffers = plan_arrays.number_buffers(flat, order, r_scratch)
    owners = plan_columns.choose_owners(flat, buffers, tensors, len(nodes))
    released = plan_columns.releases(flat, order, buffers, owners)
    peaks = plan_columns.peaks(flat, order, buffers, released, tensors, r_scratch, len(nodes))
    for figure, peak in zip(nodes, peaks, strict=True):
        check_fits(figure, peak)
    tables = plan_instructions.instructions(flat, order, buffers, owners, released, tensors, r_scratch,
                                            np.array(node_ids, np.int64), first_id)
    node_plans = {figure.node: NodePlan(figure.node, generation, table, peak, plan_uris)
                  for figure, table, peak in zip(nodes, tables, peaks, strict=True)}
    return Plan(generation, node_plans, placed.roots, len(owners.g_owner))


def stored_tensors(program: ClusterProgram, uris: Mapping[str, str]
                   ) -> tuple[tuple[str, ...], dict[str, int]]:
    """Every stored tensor's URI, once, in the program's order (loads and stores name a tensor by
    its index there), and that index by name. A partial is never stored and has none."""
    stored = [t.name for t in program.tensors if t.role != "partial"]
    for name in stored:
        if name not in uris:
            raise UserError(f"no storage URI for tensor {name}")
    return tuple(uris[name] for name in stored), {name: i for i, name in enumerate(stored)}


def check_fits(figure: NodeFigure, peak: int) -> None:
    """A plan whose peak a node's memory cannot hold is refused, naming the node."""
    if figure.vram_bytes and peak > figure.vram_bytes:
        raise UserError(
            f"node {figure.node} needs {_mib(peak)} of memory at its peak ({peak} bytes) but has "
            f"{_mib(figure.vram_bytes)} ({figure.vram_bytes} bytes): choose smaller @cluster values "
            f"or more nodes")


def _tensor_columns(program: ClusterProgram, stored_index: Mapping[str, int], names: list[str]
                    ) -> plan_columns.Tensors:
    """Per tensor of the program: item size, partial or not, index among the stored tensors,
    and its dtype's name (appended to `names`)."""
    dtype_name = []
    for t in program.tensors:
        if t.dtype not in names:
            names.append(t.dtype)
        dtype_name.append(names.index(t.dtype))
    return plan_columns.Tensors(
        np.array([ITEMSIZE[t.dtype] for t in program.tensors], np.int64),
        np.array([t.role == "partial" for t in program.tensors], bool),
        np.array([stored_index.get(t.name, -1) for t in program.tensors], np.int64),
        np.array(dtype_name, np.int64))


def _longest_first(program: ClusterProgram, units: UnitColumns) -> UnitColumns:
    flops = {leaf.name: leaf.flops for leaf in program.leaves}
    counts = np.diff(units.launch_start)
    if len(set(flops.values())) <= 1:  # every launch alike: the longest units have most launches
        if not any(flops.values()):
            return units  # no estimate: keep the order given
        work = counts
    else:
        each = np.array([flops.get(name, 0) for name in units.names], np.int64)[units.leaf]
        work = np.add.reduceat(each, units.launch_start[:-1]) if len(each) else counts
        work[counts == 0] = 0
    if len(work) == 0 or np.all(work == work[0]):
        return units  # the common case: nothing to reorder
    order = np.argsort(-work, kind="stable")  # stable: equals keep their order
    return units.take(order)


def _mib(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"
