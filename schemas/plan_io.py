"""A node plan on the wire: its instructions (allocate, load, fetch, compute, store, free) and
their regions, written into and read from `rpc.capnp`'s Plan and Instruction builders; the rest
of the messages, the loader and the reader limits are capnp_io.py's. Plans run to hundreds of
thousands of instructions, so the readers here take the cheap paths (union_tag)."""

from __future__ import annotations

from schemas.instructions import Allocate, Compute, Fetch, Free, Instruction, Load, NodePlan, Store
from schemas.program import Region


def write_region(builder, region: Region) -> None:
    builder.tensor = region.tensor
    builder.start = list(region.start)
    builder.shape = list(region.shape)


def read_region(reader) -> Region:
    return Region(tensor=reader.tensor, start=tuple(reader.start), shape=tuple(reader.shape))


def write_instruction(builder, ins: Instruction) -> None:
    builder.id = ins.id
    builder.deps = list(ins.deps)
    if isinstance(ins, Allocate):
        body = builder.init("allocate")
        body.buffer = ins.buffer
        body.shape = list(ins.shape)
        body.dtype = ins.dtype
    elif isinstance(ins, Load):
        body = builder.init("load")
        body.buffer = ins.buffer
        body.tensor = ins.tensor
        write_region(body.init("region"), ins.region)
    elif isinstance(ins, Fetch):
        body = builder.init("fetch")
        body.buffer = ins.buffer
        body.peer = ins.peer
        body.peerBuffer = ins.peer_buffer
    elif isinstance(ins, Compute):
        body = builder.init("compute")
        body.leaf = ins.leaf
        body.unit = ins.unit
        bindings = body.init("bindings", len(ins.bindings))
        for entry, (param, buffer) in zip(bindings, ins.bindings, strict=True):
            entry.param = param
            entry.buffer = buffer
    elif isinstance(ins, Store):
        body = builder.init("store")
        body.buffer = ins.buffer
        body.tensor = ins.tensor
        body.unit = ins.unit
        write_region(body.init("region"), ins.region)
    elif isinstance(ins, Free):
        body = builder.init("free")
        body.buffer = ins.buffer
        body.serves = ins.serves
        lst = body.init("peers", len(ins.peers))
        for i, node in enumerate(ins.peers):
            lst[i] = node
    else:
        raise TypeError(f"not an instruction: {ins!r}")


def union_tag(reader) -> str:
    """Which member of a struct's unnamed union is set."""
    # pycapnp's `which()` builds an enum object (~2 us); `_which_str()` is ~0.3 us and matters on
    # plans of hundreds of thousands of instructions
    which_str = getattr(reader, "_which_str", None)
    return which_str() if which_str is not None else str(reader.which())


def read_instruction(reader) -> Instruction:
    ident, deps = reader.id, tuple(reader.deps)
    which = union_tag(reader)
    if which == "allocate":
        b = reader.allocate
        return Allocate(id=ident, deps=deps, buffer=b.buffer, shape=tuple(b.shape), dtype=b.dtype or "f32")
    if which == "load":
        b = reader.load
        return Load(id=ident, deps=deps, buffer=b.buffer, tensor=b.tensor, region=read_region(b.region))
    if which == "fetch":
        b = reader.fetch
        return Fetch(id=ident, deps=deps, buffer=b.buffer, peer=b.peer, peer_buffer=b.peerBuffer)
    if which == "compute":
        b = reader.compute
        bindings = tuple((entry.param, entry.buffer) for entry in b.bindings)
        return Compute(id=ident, deps=deps, leaf=b.leaf, bindings=bindings, unit=b.unit)
    if which == "store":
        b = reader.store
        region = read_region(b.region)
        return Store(id=ident, deps=deps, buffer=b.buffer, tensor=b.tensor, region=region, unit=b.unit)
    if which == "free":
        b = reader.free
        peers = tuple(b.peers)
        if len(peers) != b.serves:
            raise ValueError(f"free {ident}: waits for {b.serves} serves but names {len(peers)} peers")
        return Free(id=ident, deps=deps, buffer=b.buffer, peers=peers)
    raise ValueError(f"unknown instruction kind {which!r}")


def write_plan(builder, plan: NodePlan) -> None:
    builder.node = plan.node
    builder.generation = plan.generation
    builder.peakBytes = plan.peak_bytes
    builder.uris = list(plan.uris)
    lst = builder.init("instructions", len(plan.instructions))
    for entry, ins in zip(lst, plan.instructions, strict=True):
        write_instruction(entry, ins)


def read_plan(reader) -> NodePlan:
    return NodePlan(
        node=reader.node,
        generation=reader.generation,
        instructions=tuple(read_instruction(entry) for entry in reader.instructions),
        peak_bytes=reader.peakBytes,
        uris=tuple(reader.uris),
    )
