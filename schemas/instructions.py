"""Per-node instructions, as plain frozen dataclasses.

The scheduler's planner produces them, the pod's state machine consumes them, and
`schemas/rpc.capnp` carries them between the two (the conversion lives beside the schema).
Every instruction has an `id` unique within its job and generation, and the ids of the
instructions (on the same node) that must complete before it may start.

Buffers are numbered per node. A buffer holds its tensor's storage dtype (f32, f16, bf16 or i32):
tiles are loaded, moved, held and stored in it, never widened.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from common import dtypes
from schemas.program import Region

ITEMSIZE = dtypes.ITEMSIZE  # bytes per element of each storage dtype (common/dtypes.py)


@dataclass(frozen=True)
class Allocate:
    id: int
    deps: tuple[int, ...]
    buffer: int
    shape: tuple[int, ...]
    dtype: str = "f32"  # the tensor's storage dtype


@dataclass(frozen=True)
class Load:
    """Read `region` of tensor `tensor` (an index into its plan's `uris`) into `buffer` (in the
    storage dtype)."""

    id: int
    deps: tuple[int, ...]
    buffer: int
    tensor: int
    region: Region


@dataclass(frozen=True)
class Fetch:
    """Copy buffer `peer_buffer` of node `peer` into local `buffer` (same shape)."""

    id: int
    deps: tuple[int, ...]
    buffer: int
    peer: int
    peer_buffer: int


@dataclass(frozen=True)
class Compute:
    """Launch leaf `leaf` with each tensor parameter bound to a local buffer.

    `unit` is the unit of work this launch belongs to (for traces and failure reports)."""

    id: int
    deps: tuple[int, ...]
    leaf: str
    bindings: tuple[tuple[str, int], ...]  # (tensor parameter, buffer)
    unit: int


@dataclass(frozen=True)
class Store:
    """Write `buffer` to `region` of the job's staging copy of tensor `tensor` (an index into its
    plan's `uris`)."""

    id: int
    deps: tuple[int, ...]
    buffer: int
    tensor: int
    region: Region
    unit: int


@dataclass(frozen=True)
class Free:
    """Release `buffer` once its local deps are done AND each node in `peers` has fetched it (or
    was lost to the job): a peer's fetch is not a local instruction, so its release call is how
    the owner knows, and naming the peers lets the owner stop waiting for one that died."""

    id: int
    deps: tuple[int, ...]
    buffer: int
    peers: tuple[int, ...] = ()  # the nodes that fetch this buffer, each once

    @property
    def serves(self) -> int:
        return len(self.peers)


Instruction = Allocate | Load | Fetch | Compute | Store | Free

KINDS = {Allocate: "allocate", Load: "load", Fetch: "fetch", Compute: "compute", Store: "store", Free: "free"}
KIND_NAMES = tuple(KINDS.values())  # the instruction kinds, in order, as events and traces name them


def kind_of(instruction: Instruction) -> str:
    return KINDS[type(instruction)]


def used_buffers(ins: Instruction) -> tuple[int, ...]:
    """The local buffers an instruction reads or writes (a Compute's bindings, else its buffer)."""
    if isinstance(ins, Compute):
        return tuple(buf for _, buf in ins.bindings)
    return (ins.buffer,)


def abandoned_by(instructions: Sequence[Instruction], roots: Iterable[int]) -> set[int]:
    """The instructions of one plan that can no longer run once `roots` (fetches whose peer was
    lost or failed) will not complete: the roots and every transitive dependent, except Frees.
    A Free stops the spread: its buffer is released whatever became of its users, so the
    allocations gated on it (later units) still go ahead. The pod drops exactly this set and the
    scheduler re-plans its units: both sides compute it with this one function."""
    dependents: dict[int, list[Instruction]] = {}
    for ins in instructions:
        for dep in ins.deps:
            dependents.setdefault(dep, []).append(ins)
    out = set(roots)
    todo = list(out)
    while todo:
        for ins in dependents.get(todo.pop(), ()):
            if not isinstance(ins, Free) and ins.id not in out:
                out.add(ins.id)
                todo.append(ins.id)
    return out


@dataclass(frozen=True)
class NodePlan:
    """One node's share of a job under one plan generation.

    A re-plan after a failure raises the generation; messages carrying an older one are refused.
    `peak_bytes` is the planner's figure for the node's largest simultaneous buffer footprint.
    `uris` states each tensor's storage URI once; loads and stores name a tensor by its index."""

    node: int
    generation: int
    instructions: Sequence[Instruction]  # a tuple, or the planner's InstructionTable
    peak_bytes: int
    uris: tuple[str, ...] = ()

    def decoded(self) -> NodePlan:
        """This plan with its instructions as a tuple of objects. The planner's table
        (schemas/instruction_table.py) decodes on every reading: a reader that goes over a plan
        many times decodes it once."""
        if isinstance(self.instructions, tuple):
            return self
        return dataclasses.replace(self, instructions=tuple(self.instructions))
