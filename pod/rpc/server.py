"""The pod's asyncio shell: serving connections, carrying out the machine's actions, the RPC faces.

One event loop (uvloop; schemas/rpc_streams.py runs it) runs everything: pycapnp's RPC (every
connection read with explicit traversal and nesting limits), the scheduler link (pod/rpc/link.py),
fetches from peers (pod/rpc/peers.py) and the instructions (pod/runtime.py). Every decision is the
machine's (pod/statemachine/machine.py): `PodServer.feed` hands it a stimulus and carries out each action
it answers, in order. The pod exits when the machine says its scheduler is gone or on
`shutdown`; on the way out it frees every buffer. With --keep-serving it instead drops that
scheduler's jobs, frees their buffers and waits for the next scheduler's hello (pods started once
serve job after job; docs/runtime.md).
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import capnp

from common.log import get_logger
from pod.host import host_id
from pod.rpc.gate import LOGIN_TIMEOUT_S, MAX_PENDING_LOGINS, REFUSAL_DELAY_S, FrontDoor, Stranger
from pod.rpc.link import SchedulerLink
from pod.rpc.offers import Offer, Offers
from pod.rpc.peers import Peers
from pod.runtime import PodRuntime
from pod.statemachine import machine as m
from schemas import capnp_io, plan_io, rpc_streams
from schemas.capnp_io import MAX_CHUNK_BYTES, NESTING_LIMIT, TRAVERSAL_LIMIT_WORDS, JobProgram, PodInfo
from schemas.instructions import NodePlan
from schemas.remote_errors import Refused, remote_reason

log = get_logger()
rpc = capnp_io.rpc()
PEER_FAILURE_QUIET_S = 2.0  # no collection this long after a connection failed or closed
COLLECT_EVERY_S = 0.5
FULL_COLLECTION_EVERY = 20  # collections: the others look at the young generations only


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
    # no scheduler's hello within this many seconds of listening: exit 1, naming the address
    # (pods started by a launcher, `phobos-sched slurm`, whose scheduler may never come)
    hello_timeout: float | None = None


class PodServer:
    """The machine and its shells, built together: each shell gets `feed` at construction."""

    def __init__(self, config: PodConfig, backend):
        self.config = config
        self.backend = backend
        name, memory = backend.describe()
        self.info = PodInfo(backend=backend.kind, device_name=name, vram_bytes=memory, pid=os.getpid(),
                            host_id=host_id(), device_index=backend.device_index,
                            compute_capability=backend.capability)
        self.stop = asyncio.Event()
        self.greeted = asyncio.Event()  # a scheduler said hello (the --hello-timeout watch)
        self.exit_code = 0
        self.background: set[asyncio.Task] = set()
        self.last_peer_failure: float | None = None  # monotonic time; see _collect_garbage
        self.machine = m.PodMachine(config.scheduler_timeout, config.keep_serving)
        self.door = FrontDoor(config.token, config.login_timeout, config.max_pending_logins,
                              config.refusal_delay)
        io_pool = ThreadPoolExecutor(4, thread_name_prefix="pod-io")
        self.link = SchedulerLink(self.machine, self.feed, config.heartbeat_interval,
                                  config.scheduler_timeout, self._spawn)
        self.peers = Peers(config.token, config.fetch_timeout, backend, self.info, io_pool, self.feed,
                           lambda: self.machine.node, self._peer_failed, self._spawn, Offers())
        self.runtime = PodRuntime(backend, list(config.roots), config.host if config.data_port else None,
                                  self.machine, self.feed, self.link, self.peers, io_pool)

    # ---- the machine's actions -------------------------------------------------------------------

    def feed(self, stimulus: m.Stimulus) -> list[m.Action]:
        """Hand `stimulus` to the machine and carry out its actions; returns them (a caller
        waiting for a verdict, FetchVerdict, reads it there). A refusal propagates to the caller."""
        actions = self.machine.handle(stimulus)
        for action in actions:
            if isinstance(action, m.OnJob):
                self.runtime.apply(action.job, action.action)
            elif isinstance(action, m.StoreVerdict):
                self.runtime.store_verdict(action)
            elif isinstance(action, m.ReportServed):
                self.runtime.report_served(action)
            elif isinstance(action, m.ForgetJob):
                self.runtime.forget(action.job)
            elif isinstance(action, m.LeaveScheduler):
                self._leave(action)
        self.runtime.run_quick()  # the Allocates and Frees just started, each after every action
        return actions

    def _leave(self, action: m.LeaveScheduler) -> None:
        """The scheduler left (or declared this pod dead): exit, or with --keep-serving wait for
        the next scheduler. Its jobs are dropped already (the machine's actions before this one);
        a store already writing finishes its tile, the window docs/runtime.md names."""
        if action.exit:
            log.warning(f"{action.why}; exiting", reason=action.reason)
            self.stop.set()
            return
        log.info(f"{action.why}; dropping its jobs and waiting for the next scheduler", reason=action.reason)
        self.runtime.cancel_tasks()
        self.link.forget()

    # ---- serving ---------------------------------------------------------------------------

    async def serve(self, on_listening) -> int:
        server = await rpc_streams.serve(self._connection, self.config.host, self.config.port)
        host, port = server.sockets[0].getsockname()[:2]
        on_listening(host, port)
        self._spawn(self.link.sender(self.stop))
        self._spawn(self._collect_garbage())
        self._spawn(self._log_strangers())
        if self.config.hello_timeout is not None:
            self._spawn(self._expect_hello(f"{host}:{port}", self.config.hello_timeout))
        try:
            await self.stop.wait()
        finally:
            server.close()
            self.feed(m.Stop("the pod is exiting"))
            self.runtime.close()
            for task in list(self.background) + list(self.runtime.tasks):
                task.cancel()
        return self.exit_code

    async def _expect_hello(self, address: str, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.greeted.wait(), timeout)
        except TimeoutError:
            message = (f"no scheduler said hello to this pod at {address} within {timeout:g} s "
                       "(is the scheduler running, and does it reach this address?)")
            log.error(message)
            print(f"phobos-pod: error: {message}", file=sys.stderr, flush=True)
            self.exit_code = 1
            self.stop.set()

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
        (pod/cli.py leaves through os._exit).

        What is alive when this task starts, as the pod begins to listen (its modules, its
        server), stays alive: it is frozen at once, so that a collection does not scan it again
        every 0.5 s on the loop that a job's instructions wait for (a full collection of it took
        3-6 ms here, more under load); the first job's modules, imported in the background
        (pod/cli.py), are frozen with the rest after the first scheduler leaves.

        Only every FULL_COLLECTION_EVERY-th collection looks at every object; the others at the
        young ones (generations 0 and 1: what was made since the collection before last), which
        hold the garbage of the calls and instructions since then. A job's plan and state, tens of
        thousands of objects that live as long as it does, were otherwise gone through every time:
        with 1024 units on a CPU pod, 10-20 ms a collection (up to 36 ms of loop) against 1-3 ms
        for the same garbage found among the young. On a CPU pod only: a GPU pod's device
        buffers caught in a cycle would wait up to FULL_COLLECTION_EVERY turns to be freed, so it
        goes through everything every time, as before."""
        gc.disable()
        gc.freeze()
        collections, full_every = 0, FULL_COLLECTION_EVERY if self.backend.kind == "cpu" else 1
        while not self.stop.is_set():
            await asyncio.sleep(COLLECT_EVERY_S)
            failed = self.last_peer_failure
            if failed is not None:
                if time.monotonic() - failed < PEER_FAILURE_QUIET_S:
                    continue
                gc.freeze()
                self.last_peer_failure = None
            collections += 1
            gc.collect(2 if collections % full_every == 0 else 1)

    def _peer_failed(self) -> None:
        self.last_peer_failure = time.monotonic()

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
            broken = remote_reason(err)
        self.door.leave(conn, broken)
        if not conn.logged_in:
            return  # a stranger's connection held no call of ours: its remains are collected
        if broken:
            log.warning("connection closed", reason=broken, peer=peer)
        self._peer_failed()  # its remains are frozen, not collected
        if conn is self.link.conn:
            self.feed(m.SchedulerLost(broken or "the connection closed"))

    async def _log_strangers(self) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(1.0)
            self.door.flush_log()

    def hello(self, scheduler, node: int, conn: Stranger) -> None:
        self.greeted.set()
        actions = self.feed(m.Hello(node, time.monotonic()))
        for action in actions:
            if isinstance(action, m.StartHeartbeats):
                self.link.hello(scheduler, conn, action.session)

    async def submit(self, job_id: str, generation: int, program: JobProgram | None, plan: NodePlan, peers,
                     more: bool, staged: bool = True) -> None:
        """One submit call (`program`: None on a continuation part): the machine joins the parts
        and checks the plan; a Prepare it answers is carried out here (it awaits the program's
        preparation) before the call returns."""
        for action in self.feed(m.PlanPart(job_id, generation, plan, program, peers, more, staged)):
            if isinstance(action, m.Prepare):
                await self.runtime.prepare(action)


async def _read_plan(reader) -> NodePlan:
    """Decode a plan, letting heartbeats and peers in every few thousand instructions (decoding
    costs ~20 us an instruction, so a plan of 10^5 would otherwise hold the loop for seconds)."""
    instructions = []
    for i, entry in enumerate(reader.instructions):
        instructions.append(plan_io.read_instruction(entry))
        if i % 4096 == 4095:
            await asyncio.sleep(0)
    return NodePlan(node=reader.node, generation=reader.generation, instructions=tuple(instructions),
                    peak_bytes=reader.peakBytes, uris=tuple(reader.uris))


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
    """Every method answers a refusal as its `failure` (a kind and one line); nothing here can
    take the process down."""

    def __init__(self, pod: PodServer, conn: Stranger):
        self.pod, self.conn = pod, conn
        self.runtime = pod.runtime

    async def hello(self, scheduler, node, _context, **kwargs):
        self.pod.hello(scheduler, node, self.conn)
        capnp_io.write_pod_info(_context.results.info, self.pod.info)
        log.info("scheduler said hello", node=node)

    async def info(self, _context, **kwargs):
        capnp_io.write_pod_info(_context.results.info, self.pod.info)

    @rpc_streams.answers_refusals
    async def submit(self, jobId, generation, program, plan, peers, more, staged, _context, **kwargs):
        node_plan = await _read_plan(plan)
        first = None if self.pod.machine.has_parts(jobId, generation) else capnp_io.read_program(program)
        await self.pod.submit(jobId, generation, first, node_plan, capnp_io.read_peers(peers), more, staged)
        if not more:
            log.info("plan submitted", job=jobId, generation=generation, staged=staged)

    @rpc_streams.answers_refusals
    async def outputsStaged(self, jobId, _context, **kwargs):
        self.pod.feed(m.OutputsStaged(jobId, time.monotonic()))

    @rpc_streams.answers_refusals
    async def tileHeader(self, jobId, generation, buffer, _context, **kwargs):
        header = await self.runtime.tile_header(jobId, generation, buffer, self.pod.config.fetch_timeout)
        capnp_io.write_tile_header(rpc_streams.results_of_live_call(_context).header, header)

    @rpc_streams.answers_refusals
    async def readChunk(self, jobId, generation, buffer, offset, length, _context, **kwargs):
        if length > MAX_CHUNK_BYTES:
            raise Refused(f"readChunk: {length} bytes is more than the {MAX_CHUNK_BYTES}-byte limit")
        _context.results.data = self.runtime.read_chunk(jobId, generation, buffer, offset, length)

    @rpc_streams.answers_refusals
    async def release(self, jobId, generation, buffer, node, bytes, gaveUp, _context, **kwargs):
        self.runtime.release(jobId, generation, buffer, node, bytes, gaveUp)

    @rpc_streams.answers_refusals
    async def ipcHandle(self, jobId, generation, buffer, _context, **kwargs):
        if self.pod.backend.kind != "gpu":
            raise Refused("ipcHandle: this pod has no GPU")
        record = await self.runtime.wait_servable(jobId, generation, buffer, self.pod.config.fetch_timeout)
        results = rpc_streams.results_of_live_call(_context)
        record.lent = True  # the peer maps it: not reused before the job ends or the peer releases it
        results.handle = self.pod.backend.ipc_handle(record.array)
        shape = tuple(record.array.shape)
        dtype = record.dtype  # the Allocate's: a GPU holds fp8 as uint8, bf16 as uint16
        capnp_io.write_tile_header(results.header, capnp_io.TileHeader(
            shape=shape, dtype=dtype, nbytes=int(record.array.nbytes), checksum=0))
        results.deviceIndex = self.pod.backend.device_index
        results.hostId = self.pod.info.host_id

    @rpc_streams.answers_refusals
    async def tileReady(self, jobId, generation, node, buffer, handle, header, deviceIndex, _context,
                        **kwargs):
        offer = Offer(bytes(handle), capnp_io.read_tile_header(header), deviceIndex)
        self.runtime.offered(jobId, generation, node, buffer, offer)

    async def cancel(self, jobId, _context, **kwargs):
        log.info("job cancelled by the scheduler", job=jobId)  # the trace of an orderly stop
        self.runtime.cancel(jobId)

    async def shutdown(self, _context, **kwargs):
        log.info("shutdown requested")
        self.pod.feed(m.Stop("shutdown requested"))
        asyncio.get_running_loop().call_later(0.05, self.pod.stop.set)
