"""The one loader of phobos's Cap'n Proto schemas and the one converter of its dataclasses.

`schema(name)` loads `schemas/<name>` (program.capnp, rpc.capnp, job.capnp) once per process;
`read_message(struct, data)` reads bytes with the one set of reader limits below. The scheduler
and the pods talk in `schemas/rpc.capnp`; everything on either side works with the frozen
dataclasses of `schemas/instructions.py`, `schemas/program.py` and the few below (a plan's
instructions convert in `schemas/plan_io.py`, which the plans here use).
Each `write_*` fills a message builder in place (so it works on RPC request params as well as on
`new_message()` builders); each `read_*` returns a dataclass from a reader (or a builder).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import capnp

from common.paths import repo_file
from schemas.compiled_leaf import CompiledLeaf
from schemas.instructions import NodePlan
from schemas.leaf_io import read_compiled_leaf, write_compiled_leaf
from schemas.plan_io import read_plan, union_tag, write_plan
from schemas.program import ClusterProgram, Leaf, TensorInfo
from schemas.remote_errors import check

# Explicit reader limits for every RPC connection and every message read from bytes (job files
# included): a message (or a chain of them) larger than this is refused instead of being
# traversed. 64 MiB in 8-byte words, matching Cap'n Proto's own default, stated here so every
# side agrees.
TRAVERSAL_LIMIT_WORDS = 64 * 1024 * 1024 // 8
NESTING_LIMIT = 64
# Tiles move in chunks this size (and never more than MAX_CHUNK_BYTES in one readChunk).
CHUNK_BYTES = 4 * 1024 * 1024
MAX_CHUNK_BYTES = 16 * 1024 * 1024


@functools.cache
def schema(name: str):
    """The loaded `schemas/<name>` module (loaded once per process; imports resolve beside it)."""
    path = repo_file(f"schemas/{name}")
    return capnp.load(str(path), imports=[str(path.parent)])


def rpc():
    """The RPC schema (`schemas/rpc.capnp`)."""
    return schema("rpc.capnp")


@contextlib.contextmanager
def read_message(struct, data: bytes):
    """A reader of `data` as `struct` (e.g. `rpc().Plan`), under the reader limits above."""
    with struct.from_bytes(data, traversal_limit_in_words=TRAVERSAL_LIMIT_WORDS,
                           nesting_limit=NESTING_LIMIT) as reader:
        yield reader


# ---- dataclasses that exist only on the wire -------------------------------------------------


@dataclass(frozen=True)
class JobProgram:
    """What a pod needs of a job: leaves, scalar values, tensor infos.

    `compiled` maps a leaf name to the leaf compiled once by the scheduler for the pod's GPU
    (schemas/compiled_leaf.py), which the pod launches as it is; a leaf without an entry is
    prepared by the pod (a CPU pod's, always). `leaf_writes` maps a leaf name to the tensor parameters it
    stores to (how a pod knows when a buffer is final and may be served to peers)."""

    kernel: str
    leaves: tuple[Leaf, ...]
    scalars: tuple[tuple[str, float | int], ...]
    tensors: tuple[TensorInfo, ...]
    compiled: tuple[tuple[str, CompiledLeaf], ...] = ()
    leaf_writes: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def leaf(self, name: str) -> Leaf:
        for leaf in self.leaves:
            if leaf.name == name:
                return leaf
        raise KeyError(name)

    def writes_of(self, leaf_name: str) -> tuple[str, ...] | None:
        for name, writes in self.leaf_writes:
            if name == leaf_name:
                return writes
        return None


def job_program(program: ClusterProgram, scalars: dict[str, float | int],
                compiled: dict[str, CompiledLeaf] | None = None) -> JobProgram:
    """The pods' view of a cluster program; the leaves' written parameters come from its launches."""
    writes: dict[str, list[str]] = {leaf.name: [] for leaf in program.leaves}
    first = program.units.first_writes()
    writes.update(first)
    seen = set(first)
    return JobProgram(
        kernel=program.kernel,
        leaves=program.leaves,
        scalars=tuple((name, scalars[name]) for name in program.scalars),
        tensors=program.tensors,
        compiled=tuple(sorted((compiled or {}).items())),
        leaf_writes=tuple((name, tuple(w)) for name, w in writes.items() if name in seen),
    )


@dataclass(frozen=True)
class PodInfo:
    backend: str
    device_name: str
    vram_bytes: int
    pid: int
    host_id: str = ""
    device_index: int = -1
    compute_capability: int = 0  # the GPU's, major * 10 + minor; 0 for a CPU pod


@dataclass(frozen=True)
class TileHeader:
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    checksum: int
    data_port: int = 0
    ticket: bytes = b""


@dataclass(frozen=True)
class InstructionEvent:
    """One finished instruction on a pod, or one tile served (kind "serve", id = the buffer)."""

    id: int
    kind: str
    start: float
    end: float
    bytes: int = 0
    peer: int | None = None
    ok: bool = True
    message: str = ""
    unit: int | None = None
    leaf: str | None = None
    copy_s: float = 0.0  # load/store: the host<->device copy's share of start..end


@dataclass(frozen=True)
class Peer:
    node: int
    address: str


# ---- plain data ---------------------------------------------------------------------------------


def _write_named_ints(builder, name: str, items: tuple[tuple[str, int], ...]) -> None:
    lst = builder.init(name, len(items))
    for entry, (key, value) in zip(lst, items, strict=True):
        entry.name = key
        entry.value = int(value)


def _read_named_ints(lst) -> tuple[tuple[str, int], ...]:
    return tuple((entry.name, entry.value) for entry in lst)


def write_tensor_info(builder, info: TensorInfo) -> None:
    builder.name = info.name
    builder.dtype = info.dtype
    builder.shape = list(info.shape)
    builder.role = info.role


def read_tensor_info(reader) -> TensorInfo:
    return TensorInfo(name=reader.name, dtype=reader.dtype, shape=tuple(reader.shape), role=str(reader.role))


def write_leaf(builder, leaf: Leaf) -> None:
    builder.name = leaf.name
    builder.kernel = leaf.kernel
    builder.source = leaf.source
    _write_named_ints(builder, "dims", leaf.dims)
    _write_named_ints(builder, "tileValues", leaf.tile_values)
    builder.grid = list(leaf.grid)
    builder.threads = leaf.threads
    builder.tensors = list(leaf.tensors)
    builder.scalars = list(leaf.scalars)
    builder.flops = leaf.flops


def read_leaf(reader) -> Leaf:
    return Leaf(
        name=reader.name,
        kernel=reader.kernel,
        source=reader.source,
        dims=_read_named_ints(reader.dims),
        tile_values=_read_named_ints(reader.tileValues),
        grid=tuple(reader.grid),
        threads=reader.threads,
        tensors=tuple(reader.tensors),
        scalars=tuple(reader.scalars),
        flops=reader.flops,
    )


def write_leaf_code(builder, leaf: Leaf, compiled: CompiledLeaf | None = None,
                    writes: tuple[str, ...] = ()) -> None:
    write_leaf(builder.init("leaf"), leaf)
    if compiled is not None:
        write_compiled_leaf(builder.init("compiled"), compiled)
    builder.writes = list(writes)


def read_leaf_code(reader) -> tuple[Leaf, CompiledLeaf | None, tuple[str, ...]]:
    """The leaf, its compiled form (None when the pod prepares it) and its written parameters."""
    compiled = read_compiled_leaf(reader.compiled) if reader.compiled.leaf else None
    return read_leaf(reader.leaf), compiled, tuple(reader.writes)


def write_scalar(builder, name: str, value: float | int) -> None:
    builder.name = name
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"scalar {name!r} must be an int or a float, not {type(value).__name__}")
    if isinstance(value, int):
        builder.int = value
    else:
        builder.float = float(value)


def read_scalar(reader) -> tuple[str, float | int]:
    which = union_tag(reader)
    return reader.name, (reader.int if which == "int" else reader.float)


def write_program(builder, program: JobProgram) -> None:
    builder.kernel = program.kernel
    compiled = dict(program.compiled)
    leaves = builder.init("leaves", len(program.leaves))
    for entry, leaf in zip(leaves, program.leaves, strict=True):
        write_leaf_code(entry, leaf, compiled.get(leaf.name), program.writes_of(leaf.name) or ())
    scalars = builder.init("scalars", len(program.scalars))
    for entry, (name, value) in zip(scalars, program.scalars, strict=True):
        write_scalar(entry, name, value)
    tensors = builder.init("tensors", len(program.tensors))
    for entry, info in zip(tensors, program.tensors, strict=True):
        write_tensor_info(entry, info)


def read_program(reader) -> JobProgram:
    leaves, compiled, writes = [], [], []
    for entry in reader.leaves:
        leaf, leaf_compiled, leaf_writes = read_leaf_code(entry)
        leaves.append(leaf)
        if leaf_compiled is not None:
            compiled.append((leaf.name, leaf_compiled))
        if leaf_writes:
            writes.append((leaf.name, leaf_writes))
    return JobProgram(
        kernel=reader.kernel,
        leaves=tuple(leaves),
        scalars=tuple(read_scalar(s) for s in reader.scalars),
        tensors=tuple(read_tensor_info(t) for t in reader.tensors),
        compiled=tuple(compiled),
        leaf_writes=tuple(writes),
    )


# ---- submitting a plan (its instructions on the wire: plan_io.py) ------------------------------------


def write_peers(builder, name: str, peers: list[Peer] | tuple[Peer, ...]) -> None:
    lst = builder.init(name, len(peers))
    for entry, peer in zip(lst, peers, strict=True):
        entry.node = peer.node
        entry.address = peer.address


def read_peers(lst) -> tuple[Peer, ...]:
    return tuple(Peer(node=entry.node, address=entry.address) for entry in lst)


# Instructions per submit part: ~100 bytes each on the wire, so a part stays far below the 64 MiB limit.
PLAN_PART_INSTRUCTIONS = 200_000


async def send_submit(pod, job_id: str, program: JobProgram, plan: NodePlan, peers,
                      part_instructions: int = PLAN_PART_INSTRUCTIONS, staged: bool = True) -> None:
    """Submit `plan` to `pod` (a Pod capability), in parts when it is large (see rpc.capnp); a
    refused part raises remote_errors.Refused with the pod's kind and reason. `staged` false: the
    job's stores wait for `outputsStaged`."""

    peers = list(peers)
    count = len(plan.instructions)
    starts = list(range(0, count, part_instructions)) or [0]
    for n, start in enumerate(starts):
        last = n == len(starts) - 1
        part = NodePlan(node=plan.node, generation=plan.generation, peak_bytes=plan.peak_bytes,
                        instructions=plan.instructions[start:start + part_instructions], uris=plan.uris)
        request = pod.submit_request()
        request.jobId = job_id
        request.generation = plan.generation
        if n == 0:
            write_program(request.init("program"), program)
        write_plan(request.init("plan"), part)
        write_peers(request, "peers", peers if last else [])
        request.more = not last
        request.staged = staged
        check(await request.send())


# ---- pod descriptions, tiles, events ---------------------------------------------------------------


def write_pod_info(builder, info: PodInfo) -> None:
    builder.backend = info.backend
    builder.deviceName = info.device_name
    builder.vramBytes = info.vram_bytes
    builder.pid = info.pid
    builder.hostId = info.host_id
    builder.deviceIndex = info.device_index
    builder.computeCapability = info.compute_capability


def read_pod_info(reader) -> PodInfo:
    return PodInfo(
        backend=reader.backend,
        device_name=reader.deviceName,
        vram_bytes=reader.vramBytes,
        pid=reader.pid,
        host_id=reader.hostId,
        device_index=reader.deviceIndex,
        compute_capability=reader.computeCapability,
    )


def write_tile_header(builder, header: TileHeader) -> None:
    builder.shape = list(header.shape)
    builder.dtype = header.dtype
    builder.nbytes = header.nbytes
    builder.checksum = header.checksum
    builder.dataPort = header.data_port
    builder.ticket = header.ticket


def read_tile_header(reader) -> TileHeader:
    return TileHeader(shape=tuple(reader.shape), dtype=reader.dtype, nbytes=reader.nbytes,
                      checksum=reader.checksum, data_port=reader.dataPort, ticket=bytes(reader.ticket))


def write_event(builder, event: InstructionEvent) -> None:
    builder.id = event.id
    builder.kind = event.kind
    builder.start = event.start
    builder.end = event.end
    builder.bytes = event.bytes
    builder.peer = -1 if event.peer is None else event.peer
    builder.ok = event.ok
    builder.message = event.message
    builder.unit = -1 if event.unit is None else event.unit
    builder.leaf = event.leaf or ""
    builder.copySeconds = event.copy_s


def read_event(reader) -> InstructionEvent:
    return InstructionEvent(
        id=reader.id,
        kind=reader.kind,
        start=reader.start,
        end=reader.end,
        bytes=reader.bytes,
        peer=None if reader.peer < 0 else reader.peer,
        ok=reader.ok,
        message=reader.message,
        unit=None if reader.unit < 0 else reader.unit,
        leaf=reader.leaf or None,
        copy_s=reader.copySeconds,
    )


def write_events(builder, name: str, events: list[InstructionEvent] | tuple[InstructionEvent, ...]) -> None:
    lst = builder.init(name, len(events))
    for entry, event in zip(lst, events, strict=True):
        write_event(entry, event)


# ---- whole messages as bytes (tests, files) ------------------------------------------------------


def plan_to_bytes(plan: NodePlan) -> bytes:
    message = rpc().Plan.new_message()
    write_plan(message, plan)
    return message.to_bytes()


def plan_from_bytes(data: bytes) -> NodePlan:
    with read_message(rpc().Plan, data) as reader:
        return read_plan(reader)


def program_to_bytes(program: JobProgram) -> bytes:
    message = rpc().Program.new_message()
    write_program(message, program)
    return message.to_bytes()


def program_from_bytes(data: bytes) -> JobProgram:
    with read_message(rpc().Program, data) as reader:
        return read_program(reader)

