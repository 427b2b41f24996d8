"""An abstract cluster that runs node plans in a random order, as fast or slow nodes would.

Buffers hold symbolic values instead of numbers: a loaded buffer holds (region, ()), and a compute
appends (leaf, the regions it read) to the history of every buffer it writes. The simulator checks
every rule a pod would rely on (deps on the same node, fetches only from a live buffer of the
right peer, frees only after the promised serves, memory never above the plan's peak) and
returns what was stored, so tests can check each output got exactly its launches, once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from schemas.instructions import Allocate, Compute, Fetch, Free, Load, NodePlan, Store


class SimulationError(AssertionError):
    pass


@dataclass
class _Node:
    plan: NodePlan
    done: set[int] = field(default_factory=set)
    pending: dict[int, object] = field(default_factory=dict)
    buffers: dict[int, list] = field(default_factory=dict)  # buffer -> [shape, value, served]
    memory: int = 0
    peak: int = 0


def simulate(plans: dict[int, NodePlan], writes: dict[str, tuple[str, ...]], seed: int = 0,
             check_peak: bool = True, partials: bool = False) -> dict:
    """`partials`: a split reduction's merges read computed values (another share's partial), which
    are then recorded whole in the reader's history."""
    rng = random.Random(seed)
    nodes = {n: _Node(p, pending={i.id: i for i in p.instructions}) for n, p in plans.items()}
    stores: dict = {}
    while any(node.pending for node in nodes.values()):
        ready = [(n, ins) for n, node in nodes.items() for ins in node.pending.values()
                 if _can_run(nodes, n, ins, writes)]
        if not ready:
            stuck = {n: sorted(node.pending)[:5] for n, node in nodes.items() if node.pending}
            raise SimulationError(f"deadlock: nothing can run; pending {stuck}")
        n, ins = rng.choice(ready)
        _run(nodes, n, ins, stores, writes, partials)
    for n, node in nodes.items():
        if node.buffers:
            raise SimulationError(f"node {n} ends with buffers still allocated: {sorted(node.buffers)}")
        if check_peak and node.peak > node.plan.peak_bytes:
            raise SimulationError(f"node {n} used {node.peak} bytes, plan promised {node.plan.peak_bytes}")
    return stores


def _can_run(nodes, n, ins, writes) -> bool:
    node = nodes[n]
    if not all(d in node.done for d in ins.deps):
        return False
    if isinstance(ins, Fetch):  # a pod serves a buffer once every instruction filling it is done
        peer = nodes[ins.peer].buffers.get(ins.peer_buffer)
        ready = peer is not None and peer[1] is not None
        return ready and not _fills_pending(nodes[ins.peer], ins.peer_buffer, writes)
    if isinstance(ins, Free):
        return node.buffers[ins.buffer][2] >= ins.serves
    return True


def _fills_pending(node: _Node, buffer: int, writes) -> bool:
    for other in node.pending.values():
        if isinstance(other, Load | Fetch) and other.buffer == buffer:
            return True
        if isinstance(other, Compute) and any(b == buffer and p in writes[other.leaf]
                                              for p, b in other.bindings):
            return True
    return False


def _run(nodes, n, ins, stores, writes, partials=False) -> None:
    node = nodes[n]
    del node.pending[ins.id]
    node.done.add(ins.id)
    if isinstance(ins, Allocate):
        if ins.buffer in node.buffers:
            raise SimulationError(f"node {n} allocates buffer {ins.buffer} twice")
        node.buffers[ins.buffer] = [ins.shape, None, 0]
        node.memory += 4 * _size(ins.shape)
        node.peak = max(node.peak, node.memory)
    elif isinstance(ins, Load):
        buf = node.buffers[ins.buffer]
        if tuple(buf[0]) != tuple(ins.region.shape):
            raise SimulationError(f"load of {ins.region} into a buffer of shape {buf[0]}")
        buf[1] = (ins.region, ())
    elif isinstance(ins, Fetch):
        src = nodes[ins.peer].buffers[ins.peer_buffer]
        src[2] += 1
        node.buffers[ins.buffer][1] = src[1]
    elif isinstance(ins, Compute):
        written = writes[ins.leaf]
        inputs = []
        for param, b in ins.bindings:
            value = node.buffers[b][1]
            if param not in written:
                if value is None or (value[1] and not partials):
                    raise SimulationError(f"compute {ins.id} reads {param} from buffer {b} holding {value}")
                inputs.append((param, value if value[1] else value[0]))
        for param, b in ins.bindings:
            if param in written:
                value = node.buffers[b][1] or (None, ())
                node.buffers[b][1] = (value[0], value[1] + ((ins.leaf, tuple(sorted(inputs))),))
    elif isinstance(ins, Store):
        key = (ins.region, ins.tensor)
        if key in stores:
            raise SimulationError(f"{ins.region} stored twice")
        stores[key] = (ins.unit, node.buffers[ins.buffer][1])
    elif isinstance(ins, Free):
        shape = node.buffers.pop(ins.buffer)[0]
        node.memory -= 4 * _size(shape)


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
