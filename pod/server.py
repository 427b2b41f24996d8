"""The pod's asyncio shell: the Gate/Pod RPC interfaces, peer fetches, heartbeats, event reports.

One event loop (uvloop; schemas/rpc_streams.py runs it) runs everything:
pycapnp's RPC (every connection read with explicit traversal and nesting limits), the scheduler
link (heartbeats every --heartbeat-interval, events batched with at most one batch in flight) and
the instructions (pod/runtime.py). The pod exits when its scheduler's connection drops, when
heartbeats keep failing for --scheduler-timeout, or on `shutdown`; on the way out it frees every
buffer. With --keep-serving it instead drops that scheduler's jobs, frees their buffers and waits
for the next scheduler's hello (pods started once serve job after job; docs/runtime.md).
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from dataclasses import dataclass
from pathlib import Path

import capnp
import numpy as np

from common import storage
from common.log import get_logger
from pod import state as st
from pod.backend_cpu import host_id
from pod.gate import LOGIN_TIMEOUT_S, MAX_PENDING_LOGINS, REFUSAL_DELAY_S, FrontDoor, Stranger
from pod.runtime import NOT_READY, BufferRecord, Job, PodRuntime
from pod.transfer import TransferError, byte_view, check_crc, chunk_ranges, fetch_by_ticket, verify
from schemas import capnp_io, rpc_streams
from schemas.capnp_io import (
    CHUNK_BYTES,
    MAX_CHUNK_BYTES,
    NESTING_LIMIT,
    TRAVERSAL_LIMIT_WORDS,
    PodInfo,
)
from schemas.instructions import Fetch, NodePlan
from schemas.remote_errors import remote_reason as _one_line

log = get_logger()
rpc = capnp_io.rpc()
CHUNKS_IN_FLIGHT = 4
PEER_FAILURE_QUIET_S = 2.0  # no collection this long after a connection failed or closed
EVENT_BATCH = 1024


@dataclass(frozen=True)
class PodConfig:
    host: str
    port: int
    token: str
    roots: tuple[Path, ...]
    heartbeat_interval: float = 0.5
    scheduler_timeout: float = 5.0  # heartbeats failing this long: the scheduler is gone, exit
    fetch_timeout: float = 30.0  # patience with a peer: tile not ready, or no bytes arriving
    data_port: bool = True  # offer tiles on a ticketed bulk TCP port (else: chunks over the RPC)
    keep_serving: bool = False  # when the scheduler goes: drop its jobs and wait for the next one
    login_timeout: float = LOGIN_TIMEOUT_S  # a connection not logged in by then is closed
    max_pending_logins: int = MAX_PENDING_LOGINS  # connections not logged in, at most
    refusal_delay: float = REFUSAL_DELAY_S  # a refused login is answered this late


class PeerLink:
    def __init__(self, client, pod, info: PodInfo):
        self.client, self.pod, self.info = client, pod, info


class PodServer:
    def __init__(self, config: PodConfig, backend):
        self.config = config
        self.backend = backend
        self.runtime = PodRuntime(backend, list(config.roots), config.host if config.data_port else None)
        self.runtime.fetcher = self.fetch
        self.runtime.report = self._queue_event
        self.runtime.report_finished = self._queue_finished
        self.runtime.events_delivered = self.events_delivered
        self.stop = asyncio.Event()
        self.door = FrontDoor(config.token, config.login_timeout, config.max_pending_logins,
                              config.refusal_delay)
        self.sink = None
        self.sink_conn: Stranger | None = None
        self.node = 0
        self.peers: dict[str, PeerLink] = {}
        # Links to peers that failed are kept, never freed: a dead connection's client caught in a
        # reference cycle (an exception's traceback) and torn down by the cycle collector in the
        # wrong order crashes the process (SIGSEGV, seen in tests/faults).
        self.retired_peers: list[PeerLink] = []
        self.last_peer_failure: float | None = None  # monotonic time; see _collect_garbage
        self.partial_plans: dict[tuple[str, int], tuple] = {}  # (job, generation) -> parts so far
        self.outbox: list[tuple] = []
        self.outbox_ready = asyncio.Event()
        self.outbox_delivered = 0  # items the scheduler took, ever (see events_delivered)
        self.delivery_waiters: list[tuple[int, asyncio.Future]] = []
        self.background: set[asyncio.Task] = set()
        self.lease_from: float | None = None  # send time of the last heartbeat the scheduler took
        self.declared_dead = ""  # the scheduler's refusal, once it has declared this pod dead
        self.heartbeats: asyncio.Task | None = None
        self.heartbeat_sink = None  # the scheduler `heartbeats` reports to
        self.runtime.store_refusal = self._store_refusal
        name, memory = backend.describe()
        self.info = PodInfo(backend=backend.kind, device_name=name, vram_bytes=memory, pid=os.getpid(),
                            host_id=host_id(), device_index=backend.device_index)

    # ---- serving ---------------------------------------------------------------------------

    async def serve(self, on_listening) -> int:
        server = await rpc_streams.serve(self._connection, self.config.host, self.config.port)
        host, port = server.sockets[0].getsockname()[:2]
        on_listening(host, port)
        self._spawn(self._sender())
        self._spawn(self._collect_garbage())
        self._spawn(self._log_strangers())
        try:
            await self.stop.wait()
        finally:
            server.close()
            self.runtime.close()
            for task in list(self.background) + list(self.runtime.tasks):
                task.cancel()
        return 0

    async def _collect_garbage(self) -> None:
        """Run Python's cycle collector on this (the event loop's) thread only.

        Cap'n Proto objects (a dead peer's client, a failed call's promise) caught in a reference
        cycle are freed whenever the collector runs, and left automatic it runs in whatever thread
        allocates at that moment: a storage or compute worker, where destroying a KJ object aborts
        the whole process ("No event loop is running on this thread"; seen when a peer died
        mid-fetch). So automatic collection is off and this task collects every 0.5 s.

        Even here, collecting the remains of a connection that just died can crash (SIGSEGV inside
        the collector, seen about once in a hundred kill-matrix runs). So after a peer fails,
        nothing is collected until things have been quiet for PEER_FAILURE_QUIET_S; then
        everything alive, the dead connection's remains included, is frozen (gc.freeze: never
        collected, a small bounded leak per failure) and collection resumes for new garbage.

        Collection stays off when the pod stops: re-enabled, it ran while the KJ loop was torn
        down and segfaulted there (a zombie pod exiting), so the process ends without it
        (pod/cli.py leaves through os._exit)."""
        gc.disable()
        while not self.stop.is_set():
            await asyncio.sleep(0.5)
            failed = self.last_peer_failure
            if failed is not None:
                if time.monotonic() - failed < PEER_FAILURE_QUIET_S:
                    continue
                gc.freeze()
                self.last_peer_failure = None
            gc.collect()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _connection(self, stream, peer: str) -> None:
        conn = self.door.arrive(peer, stream)
        if conn is None:
            return  # at the cap of connections not logged in: closed before a byte was read
        gate = GateImpl(self.door, conn, lambda: PodImpl(self, conn))
        server = capnp.TwoPartyServer(stream, bootstrap=gate, traversal_limit_in_words=TRAVERSAL_LIMIT_WORDS,
                                      nesting_limit=NESTING_LIMIT)
        broken = ""
        try:
            await server.on_disconnect()
        except Exception as err:  # a malformed or oversized message ends that connection only
            broken = _one_line(err)
        self.door.leave(conn, broken)
        if not conn.logged_in:
            return  # a stranger's connection held no call of ours: its remains are collected
        if broken:
            log.warning("connection closed", reason=broken, peer=peer)
        self.last_peer_failure = time.monotonic()  # its remains are frozen, not collected
        if conn is self.sink_conn:
            self._scheduler_gone("scheduler connection dropped")

    async def _log_strangers(self) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(1.0)
            self.door.flush_log()

    # ---- the scheduler link --------------------------------------------------------------------

    def hello(self, scheduler, node: int, conn: Stranger) -> None:
        self.sink, self.sink_conn, self.node = scheduler, conn, node
        self.runtime.node = node
        self.lease_from = time.monotonic()
        self.declared_dead = ""
        # A heartbeat loop serves one scheduler and ends once another has said hello; so a new
        # scheduler gets a loop of its own even while the old one is still winding down (a new
        # session on pods whose last session is still connected: the kill-matrix soak).
        if self.heartbeats is None or self.heartbeats.done() or self.heartbeat_sink is not scheduler:
            self.heartbeat_sink = scheduler
            self.heartbeats = asyncio.ensure_future(self._heartbeat())
            self.background.add(self.heartbeats)
            self.heartbeats.add_done_callback(self.background.discard)
        self.outbox_ready.set()

    def _scheduler_gone(self, why: str, **details) -> None:
        """The scheduler left (or declared this pod dead): exit, or with --keep-serving drop its
        work and wait for the next scheduler. Nothing of its jobs may be written or served after
        this: their instructions are cancelled (a store already writing finishes its tile, the
        window docs/runtime.md names) and their buffers freed."""
        if not self.config.keep_serving:
            log.warning(f"{why}; exiting", **details)
            self.stop.set()
            return
        log.info(f"{why}; dropping its jobs and waiting for the next scheduler", **details)
        self.runtime.drop_all()
        for task in list(self.runtime.tasks):
            task.cancel()
        self.partial_plans.clear()
        self.outbox.clear()
        self._delivered(0, everything=True)
        self.sink, self.sink_conn, self.lease_from = None, None, None

    async def _heartbeat(self) -> None:
        interval = self.config.heartbeat_interval
        last_ok = time.monotonic()
        unanswered = 0  # heartbeats in a row that got no answer in time
        sink = self.sink
        while not self.stop.is_set() and sink is not None and sink is self.sink:
            generation, running = self.runtime.running()
            sent = time.monotonic()
            try:
                await asyncio.wait_for(sink.heartbeat(self.node, generation, running),
                                       timeout=max(interval, self.config.scheduler_timeout))
                last_ok = self.lease_from = sent
                unanswered = 0
            except Exception as err:
                unanswered += isinstance(err, TimeoutError)
                reason = _one_line(err)
                if "declared dead" in reason:
                    # Too late (paused, or cut off): the scheduler has re-planned this pod's work.
                    # Nothing it still holds may be written or served; free everything and exit.
                    self.declared_dead = reason
                    self.runtime.drop_all()
                    await asyncio.sleep(0.1)  # let pending stores see the refusal (and log it)
                    if sink is self.sink:
                        self._scheduler_gone("the scheduler declared this pod dead")
                    return
                # Gone only after a second unanswered heartbeat: one sent before this process was
                # frozen (SIGSTOP, a paused VM) times out the moment it wakes, however alive the
                # scheduler is; the next one finds out, and a pod declared dead then says so.
                silent_s = time.monotonic() - last_ok
                gone = silent_s > self.config.scheduler_timeout and unanswered >= 2
                if "disconnect" in reason.lower() or gone:
                    if sink is self.sink:
                        self._scheduler_gone("scheduler unreachable", reason=reason)
                    return
            await asyncio.sleep(interval)

    async def _store_refusal(self) -> str | None:
        """A store writes only under a live lease: within --scheduler-timeout of sending a heartbeat
        the scheduler took. The scheduler declares a pod dead only after --heartbeat-timeout of
        silence (local pods get the same value), so a pod that was paused past it cannot write a
        late tile: it waits for its next heartbeat, which the scheduler refuses."""
        if self.sink is None:
            return None  # no scheduler: nobody can re-plan this work behind our back
        timeout = self.config.scheduler_timeout
        # No deadline of its own: a slow scheduler delays the store, it does not fail it; a gone
        # one ends the pod (the heartbeat loop stops it after --scheduler-timeout of failures).
        while True:
            if self.declared_dead:
                return f"the scheduler declared this pod dead ({self.declared_dead})"
            if self.lease_from is not None and time.monotonic() - self.lease_from < timeout * 0.75:
                return None
            if self.stop.is_set():
                return "the pod is stopping"
            await asyncio.sleep(min(0.05, self.config.heartbeat_interval / 2))

    def _queue_event(self, job_id: str, generation: int, event: capnp_io.InstructionEvent) -> None:
        self.outbox.append(("event", job_id, generation, event))
        self.outbox_ready.set()

    def _queue_finished(self, job_id: str, generation: int, ok: bool, message: str) -> None:
        self.outbox.append(("finished", job_id, generation, ok, message))
        self.outbox_ready.set()
        level = log.info if ok else log.warning
        level("plan finished", job=job_id, generation=generation, ok=ok, message=message)

    async def _sender(self) -> None:
        """Send queued events in order, batched per (job, generation), one call in flight."""
        while not self.stop.is_set():
            await self.outbox_ready.wait()
            self.outbox_ready.clear()
            while self.outbox and self.sink is not None:
                head = self.outbox[0]
                try:
                    if head[0] == "finished":
                        _, job_id, generation, ok, message = head
                        await self.sink.finished(self.node, job_id, generation, ok, message)
                        self.outbox.pop(0)
                        self._delivered(1)
                        continue
                    batch = []
                    for item in self.outbox:
                        if item[0] != "event" or item[1:3] != head[1:3] or len(batch) >= EVENT_BATCH:
                            break
                        batch.append(item[3])
                    request = self.sink.events_request()
                    request.node, request.generation, request.jobId = self.node, head[2], head[1]
                    capnp_io.write_events(request, "events", batch)
                    await request.send()
                    del self.outbox[:len(batch)]
                    self._delivered(len(batch))
                except Exception as err:
                    log.warning("reporting to the scheduler failed", reason=_one_line(err))
                    await asyncio.sleep(self.config.heartbeat_interval)  # the heartbeat decides if it is gone

    def _delivered(self, count: int, everything: bool = False) -> None:
        self.outbox_delivered += count
        waiting = []
        for target, fut in self.delivery_waiters:
            if everything or target <= self.outbox_delivered:
                if not fut.done():
                    fut.set_result(None)
            else:
                waiting.append((target, fut))
        self.delivery_waiters = waiting

    async def events_delivered(self) -> None:
        """Return once the scheduler has taken every event queued so far.

        A unit's first compute waits for this (pod/runtime.py), so that when its leaf takes the
        pod down at once, the scheduler already knows the compute's inputs were done and charges
        the unit. One round trip per unit; a slow or gone scheduler delays the compute by at
        most --scheduler-timeout (after that the pod is exiting anyway), never blocks it."""
        if self.sink is None or not self.outbox:
            return
        fut = asyncio.get_running_loop().create_future()
        # The outbox loses items only as the scheduler takes them, so this counts what is queued.
        self.delivery_waiters.append((self.outbox_delivered + len(self.outbox), fut))
        try:
            async with asyncio.timeout(self.config.scheduler_timeout):
                await fut
        except TimeoutError:
            pass

    # ---- fetching from peers ---------------------------------------------------------------------

    async def _peer(self, address: str) -> PeerLink:
        link = self.peers.get(address)
        if link is not None:
            return link
        host, port = split_address(address)
        stream = await asyncio.wait_for(rpc_streams.connect(host, port),
                                        self.config.fetch_timeout)
        client = capnp.TwoPartyClient(stream, traversal_limit_in_words=TRAVERSAL_LIMIT_WORDS,
                                      nesting_limit=NESTING_LIMIT)
        pod = await rpc_streams.login(client, self.config.token, self.config.fetch_timeout)
        info = capnp_io.read_pod_info((await asyncio.wait_for(pod.info(), self.config.fetch_timeout)).info)
        link = self.peers[address] = PeerLink(client, pod, info)
        return link

    def _retire_peer(self, address: str) -> None:
        self.last_peer_failure = time.monotonic()
        link = self.peers.pop(address, None)
        if link is not None:
            self.retired_peers.append(link)

    async def fetch(self, job: Job, generation: int, ins: Fetch, address: str, record: BufferRecord) -> None:
        try:
            await self._fetch(job, generation, ins, address, record)
        except (TransferError, st.Refused):
            raise
        except TimeoutError:
            self._retire_peer(address)
            raise TransferError(f"node {ins.peer} ({address}) did not answer within "
                                f"{self.config.fetch_timeout:g} s") from None
        except Exception as err:
            self._retire_peer(address)
            raise TransferError(f"fetch from node {ins.peer} ({address}): {_one_line(err)}") from None

    async def _fetch(self, job: Job, generation: int, ins: Fetch, address: str, record: BufferRecord) -> None:
        loop = asyncio.get_running_loop()
        patience = self.config.fetch_timeout
        link = await self._peer(address)
        shape = tuple(record.array.shape)
        if self._ipc_possible(link):
            try:
                await self._fetch_ipc(job, generation, ins, link, record)
                return
            except Exception as err:  # fall back to the host path, saying why
                log.info("CUDA IPC fetch failed; using the host path", reason=_one_line(err))
        reply = await self._ask_owner(job, generation, ins,
                                      lambda: link.pod.tileHeader(job.job_id, generation, ins.peer_buffer))
        header = capnp_io.read_tile_header(reply.header)
        _check_same_tile(header, record, self.backend.host_dtype(record.array), ins)
        into = self.backend.host_view(record.array)
        if into is None:
            into = np.empty(shape, self.backend.host_dtype(record.array))
        host = split_address(address)[0]
        bulk = bool(header.data_port)
        if bulk:
            try:
                crc = await loop.run_in_executor(self.runtime.io_pool, fetch_by_ticket, host,
                                                 header.data_port, header.ticket, into, patience)
                check_crc(crc, header.checksum, f"node {ins.peer}")
            except TransferError as err:
                log.info("bulk path failed; reading chunks over the RPC", reason=str(err))
                bulk = False
        if not bulk:
            await self._fetch_chunks(job, generation, ins, link, header.nbytes, into)
            await loop.run_in_executor(self.runtime.io_pool, verify, into, header.checksum,
                                       f"node {ins.peer}")
        log.debug("fetched", job=job.job_id, instruction=ins.id, bytes=header.nbytes,
                  path="bulk-port" if bulk else "rpc-chunks")
        if self.backend.host_view(record.array) is None:
            await loop.run_in_executor(self.runtime.io_pool, self.backend.upload, record.array, into)
        self._release(link, job, generation, ins, header.nbytes)

    async def _fetch_chunks(self, job, generation, ins, link, nbytes: int, into: np.ndarray) -> None:
        view = byte_view(into)
        slots = asyncio.Semaphore(CHUNKS_IN_FLIGHT)

        async def one(offset: int, length: int) -> None:
            async with slots:
                reply = await asyncio.wait_for(
                    link.pod.readChunk(job.job_id, generation, ins.peer_buffer, offset, length),
                    self.config.fetch_timeout)
                data = reply.data
                if len(data) != length:
                    raise TransferError(f"node {ins.peer} sent {len(data)} bytes for a {length}-byte chunk")
                view[offset:offset + length] = data

        await asyncio.gather(*(one(o, n) for o, n in chunk_ranges(nbytes, CHUNK_BYTES)))

    async def _ask_owner(self, job: Job, generation: int, ins: Fetch, ask):
        """The owner's reply to `ask()` (tileHeader or ipcHandle), once the owner has the tile.

        The owner waits up to --fetch-timeout for the tile, then answers "not ready". Such an
        owner is alive and answering; what it waits for may be slow (a big leaf) or stuck on a
        third node, which whoever fetches from that node directly will blame. So it is asked
        again for as long as this plan is current: only an owner that does not answer (within
        its wait plus 5 s), breaks the connection or sends a bad tile is blamed."""
        while True:
            try:
                return await asyncio.wait_for(ask(), self.config.fetch_timeout + 5)
            except Exception as err:
                if NOT_READY not in _one_line(err) or not job.state.is_current(generation):
                    raise
            log.info("tile not ready at its owner yet; asking again", job=job.job_id, instruction=ins.id,
                     peer=ins.peer)

    def _ipc_possible(self, link: PeerLink) -> bool:
        return (self.backend.kind == "gpu" and link.info.backend == "gpu"
                and link.info.host_id == self.info.host_id and link.info.pid != self.info.pid)

    async def _fetch_ipc(self, job, generation, ins, link, record) -> None:
        reply = await self._ask_owner(job, generation, ins,
                                      lambda: link.pod.ipcHandle(job.job_id, generation, ins.peer_buffer))
        header = capnp_io.read_tile_header(reply.header)
        _check_same_tile(header, record, self.backend.host_dtype(record.array), ins)
        await asyncio.get_running_loop().run_in_executor(
            self.runtime.io_pool, self.backend.copy_from_ipc, record.array, bytes(reply.handle),
            reply.deviceIndex)
        self._release(link, job, generation, ins, header.nbytes)
        log.debug("fetched", job=job.job_id, instruction=ins.id, bytes=header.nbytes, path="cuda-ipc")

    def _release(self, link: PeerLink, job: Job, generation: int, ins: Fetch, nbytes: int) -> None:
        """Tell the owner its tile arrived (so it may free it once every peer has it), without
        holding the fetch up for the answer: the tile is here and checked, and an owner that
        is gone by now is the heartbeats' business, not this fetch's."""
        async def release() -> None:
            try:
                await asyncio.wait_for(link.pod.release(job.job_id, generation, ins.peer_buffer, self.node,
                                                        nbytes), self.config.fetch_timeout)
            except Exception as err:
                log.info("release to the tile's owner failed", peer=ins.peer, reason=_one_line(err))

        self._spawn(release())


def _check_same_tile(header, record: BufferRecord, dtype, ins: Fetch) -> None:
    """The owner's tile must have the local buffer's shape and dtype (tiles are never converted)."""
    shape, name = tuple(record.array.shape), storage.dtype_name(dtype)
    if tuple(header.shape) != shape or (header.dtype or "f32") != name:
        raise TransferError(f"node {ins.peer} buffer {ins.peer_buffer} is {header.dtype}"
                            f"{list(header.shape)}, local buffer {ins.buffer} is {name}{list(shape)}")


async def _read_plan(reader) -> NodePlan:
    """Decode a plan, letting heartbeats and peers in every few thousand instructions (decoding
    costs ~20 us an instruction, so a plan of 10^5 would otherwise hold the loop for seconds)."""
    instructions = []
    for i, entry in enumerate(reader.instructions):
        instructions.append(capnp_io.read_instruction(entry))
        if i % 4096 == 4095:
            await asyncio.sleep(0)
    return NodePlan(node=reader.node, generation=reader.generation, instructions=tuple(instructions),
                    peak_bytes=reader.peakBytes)


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


# ---- the RPC interfaces ------------------------------------------------------------------------


class GateImpl(rpc.Gate.Server):
    """The bootstrap capability: `login` is the only thing a connection can call before login."""

    def __init__(self, door: FrontDoor, stranger: Stranger, make_pod):
        self.door, self.stranger, self.make_pod = door, stranger, make_pod

    async def login(self, token, _context, **kwargs):
        refusal = await self.door.check(self.stranger, token)
        results = rpc_streams.results_of_live_call(_context)
        results.refusal = refusal
        if refusal == "none":
            results.pod = self.make_pod()


class PodImpl(rpc.Pod.Server):
    """Every method refuses with a one-line reason; nothing here can take the process down."""

    def __init__(self, pod: PodServer, conn: Stranger):
        self.pod, self.conn = pod, conn
        self.runtime = pod.runtime

    async def hello(self, scheduler, node, _context, **kwargs):
        self.pod.hello(scheduler, node, self.conn)
        capnp_io.write_pod_info(_context.results.info, self.pod.info)
        log.info("scheduler said hello", node=node)

    async def info(self, _context, **kwargs):
        capnp_io.write_pod_info(_context.results.info, self.pod.info)

    async def submit(self, jobId, generation, program, plan, peers, more, _context, **kwargs):
        node_plan = await _read_plan(plan)
        if node_plan.generation != generation:
            raise st.Refused(f"submit: plan generation {node_plan.generation} differs from {generation}")
        key = (jobId, generation)
        parts = self.pod.partial_plans
        if key in parts:  # a continuation: join it to the parts so far
            first_program, earlier = parts.pop(key)
            node_plan = NodePlan(node=node_plan.node, generation=generation, peak_bytes=node_plan.peak_bytes,
                                 instructions=earlier + node_plan.instructions)
        else:
            first_program = capnp_io.read_program(program)
        if more:
            self.runtime.job(jobId).state.check_generation(generation)
            parts[key] = (first_program, node_plan.instructions)
            return
        await self.runtime.submit(jobId, first_program, node_plan, capnp_io.read_peers(peers))
        log.info("plan submitted", job=jobId, generation=generation,
                 instructions=len(node_plan.instructions))

    async def tileHeader(self, jobId, generation, buffer, _context, **kwargs):
        header = await self.runtime.tile_header(jobId, generation, buffer, self.pod.config.fetch_timeout)
        capnp_io.write_tile_header(rpc_streams.results_of_live_call(_context).header, header)

    async def readChunk(self, jobId, generation, buffer, offset, length, _context, **kwargs):
        if length > MAX_CHUNK_BYTES:
            raise st.Refused(f"readChunk: {length} bytes is more than the {MAX_CHUNK_BYTES}-byte limit")
        _context.results.data = self.runtime.read_chunk(jobId, generation, buffer, offset, length)

    async def release(self, jobId, generation, buffer, node, bytes, _context, **kwargs):
        self.runtime.release(jobId, generation, buffer, node, bytes)

    async def ipcHandle(self, jobId, generation, buffer, _context, **kwargs):
        if self.pod.backend.kind != "gpu":
            raise st.Refused("ipcHandle: this pod has no GPU")
        record = await self.runtime.wait_servable(jobId, generation, buffer, self.pod.config.fetch_timeout)
        results = rpc_streams.results_of_live_call(_context)
        results.handle = self.pod.backend.ipc_handle(record.array)
        shape = tuple(record.array.shape)
        dtype = storage.dtype_name(self.pod.backend.host_dtype(record.array))
        capnp_io.write_tile_header(results.header, capnp_io.TileHeader(
            shape=shape, dtype=dtype, nbytes=int(record.array.nbytes), checksum=0))
        results.deviceIndex = self.pod.backend.device_index
        results.hostId = self.pod.info.host_id

    async def newGeneration(self, jobId, generation, _context, **kwargs):
        self.runtime.new_generation(jobId, generation)

    async def cancel(self, jobId, _context, **kwargs):
        log.info("job cancelled by the scheduler", job=jobId)  # the trace of an orderly stop
        self.runtime.cancel(jobId)

    async def shutdown(self, _context, **kwargs):
        log.info("shutdown requested")
        asyncio.get_running_loop().call_later(0.05, self.pod.stop.set)
