"""The job runner: the thin asyncio shell around `cluster_state.ClusterState`.

    prepare (compile, check storage) -> start or reach pods (login, hello) -> lock the job's
    files (scheduler/jobs/job_storage.py) -> [the outputs' staging copies, in a thread of their own]
    -> the leaves' PTX -> plan -> submit plans -> collect heartbeats and events (each one a
    stimulus of scheduler/running/cluster_messages.py fed to `ClusterState.handle`, which answers with
    Submit / Cancel / Replanned / Failed / Succeeded) -> commit or abort staging -> summary and
    trace.

The staging copies are created beside the job's head, not in front of it: a plan submitted
before they exist says so (`staged` false), and its pod holds the job's stores (only them:
loads, computes and fetches go on) until the thread is over and every such pod has been told
(`outputsStaged`); a plan submitted later says `staged`. A staging failure fails the job with
its one-line user error (exit 2) and the pods drop it; whatever ends the job, the staging
thread is waited for before its copies are removed (JobStorage.abandon).

Everything here only moves messages; decisions live in cluster_state.py (even what a failed
submit means), planner.py and the pods' machines (when a store may write).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.commit import CommitFailed
from common.errors import UserError
from common.log import get_logger
from scheduler.jobs import prepare as prep
from scheduler.jobs.job_storage import JobStorage
from scheduler.planning.planner import NodeFigure, plan
from scheduler.pods.local_pods import LocalPods, spawn_for
from scheduler.running import cluster_messages as cm
from scheduler.running.cluster_messages import Action, Cancel, EventInfo, Failed, Replanned, Submit, Succeeded
from scheduler.running.cluster_state import ClusterState
from scheduler.tracing.phases import PROCESS, job_phases
from scheduler.tracing.tracefile import NodeRecord, TraceRecorder
from schemas.remote_errors import FailureKind, Refused, check, classify, remote_reason

log = get_logger(program="scheduler")
CONNECT_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RunOptions:
    pods: tuple[str, ...] = ()  # host:port of running pods; empty: start local ones
    local_pods: int | None = None
    token: str | None = None  # required with --pods
    storage_roots: tuple[Path, ...] = ()
    heartbeat_interval: float = 0.5  # handed to local pods
    heartbeat_timeout: float = 5.0
    cluster_values: dict[str, int] = field(default_factory=dict)
    pod_log_level: str = "warning"
    # Local pods the command started before compiling (spawn_pods_for); the job waits for them
    # to listen, uses them and sends them SIGTERM at its end; the command reaps them
    # (LocalPods.stop_now) once its own report is written, while they exit.
    started_pods: LocalPods | None = None


@dataclass
class RunResult:
    ok: bool
    reason: str
    wall_s: float
    trace: dict


class JobFailed(Exception):
    """The job ran and failed (a node error, no node left): exit code 1, not a user error."""


def run_job(prepared: prep.PreparedJob, options: RunOptions) -> RunResult:
    """Run a prepared job to the end on its own event loop (uvloop when available); a SIGINT or
    SIGTERM stops it in order and raises scheduler.running.interrupt.Interrupted."""
    PROCESS.mark("pods_start")  # loading the RPC library counts as reaching the pods
    from scheduler.running.interrupt import interruptible
    from schemas import rpc_streams

    return rpc_streams.run(interruptible(run_with_pods(prepared, options)))


async def run_with_pods(prepared: prep.PreparedJob, options: RunOptions) -> RunResult:
    local = None
    PROCESS.mark("pods_start")
    addresses, token = list(options.pods), options.token
    if not addresses:
        local = options.started_pods or spawn_pods_for(options)
    if local is None or any(pod.device != "cpu" for pod in local.pods):
        from scheduler.running.leaf_ptx import warm_up  # (with the CUDA target's module): for GPU pods only

        warm_up()  # while the pods are reached; CPU pods need no PTX, and the hash costs the GIL
    if local is not None:
        await local.ready()
        addresses, token = local.addresses, local.token
    elif not token:
        raise UserError("--pods needs the cluster's token: --token-file PATH or PHOBOS_TOKEN")
    session = PodSession(addresses, token)
    ran = False
    try:
        await session.open()
        PROCESS.mark("pods_ready")
        # Pods started for this job stop at its end: telling them to drop it first would only
        # be a round trip more before the command can leave.
        result = await session.run(prepared, options, drop_at_end=local is None)
        ran = True
        return result
    finally:
        await session.close()
        if local is not None and ran and local is options.started_pods:
            local.terminate()  # the command that started them reaps them once its report is out
        elif local is not None:
            await local.stop()  # here, in order, where a second Ctrl-C still exits at once


def spawn_pods_for(options: RunOptions, count: int | None = None) -> LocalPods:
    """Start the local pods a job without --pods runs on (`LocalPods.ready` waits for them)."""
    return spawn_for(count if count is not None else options.local_pods, list(options.storage_roots),
                     options.heartbeat_interval, options.heartbeat_timeout, options.pod_log_level)


async def start_pods_for(options: RunOptions, count: int | None = None) -> LocalPods:
    return await spawn_pods_for(options, count).ready()


class PodSession:
    """The scheduler's links to its pods: login, hello, and the sink they report to.

    A pod takes the session that said hello as its scheduler and exits when that connection
    drops, so a session lives as long as the scheduler; it may run several jobs one after the
    other (tests do), each on all of its live nodes or on a chosen subset."""

    def __init__(self, addresses: list[str], token: str):
        from schemas import capnp_io

        self.io = capnp_io
        self.addresses = list(addresses)
        self.token = token
        self.clients: dict[int, object] = {}
        self.pods: dict[int, object] = {}
        self.infos: dict[int, object] = {}
        self.lost: dict[int, str] = {}  # node -> why its connection is gone
        self.current: JobRun | None = None
        self.watchers: set[asyncio.Task] = set()

    async def open(self) -> None:
        connects = (self._connect(node, addr) for node, addr in enumerate(self.addresses))
        results = await asyncio.gather(*connects, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        for node in self.pods:
            task = asyncio.ensure_future(self._watch(node))
            self.watchers.add(task)

    async def _connect(self, node: int, address: str) -> None:
        import capnp

        from schemas import rpc_streams

        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"--pods {address!r}: expected HOST:PORT")
        try:
            connecting = rpc_streams.connect(host.strip("[]"), int(port))
            stream = await asyncio.wait_for(connecting, CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError) as err:
            raise UserError(f"cannot reach pod {address}: {remote_reason(err)}") from None
        client = capnp.TwoPartyClient(stream, traversal_limit_in_words=self.io.TRAVERSAL_LIMIT_WORDS,
                                      nesting_limit=self.io.NESTING_LIMIT)
        self.clients[node] = client
        try:
            pod = await rpc_streams.login(client, self.token, CONNECT_TIMEOUT_S)
            reply = await asyncio.wait_for(pod.hello(SinkImpl(self, node), node), CONNECT_TIMEOUT_S)
        except rpc_streams.LoginRefused as err:
            raise UserError(f"pod {address} refused the token: {err}") from None
        except Exception as err:
            raise UserError(f"pod {address}: {not_a_pod(err)}") from None
        self.pods[node] = pod
        self.infos[node] = self.io.read_pod_info(reply.info)

    async def _watch(self, node: int) -> None:
        try:
            await self.clients[node].on_disconnect()
            reason = "connection lost"
        except Exception as err:
            reason = f"connection lost ({remote_reason(err)})"
        self.lost[node] = reason
        if self.current is not None:
            self.current.on_disconnected(node, reason)

    async def close(self) -> None:
        for task in self.watchers:
            task.cancel()
        for client in self.clients.values():
            try:
                client.close()
            except Exception:  # already closed by a dropped connection
                pass

    async def run(self, prepared: prep.PreparedJob, options: RunOptions,
                  nodes: list[int] | None = None, drop_at_end: bool = True) -> RunResult:
        """Run one job on `nodes` (default: every live one). `drop_at_end`: tell the pods to drop
        the job's buffers once it has ended (pods that serve further jobs must hear it); a job
        stopped by Ctrl-C or an error tells them whatever this says."""
        nodes = [n for n in (nodes if nodes is not None else sorted(self.pods)) if n not in self.lost]
        if not nodes:
            raise JobFailed("no live pod to run the job on")
        self.current = JobRun(self, prepared, options, nodes, drop_at_end)
        try:
            return await self.current.run()
        finally:
            self.current = None

    # ---- reports from pods (called by SinkImpl) ------------------------------------------------

    def on_heartbeat(self, node: int, generation: int, running: list[int]) -> None:
        if node in self.lost:
            # A pod paused past the timeout wakes up: tell it, so it drops its stale work and exits
            # (its stores wait for a heartbeat the scheduler takes: docs/runtime.md, Guarantees).
            raise Refused(f"node {node} was declared dead ({self.lost[node]}); its work was re-planned",
                          FailureKind.DECLARED_DEAD)
        if self.current is not None:
            self.current.on_heartbeat(node, generation, running)

    def on_events(self, node: int, generation: int, job_id: str, events) -> None:
        if self.current is not None and job_id == self.current.prepared.job_id:
            self.current.on_events(node, generation, events)

    def on_finished(self, node: int, job_id: str, generation: int, ok: bool, message: str) -> None:
        if self.current is not None and job_id == self.current.prepared.job_id:
            self.current.on_finished(node, generation, ok, message)


class JobRun:
    """One job on some of a session's nodes, from submit to commit (or abort)."""

    def __init__(self, session: PodSession, prepared: prep.PreparedJob, options: RunOptions,
                 nodes: list[int], drop_at_end: bool = True):
        self.session = session
        self.drop_at_end = drop_at_end
        self.io = session.io
        self.prepared = prepared
        self.options = options
        self.nodes = nodes
        self.t0 = time.time()  # the job's wall time starts here (the trace's wall_s)
        self.marks: dict[str, float] = {}  # Unix times (scheduler/tracing/phases.py)
        self.state: ClusterState | None = None
        self.trace = TraceRecorder(prepared)
        self.done = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()
        self.job_programs: dict[int, object] = {}
        self.staging_over = asyncio.Event()  # the staging thread ended, well or not
        self.staging_error: BaseException | None = None
        self.unstaged: set[int] = set()  # nodes sent a plan before the outputs were staged

    def _compile(self) -> None:
        """GPU pods: the leaves are compiled once here per kind of GPU rather than once per pod."""
        self._mark("compile_start")
        session, nodes = self.session, self.nodes
        gpus = {n: (session.infos[n].compute_capability, f"node {n} ({session.addresses[n]}, "
                    f"{session.infos[n].device_name})") for n in nodes if session.infos[n].backend == "gpu"}
        compiled = {}
        if gpus:  # CPU pods run the leaves' text
            from scheduler.running.leaf_ptx import leaves_for_pods

            compiled = leaves_for_pods(self.prepared.program, gpus)
        # one message per kind of GPU (pods of one capability share one dict of leaves), not per pod
        built: dict[int, object] = {}
        for n in nodes:
            leaves = compiled.get(n)
            if id(leaves) not in built:
                built[id(leaves)] = self.io.job_program(self.prepared.program, self.prepared.scalars, leaves)
            self.job_programs[n] = built[id(leaves)]
        self._mark("compile_end")

    def now(self) -> float:
        return time.time() - self.t0

    async def run(self) -> RunResult:
        figures = {}
        for node in self.nodes:
            info = self.session.infos[node]
            figures[node] = NodeFigure(node, int(info.vram_bytes), info.host_id)
            self.trace.add_node(NodeRecord(node, self.session.addresses[node], info.backend, info.device_name,
                                           int(info.vram_bytes)))
        uris = self.prepared.uris
        program = self.prepared.program

        def planner(live, generation, units, first_id):
            return plan(program, live, uris, generation, units, first_id)

        self.state = ClusterState(program, figures, planner, heartbeat_timeout=self.options.heartbeat_timeout)
        ended = False  # the job came to its end, well or not (no exception, no Ctrl-C)
        files = JobStorage.open(self.prepared)  # locks first: a busy output fails before any plan
        try:
            loop = asyncio.get_running_loop()
            files.stage_beside(self._mark, lambda error: loop.call_soon_threadsafe(self._on_staged, error))
            self._compile()
            self._mark("plan_start")
            first = self.state.handle(cm.Started(self.now()))  # one that does not fit raises
            self._mark("plan_end")
            self._spawn(self._ticker())
            self._mark("submit_start")
            self._apply(first)
            await self.done.wait()
            self._mark("run_end")
            await self.staging_over.wait()  # a job that stores nothing may be done before it
            if self.staging_error is not None:
                raise self.staging_error
            ok, reason = self._finish(files)
            ended = True
        finally:
            self.done.set()  # however it ends: the ticker stops, the pods hear of no staging now
            try:
                if files.staging is not None:
                    await self.staging_over.wait()  # here, abandon need not block the loop on it
            finally:
                files.abandon()
            for task in self.tasks:
                task.cancel()
            if self.drop_at_end or not ended:  # stopped (Ctrl-C, an error): every pod is told first
                await self._cancel_everywhere()
        wall = self.now()
        trace = self.trace.finish(self.state, wall)
        trace["phases"] = job_phases(PROCESS.take(), self.marks, trace["events"], self.t0)
        return RunResult(ok, reason, wall, trace)

    def _finish(self, files: JobStorage) -> tuple[bool, str]:
        """Commit a job that succeeded: (ok, why not)."""
        outcome = self.state.outcome
        if not isinstance(outcome, Succeeded):
            return False, outcome.reason if isinstance(outcome, Failed) else "stopped"
        self._mark("commit_start")
        try:
            files.commit(self._mark)
            ok, reason = True, ""
        except CommitFailed as err:
            ok, reason = False, str(err)
        self._mark("commit_end")
        return ok, reason

    def _mark(self, name: str) -> None:
        self.marks[name] = time.time()  # also from the staging thread: one dict store, atomic

    def _on_staged(self, error: BaseException | None) -> None:
        """The staging thread is over: tell the pods holding an unstaged plan, or fail the job."""
        self.staging_error = error
        self.staging_over.set()
        if self.done.is_set():
            return  # the job is over (or stopping): its pods are told to drop it instead
        if error is not None:
            self.done.set()  # run() raises it; its `finally` drops the job on every node
            return
        for node in sorted(self.unstaged):
            self._spawn(self._tell_staged(node))
        self.unstaged.clear()

    async def _cancel_everywhere(self) -> None:
        """Drop the job on every live node: buffers of a failed job are freed at once."""
        live = [n for n in self.nodes if n not in self.session.lost]
        await asyncio.gather(*(self._cancel(n) for n in live))

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _ticker(self) -> None:
        period = max(0.05, min(0.5, self.options.heartbeat_timeout / 4))
        while not self.done.is_set():
            await asyncio.sleep(period)
            self._apply(self.state.handle(cm.Tick(self.now())))

    # ---- actions -----------------------------------------------------------------------------

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Submit):
                self.trace.add_plan(self.state.plans[action.plan.generation], action.node,
                                    self.state.instruction_info)
                self._spawn(self._submit(action))
            elif isinstance(action, Cancel):
                # Declared dead: later jobs of this session must not count on it either.
                self.session.lost.setdefault(action.node, self.state.death_of(action.node))
                self._spawn(self._cancel(action.node))
            elif isinstance(action, Replanned):
                moved = ", ".join(f"unit {u} from node {a} to node {b}" for u, a, b in action.moved)
                log.warning("re-planned", job=self.prepared.job_id, generation=action.generation,
                            cause=action.cause, units=len(action.moved), moved=moved or "none")
            elif isinstance(action, Failed | Succeeded):
                log.debug("job outcome", job=self.prepared.job_id, outcome=type(action).__name__)
                self.done.set()

    async def _submit(self, action: Submit) -> None:
        from schemas.capnp_io import Peer

        pod = self.session.pods[action.node]
        peers = [Peer(n, self.session.addresses[n]) for n in sorted(self.state.live)]
        staged = self.staging_over.is_set() and self.staging_error is None  # else: told when it is
        if not staged:
            self.unstaged.add(action.node)
        try:
            program = self.job_programs[action.node]  # with the leaves compiled for this pod's GPU
            sending = self.io.send_submit(pod, self.prepared.job_id, program, action.plan, peers,
                                          staged=staged)
            await asyncio.wait_for(sending, CALL_TIMEOUT_S)
        except Exception as err:
            self._call_failed(action.node, err)

    async def _tell_staged(self, node: int) -> None:
        """The node holds the job's stores until it hears this; if it cannot, it is of no use."""
        if node in self.session.lost or node not in self.state.live:
            return
        try:
            call = self.session.pods[node].outputsStaged(self.prepared.job_id)
            check(await asyncio.wait_for(call, CALL_TIMEOUT_S))
        except Exception as err:
            self._call_failed(node, err)

    def _call_failed(self, node: int, err: Exception) -> None:
        failed = cm.SubmitFailed(node, classify(err), remote_reason(err), self.now())
        self._apply(self.state.handle(failed))

    async def _cancel(self, node: int) -> None:
        try:
            await asyncio.wait_for(self.session.pods[node].cancel(self.prepared.job_id), 2.0)
        except Exception:  # best effort: a dead node cannot answer, and needs no telling
            pass

    # ---- reports -------------------------------------------------------------------------------

    def on_disconnected(self, node: int, reason: str) -> None:
        if node in self.nodes and self.state is not None:
            self._apply(self.state.handle(cm.Disconnected(node, reason, self.now())))

    def on_heartbeat(self, node: int, generation: int, running: list[int]) -> None:
        if node in self.nodes and self.state is not None:
            self._apply(self.state.handle(cm.Heartbeat(node, generation, tuple(running), self.now())))

    def on_events(self, node: int, generation: int, events) -> None:
        if node not in self.nodes or self.state is None:
            return
        live = node in self.state.live
        infos = []
        for reader in events:
            event = self.io.read_event(reader)
            self.trace.add_event(node, generation, event, self.t0, accepted=live)
            infos.append(EventInfo(event.id, event.kind, event.ok, event.message))
        self._apply(self.state.handle(cm.Events(node, generation, infos, self.now())))

    def on_finished(self, node: int, generation: int, ok: bool, message: str) -> None:
        if node in self.nodes and self.state is not None:
            self._apply(self.state.handle(cm.Finished(node, generation, ok, message, self.now())))


def _sink_class():
    from schemas import capnp_io, rpc_streams

    class SinkImpl(capnp_io.rpc().SchedulerSink.Server):
        """One per node: the `node` a pod claims is ignored in favour of the connection's own."""

        def __init__(self, session: PodSession, node: int):
            self.runner, self.node = session, node

        @rpc_streams.answers_refusals
        async def heartbeat(self, node, generation, running, _context, **kwargs):
            self.runner.on_heartbeat(self.node, generation, list(running))

        async def events(self, node, generation, events, jobId, _context, **kwargs):
            self.runner.on_events(self.node, generation, jobId, events)

        async def finished(self, node, jobId, generation, ok, message, _context, **kwargs):
            self.runner.on_finished(self.node, jobId, generation, ok, message)

    return SinkImpl


def SinkImpl(session: PodSession, node: int):  # noqa: N802 - builds the capnp server class lazily
    global _SINK
    if _SINK is None:
        _SINK = _sink_class()
    return _SINK(session, node)


_SINK = None


def not_a_pod(err: BaseException) -> str:
    """Why login to an address failed, when it was not a refusal: what a user can act on. By the
    failure's kind (a timeout, a dropped connection, anything else the far side sent)."""
    kind, text = classify(err), remote_reason(err)
    if kind is FailureKind.TIMEOUT:
        return f"no answer to the login within {CONNECT_TIMEOUT_S:g} s"
    if kind is FailureKind.DISCONNECTED:
        return f"the connection closed before login ({text})"
    return f"it answered with something that is not a phobos pod's RPC ({text})"
