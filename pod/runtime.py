"""The pod's shell around the state machine: runs instructions, keeps buffers, serves peers.

Everything here runs on the pod's one asyncio loop; blocking work (storage reads and writes,
leaf launches, bulk socket transfers) goes to worker threads. The machine (pod/statemachine/machine.py)
decides what may start and when a store may write; this module only does it and reports back.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from common import blas, storage, uri
from common.errors import UserError
from common.log import get_logger
from pod.faults import Delay, Faults
from pod.job_records import BufferRecord, Job
from pod.rpc.peers import Fetching
from pod.rpc.serving import Serving
from pod.rpc.transfer import DataPort, TransferError, checksum
from pod.statemachine import machine as m
from pod.statemachine import state as st
from pod.storage.disk import PlanDisk, load_region, store_region
from pod.storage.lanes import IoLanes
from schemas.capnp_io import InstructionEvent, JobProgram
from schemas.instructions import Allocate, Compute, Fetch, Free, Instruction, Load, NodePlan, Store, kind_of
from schemas.remote_errors import FailureKind, Refused, remote_reason

log = get_logger()
INLINE_COMPUTE_S = 0.002
STALE = FailureKind.STALE_GENERATION


class PodRuntime(Serving):
    """One pod's jobs, buffers and work: the execution shell. `feed` hands a stimulus to the
    machine and carries out what it answers (pod/rpc/server.py); `link` takes the events for the
    scheduler, `fetch` (pod/rpc/peers.py) fills a buffer from a peer."""

    def __init__(self, backend, roots: list[Path], data_host: str | None, machine: m.PodMachine,
                 feed: Callable[[m.Stimulus], list], link, peers, io_pool: ThreadPoolExecutor):
        self.backend = backend
        self.roots = roots
        self.machine, self.feed, self.link, self.peers = machine, feed, link, peers
        self.jobs: dict[str, Job] = {}
        self.io_pool = io_pool
        self.lanes = IoLanes.for_backend(backend.kind)  # None: loads and stores go to the pool as they come
        self.jobs_seen = 0
        workers = blas.POD_COMPUTE_WORKERS[backend.kind]  # their BLAS threads are sized by it
        self.compute_pool = ThreadPoolExecutor(workers, thread_name_prefix="pod-compute")
        self.data_port = DataPort(data_host) if data_host else None  # None: chunks over the RPC only
        self.tasks: set[asyncio.Task] = set()
        self.leaf_seconds: dict[tuple[str, str], float] = {}  # last launch time of each leaf
        self.stores: dict[tuple[str, int, int], asyncio.Future] = {}  # stores waiting for a verdict
        self.faults = Faults.from_env()  # test-only (PHOBOS_FAULT); inert when unset
        # a CPU pod runs its Allocates and Frees at once, not as tasks (`run_quick`); with faults
        # asked for (tests), every instruction is a task, as the faults expect
        self.quick = backend.kind == "cpu" and not self.faults.rules
        self._quick: deque[tuple[Job, int, Allocate | Free]] = deque()
        self._quick_running = False

    # ---- jobs and plans ------------------------------------------------------------------

    def job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            self.jobs_seen += 1
            job = self.jobs[job_id] = Job(job_id, self.machine.job(job_id), order=self.jobs_seen)
        return job

    async def prepare(self, p: m.Prepare) -> None:
        """Carry out a Prepare: confine every URI, start preparing a new job's leaves, PlanReady.

        When the program names what each leaf writes (the scheduler's does), the plan starts
        before its leaves are prepared (a CPU pod parses them, a GPU pod loads their PTX, in a
        compute worker): its allocations and loads need none, its computes wait for them
        (`_execute`), and the preparation runs beside the first loads instead of in front of them
        (a CPU local pod's first job: submit 34 -> 12 ms median; a GPU local pod's, loading the
        PTX: 82 -> 13 ms). The submit still waits for it: a leaf this pod cannot prepare refuses
        the plan."""
        job = self.job(p.job)
        plan = p.checked.plan
        files = self._confine(plan)  # every URI checked before anything is read or written
        if plan.generation not in job.disk:  # reading starts now, beside the job's set-up
            job.disk[plan.generation] = PlanDisk.start(plan, files, p.job)
        if job.preparing is None:
            job.preparing = asyncio.get_running_loop().run_in_executor(
                self.compute_pool, self.backend.prepare, p.job, p.program)
            job.program, job.scalars = p.program, dict(p.program.scalars)
            job.writes = _declared_writes(p.program)
        if job.writes is None:  # what the leaves write, from their source
            job.writes = await asyncio.shield(job.preparing)
        job.paths.update({(plan.generation, tensor): path for tensor, path in files.items()})
        job.peers.update({peer.node: peer.address for peer in p.peers})
        live = frozenset(peer.node for peer in p.peers)
        self.feed(m.PlanReady(p.job, p.checked, job.writes, job.program, live))
        await asyncio.shield(job.preparing)

    def _confine(self, plan: NodePlan) -> dict[int, Path]:
        """tensor -> its file, every URI of the plan confined to the pod's roots."""
        paths: dict[int, Path] = {}
        for tensor, text in enumerate(plan.uris):
            try:
                paths[tensor] = uri.confine(text, self.roots)
            except UserError as err:
                raise Refused(str(err)) from None
        return paths

    def cancel(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        if job is None:
            return
        self.feed(m.CancelJob(job_id))
        self._forget_code(job_id)
        for key in list(job.waiters):  # peers waiting for a plan that will never come here
            self._wake(job, key, Refused(f"job {job_id} was cancelled", STALE))

    def forget(self, job_id: str) -> None:
        """The machine dropped the job entirely (its scheduler is gone)."""
        self._forget_code(job_id)
        self.jobs.pop(job_id, None)

    def _forget_code(self, job_id: str) -> None:
        job = self.jobs.get(job_id)
        for disk in job.disk.values() if job is not None else ():
            disk.stop()
        self.peers.offers.drop(job_id)
        self.backend.forget(job_id)
        for key in [k for k in self.leaf_seconds if k[0] == job_id]:
            del self.leaf_seconds[key]

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def cancel_tasks(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    # ---- actions -----------------------------------------------------------------------------

    def apply(self, job_id: str, action: st.Action) -> None:
        """Carry out one of a job's actions (the machine's OnJob)."""
        job = self.job(job_id)
        stale = [k for k in job.waiters if k[0] <= job.state.dropped_through]
        for key in stale:  # peers waiting on a generation this pod dropped
            self._wake(job, key, Refused(f"job {job.job_id}: generation {key[0]} was dropped", STALE))
        if isinstance(action, st.StartInstruction):
            if self.quick and isinstance(action.instruction, Allocate | Free):
                self._quick.append((job, action.generation, action.instruction))  # run_quick
            else:
                self._spawn(self._run(job, action.generation, action.instruction))
        elif isinstance(action, st.BufferServable):
            self._wake(job, (action.generation, action.buffer), None)
            self._offer(job, action.generation, action.buffer)
        elif isinstance(action, st.BufferDoomed):
            key = (action.generation, action.buffer)
            self._wake(job, key, job.state.doomed(*key))
        elif isinstance(action, st.DropGeneration):
            self._drop(job, action.generation, action.reason)
        elif isinstance(action, st.PlanFinished):
            job.stop_disk(action.generation)
            self.link.queue_finished(job.job_id, action.generation, action.ok, action.message)
        elif isinstance(action, st.FetchAbandoned):
            now, ins = time.time(), action.instruction
            self.link.queue_event(job.job_id, action.generation, InstructionEvent(
                id=ins.id, kind="fetch", start=now, end=now, bytes=0, peer=ins.peer, ok=False,
                message=action.reason))
        elif isinstance(action, st.FetchGivenUp):
            address = job.peers.get(action.instruction.peer)
            if address is not None:
                self.peers.give_up(job.job_id, action.generation, action.instruction, address)
        elif isinstance(action, st.FreeWaits):
            log.debug("free waits for peers to fetch its tile", job=job.job_id, generation=action.generation,
                      instruction=action.instruction.id, buffer=action.instruction.buffer,
                      peers=list(action.peers))

    def _offer(self, job: Job, generation: int, buffer: int) -> None:
        """Offer a servable buffer to the peers that will fetch it (pod/rpc/offers.py), so that their
        fetches need no round trip to here: a GPU pod its CUDA IPC handle (to same-host GPU
        peers), a CPU pod a data-port ticket each, with the tile's CRC-32C computed now, beside the
        event loop, instead of when the first fetcher asks."""
        plan = job.state.plans.get(generation)
        record = job.buffers.get((generation, buffer))
        fetchers = plan.fetchers(buffer) if plan is not None and record is not None else ()
        peers = [job.peers[n] for n in fetchers if n in job.peers]
        gpu = self.backend.kind == "gpu"
        if not peers or not (gpu or self.data_port is not None):
            return
        if gpu:
            record.lent = True  # before anything can free it: its Free now waits for the peers
        # test-only (PHOBOS_FAULT): an offer serves the tile to its peers, as an answered ask does
        delay = self.faults.hit("serve", generation=generation)
        self._spawn(self._send_offers(job.job_id, generation, buffer, record, peers, delay))

    async def _send_offers(self, job_id: str, generation: int, buffer: int, record: BufferRecord,
                           peers: list[str], delay: Delay | None) -> None:
        if delay is not None:
            await delay.wait()
        if self.backend.kind == "gpu":
            self.peers.offer(job_id, generation, buffer, record.array, record.dtype, peers)
            return
        await self._serving_copy(record)
        for address in peers:
            self.peers.offer_ticket(job_id, generation, buffer, self._tile_header(record), address)

    async def _serving_copy(self, record: BufferRecord) -> None:
        """Make `record.host` (a GPU tile downloaded) and `record.crc` once, in the I/O pool;
        concurrent askers share the one computation."""
        if record.crc is not None:
            return
        if record.serving is None:
            record.serving = asyncio.get_running_loop().run_in_executor(
                self.io_pool, _host_and_crc, self.backend, record.array)
        record.host, record.crc = await asyncio.shield(record.serving)

    def offered(self, job_id: str, generation: int, node: int, buffer: int, offer) -> None:
        """A same-host owner's offer of a tile (tileReady); one for a job or generation this pod
        dropped already is not kept."""
        job = self.jobs.get(job_id)
        if job is not None and (job.state.cancelled or generation <= job.state.dropped_through):
            return
        self.peers.offered(job_id, generation, node, buffer, offer)

    def store_verdict(self, verdict: m.StoreVerdict) -> None:
        fut = self.stores.pop((verdict.job, verdict.generation, verdict.id), None)
        if fut is not None and not fut.done():
            fut.set_result(verdict.refusal)

    async def _lease(self, job: Job, generation: int, ins: Store) -> None:
        """Wait for the machine's word that this store may write (a live scheduler lease)."""
        key = (job.job_id, generation, ins.id)
        fut = self.stores[key] = asyncio.get_running_loop().create_future()
        try:
            self.feed(m.StoreAsked(job.job_id, generation, ins.id, time.monotonic()))
            refusal = await fut
        finally:
            self.stores.pop(key, None)
        if refusal is not None:
            raise Refused(f"store refused: {refusal}")

    def _wake(self, job: Job, key: tuple[int, int], error: Exception | None) -> None:
        for fut in job.waiters.pop(key, []):
            if not fut.done():
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

    def _drop(self, job: Job, generation: int, reason: str) -> None:
        job.stop_disk(generation)
        for key in [k for k in job.buffers if k[0] == generation]:
            record = job.buffers.pop(key)
            if record.lent:
                job.lent.append(record)
        self.peers.offers.drop(job.job_id, generation)
        for key in [k for k in job.paths if k[0] == generation]:
            del job.paths[key]
        job.computing = {k for k in job.computing if k[0] != generation}
        error = Refused(f"job {job.job_id}: generation {generation} was dropped ({reason})", STALE)
        for key in [k for k in job.waiters if k[0] == generation]:
            self._wake(job, key, error)

    # ---- running one instruction -----------------------------------------------------------

    async def _run(self, job: Job, generation: int, ins: Instruction) -> None:
        if isinstance(ins, Compute) and (generation, ins.unit) not in job.computing:
            # A unit's first compute starts only once the scheduler has this pod's events so far,
            # its inputs' "finished" among them: should the leaf take the pod down at once, the
            # scheduler knows the compute was ready and charges the unit (docs/runtime.md).
            job.computing.add((generation, ins.unit))
            await self.link.events_delivered()
        start, finished = time.time(), None
        nbytes, copy_s, ok, message = 0, 0.0, True, ""
        peer = ins.peer if isinstance(ins, Fetch) else None  # a failed fetch names its peer too
        delay = self.faults.hit(kind_of(ins), ins.unit if isinstance(ins, Compute) else None, generation)
        if delay is not None:  # test-only: this instruction "runs" a while (then takes the pod down)
            await delay.wait()
            if delay.then_kill:
                self.faults.die()
        try:
            nbytes, peer, copy_s, ran = await self._execute(job, generation, ins)
            # a compute's span is the leaf's own, not its hand-offs; a lane's load's or store's,
            # its I/O's own, unless a fault held it (test-only: then its span covers the hold)
            if ran is not None and (delay is None or isinstance(ins, Compute)):
                start, finished = ran
        except Exception as err:  # any failure is the instruction's, reported with its reason
            ok, message = False, self._failure(job, ins, err)
        self._report(job, generation, ins, start, finished, nbytes, peer, copy_s, ok, message)

    def run_quick(self) -> None:
        """Run the Allocates and Frees `apply` put aside (and those their ends start in turn),
        here and now; PodServer.feed calls this once its actions are carried out. On a CPU pod
        with no faults asked for, they are not tasks of their own: neither waits for anything,
        and a task each cost a turn of the event loop apiece on the way from one piece's store to
        the next piece's loads (its Free, then its successor's Allocates)."""
        if self._quick_running:
            return  # the loop below, further up this call stack, takes what was added
        self._quick_running = True
        try:
            while self._quick:
                job, generation, ins = self._quick.popleft()
                start, ok, message = time.time(), True, ""
                try:
                    self._allocate_or_free(job, generation, ins)
                except Exception as err:  # any failure is the instruction's, as in `_run`
                    ok, message = False, self._failure(job, ins, err)
                self._report(job, generation, ins, start, None, 0, None, 0.0, ok, message)
        finally:
            self._quick_running = False

    def _failure(self, job: Job, ins: Instruction, err: Exception) -> str:
        """An instruction's failure: its reason, logged where it is not the user's or a refusal."""
        message = remote_reason(err)
        if not isinstance(err, UserError | TransferError | Refused):
            log.warning("instruction failed", job=job.job_id, instruction=ins.id, error=message)
        elif isinstance(err, Refused):
            log.info("instruction refused", job=job.job_id, instruction=ins.id, reason=message)
        elif isinstance(err, TransferError):  # the scheduler blames the peer: say why here too
            log.info("fetch failed", job=job.job_id, instruction=ins.id, reason=message)
        return message

    def _report(self, job: Job, generation: int, ins: Instruction, start: float, finished: float | None,
                nbytes: int, peer: int | None, copy_s: float, ok: bool, message: str) -> None:
        """An instruction ended: its event for the scheduler, and the machine told."""
        if not job.state.is_running(generation, ins.id):
            return  # a dropped plan or an abandoned fetch: its result is discarded, not reported
        unit = ins.unit if isinstance(ins, Compute | Store) else None
        leaf = ins.leaf if isinstance(ins, Compute) else None
        self.link.queue_event(job.job_id, generation, InstructionEvent(
            id=ins.id, kind=kind_of(ins), start=start, end=finished or time.time(), bytes=nbytes, peer=peer,
            ok=ok, message=message, unit=unit, leaf=leaf, copy_s=copy_s))
        self.feed(m.InstructionDone(job.job_id, generation, ins.id, ok, message))

    async def _execute(self, job: Job, generation: int,
                       ins: Instruction) -> tuple[int, int | None, float, tuple[float, float] | None]:
        """Run one instruction: (bytes moved, peer, seconds of host<->device copy, and for a
        compute the Unix times its leaf started and finished, as the thread that ran it saw them:
        the launch to the GPU's completion, without the hand-off to that thread and back; for a
        load or store in a lane, its I/O's own times likewise; else None)."""
        loop = asyncio.get_running_loop()
        if isinstance(ins, Allocate | Free):
            self._allocate_or_free(job, generation, ins)
            return 0, None, 0.0, None
        record = None if isinstance(ins, Compute) else self._buffer(job, generation, ins.buffer)
        if isinstance(ins, Load):
            path = job.paths[(generation, ins.tensor)]
            return await self._io(job, generation, ins, load_region, path, record.array,
                                  job.disk.get(generation))
        if isinstance(ins, Store):
            await self._lease(job, generation, ins)
            staging = storage.staging_path(job.paths[(generation, ins.tensor)], job.job_id)
            return await self._io(job, generation, ins, store_region, staging, record.array,
                                  job.disk.get(generation))
        if isinstance(ins, Fetch):
            address = job.peers.get(ins.peer)
            if address is None:
                raise TransferError(f"node {ins.peer} is not among this plan's peers")
            await self.peers.fetch(Fetching(job.job_id, generation, ins, address), record.array, record.dtype)
            return self.backend.nbytes(record.array), ins.peer, 0.0, None
        if isinstance(ins, Compute):
            await asyncio.shield(job.preparing)  # its leaves (prepare)
            bound = {param: self._buffer(job, generation, buf).array for param, buf in ins.bindings}
            args = (job.job_id, ins.leaf, bound, job.scalars)
            key = (job.job_id, ins.leaf)
            if self.leaf_seconds.get(key, INLINE_COMPUTE_S) < INLINE_COMPUTE_S:
                # A leaf that took under INLINE_COMPUTE_S last time runs right here: handing it to
                # a worker thread and back costs more than the leaf (~250 us, measured), and
                # blocking the loop that briefly delays no heartbeat or peer noticeably.
                ran = _timed(self.backend.compute, *args)[1]
            else:
                ran = (await loop.run_in_executor(self.compute_pool, _timed, self.backend.compute, *args))[1]
            self.leaf_seconds[key] = ran[1] - ran[0]
            return 0, None, 0.0, ran
        raise TypeError(f"unknown instruction {ins!r}")

    async def _io(self, job: Job, generation: int, ins: Load | Store, fn, path: Path, array, disk):
        """Run a load's or store's `fn` (pod/storage/disk.py: load_region, store_region) in a thread: the
        I/O pool's, or on a CPU pod its lane's (pod/storage/lanes.py), in plan order; there its span is
        its own, from its turn on, not its wait for the turn."""
        loop = asyncio.get_running_loop()
        args = (self.backend, path, ins, array, disk)
        if self.lanes is None:
            nbytes, copy_s = await loop.run_in_executor(self.io_pool, fn, *args)
            return nbytes, None, copy_s, None
        key = (job.order, generation, ins.id)
        if isinstance(ins, Load):
            work = self.lanes.loads.submit(key, _timed, fn, *args)
        else:
            until = self.machine.lease_until()
            work = self.lanes.stores.submit(key, _timed, self._under_lease, until, job, generation, ins, loop,
                                            fn, *args)
        (nbytes, copy_s), ran = await asyncio.wrap_future(work)
        return nbytes, None, copy_s, ran

    def _under_lease(self, until: float, job: Job, generation: int, ins: Store, loop, fn, *args):
        """A store's write in its lane's thread, at its turn: the lease it was granted still
        runs, or the machine grants it again (a store writes only under a live lease, however
        long it waited in the lane; docs/runtime.md), else the store is refused. A store whose
        job was dropped meanwhile asks the loop too, which refuses it (`_lease_again`)."""
        if time.monotonic() >= until or job.state.cancelled:
            asyncio.run_coroutine_threadsafe(self._lease_again(job, generation, ins), loop).result()
        return fn(*args)

    async def _lease_again(self, job: Job, generation: int, ins: Store) -> None:
        """A lane's store asks again, unless its job is no longer this pod's: when its scheduler
        leaves (or declares the pod dead) a keep-serving pod drops the jobs and is alone, and
        alone the machine grants every store it is asked for."""
        if job.state.cancelled or self.jobs.get(job.job_id) is not job:
            raise Refused(f"store refused: job {job.job_id} was dropped")
        await self._lease(job, generation, ins)

    def _allocate_or_free(self, job: Job, generation: int, ins: Allocate | Free) -> None:
        if isinstance(ins, Free):
            job.buffers.pop((generation, ins.buffer), None)
            self._wake(job, (generation, ins.buffer), Refused(f"buffer {ins.buffer} was freed", STALE))
            return
        if ins.dtype not in storage.STORAGE_DTYPES:
            raise Refused(f"buffer {ins.buffer}: unknown dtype {ins.dtype!r}")
        array = self.backend.allocate(tuple(ins.shape), ins.dtype)
        job.buffers[(generation, ins.buffer)] = BufferRecord(array, ins.dtype)

    def _buffer(self, job: Job, generation: int, buffer: int) -> BufferRecord:
        record = job.buffers.get((generation, buffer))
        if record is None:
            raise Refused(f"buffer {buffer} does not exist (not allocated yet, or freed)")
        return record

    def close(self) -> None:
        for job_id in list(self.jobs):
            self.cancel(job_id)
        self.jobs.clear()
        if self.data_port is not None:
            self.data_port.close()
        self.io_pool.shutdown(wait=False, cancel_futures=True)
        if self.lanes is not None:
            self.lanes.shutdown()
        self.compute_pool.shutdown(wait=False, cancel_futures=True)


def _declared_writes(program: JobProgram) -> dict[str, tuple[str, ...]] | None:
    """Each leaf's written parameters as the program names them; None when it names none for
    some leaf (the backend then reads them from the leaf's source)."""
    writes = {leaf.name: program.writes_of(leaf.name) for leaf in program.leaves}
    return None if not all(writes.values()) else writes


def _timed(fn, *args) -> tuple[object, tuple[float, float]]:
    """`fn(*args)`, and the Unix times at which it started and returned."""
    start = time.time()
    result = fn(*args)
    return result, (start, time.time())


def _host_and_crc(backend, array) -> tuple[np.ndarray, int]:
    host = backend.download(array)
    return host, checksum(host)
