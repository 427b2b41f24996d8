"""Real pods, real signals: the fault tests' harness (also used by tools/soak_faults.py).

A `Pods` object owns one event loop (with the Cap'n Proto KJ loop inside), the pod processes it
started (each with its own environment, so one can carry PHOBOS_FAULT, and its own log file) and
the scheduler sessions opened on them. Pods are reused across runs: a pod takes the last session
that said hello as its scheduler, so a new session on three surviving pods plus a fresh faulty one
costs one process start, not four (the kill matrix runs 30 jobs in the suite's time budget).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common import storage
from scheduler.jobs.jobfile import read_job
from scheduler.jobs.prepare import prepare
from scheduler.pods.local_pods import READY_LINE, new_token
from scheduler.running.run import PodSession, RunOptions, RunResult

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Pod:
    process: asyncio.subprocess.Process
    address: str
    log: Path
    fault: str = ""

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def signal(self, sig: int) -> None:
        if self.alive:
            try:
                os.kill(self.process.pid, sig)
            except ProcessLookupError:
                pass


@dataclass
class Pods:
    root: Path
    logs: Path
    heartbeat_interval: float = 0.1
    heartbeat_timeout: float = 1.0
    fetch_timeout: float = 5.0
    log_level: str = "info"
    token: str = field(default_factory=new_token)
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    pods: list[Pod] = field(default_factory=list)
    sessions: list[PodSession] = field(default_factory=list)

    def __post_init__(self):
        import capnp

        self.kj = capnp.kj_loop()
        self.loop.run_until_complete(self.kj.__aenter__())
        self.logs.mkdir(parents=True, exist_ok=True)

    @property
    def options(self) -> RunOptions:
        return RunOptions(storage_roots=(self.root,), heartbeat_interval=self.heartbeat_interval,
                          heartbeat_timeout=self.heartbeat_timeout)

    # ---- processes ----

    def start(self, count: int = 1, fault: str = "", env: dict[str, str] | None = None) -> list[Pod]:
        return self.loop.run_until_complete(self.start_async(count, fault, env))

    async def start_async(self, count: int = 1, fault: str = "",
                          env: dict[str, str] | None = None) -> list[Pod]:
        return list(await asyncio.gather(*(self._spawn(fault, env) for _ in range(count))))

    async def _spawn(self, fault: str, extra_env: dict[str, str] | None) -> Pod:
        env = dict(os.environ, PHOBOS_TOKEN=self.token, PHOBOS_FAULT=fault, **(extra_env or {}))
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        log = self.logs / f"pod-{len(self.pods)}-{os.getpid()}-{id(env)}.log"
        argv = [sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0", "--device", "cpu",
                "--storage-root", str(self.root), "--log-level", self.log_level,
                "--heartbeat-interval", str(self.heartbeat_interval),
                "--scheduler-timeout", str(self.heartbeat_timeout),
                "--fetch-timeout", str(self.fetch_timeout)]
        with open(log, "wb") as err:
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, cwd=str(REPO), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=err)
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        text = line.decode(errors="replace")
        if not text.startswith(READY_LINE):
            raise RuntimeError(f"pod did not start: {text!r}; log: {log.read_text()[-2000:]}")
        asyncio.ensure_future(_drain(process.stdout))
        pod = Pod(process, text[len(READY_LINE):].strip(), log, fault)
        self.pods.append(pod)
        return pod

    def healthy(self) -> list[Pod]:
        return [p for p in self.pods if p.alive and not p.fault]

    def wait_exit(self, pod: Pod, timeout: float) -> int | None:
        """The pod's exit code, or None if it is still running after `timeout` seconds."""
        try:
            return self.loop.run_until_complete(asyncio.wait_for(pod.process.wait(), timeout))
        except TimeoutError:
            return None

    # ---- jobs ----

    def session(self, pods: list[Pod]) -> PodSession:
        session = PodSession([p.address for p in pods], self.token)
        self.loop.run_until_complete(session.open())
        self.sessions.append(session)
        return session

    def run(self, session: PodSession, job_path: Path, cluster_values: dict[str, int] | None = None,
            during=None, timeout: float = 120) -> RunResult:
        """Run a job on a session; `during(session)` (optional coroutine) runs alongside it."""
        prepared = prepare(read_job(job_path), job_path, [self.root], cluster_values)

        async def go():
            side = asyncio.ensure_future(during(session)) if during else None
            try:
                return await asyncio.wait_for(session.run(prepared, self.options), timeout)
            finally:
                if side is not None:
                    side.cancel()

        return self.loop.run_until_complete(go())

    def close(self) -> None:
        for session in self.sessions:
            self.loop.run_until_complete(session.close())
        for pod in self.pods:
            pod.signal(signal.SIGKILL)
        for pod in self.pods:
            self.loop.run_until_complete(pod.process.wait())
        self.loop.run_until_complete(self.kj.__aexit__(None, None, None))
        self.loop.close()


async def _drain(stream) -> None:
    try:
        while await stream.readline():
            pass
    except Exception:  # the pod died: nothing more to read
        pass


# ---- data ----


def matmul_inputs(folder: Path, m: int, n: int, k: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    np.save(folder / "A.npy", rng.standard_normal((m, k)).astype(np.float32))
    np.save(folder / "B.npy", rng.standard_normal((k, n)).astype(np.float32))


def child_pids(pid: int) -> list[int]:
    """The pids of `pid`'s child processes (a scheduler's local pods), read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry))
    return out


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str) -> None:
    """Poll `predicate` until it holds: tests wait for events, bounded by a generous timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def staging_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if storage.STAGING_MARK in p.name)


def hold_staging(monkeypatch, until: threading.Event, then=None, create_first: bool = False):
    """create_staging waits for `until` before it creates anything, then calls `then` (which may
    raise, as a full disk does) or creates the copy; with `create_first` it creates the copy, then
    waits. Returns (set once it is waiting, set once it returned or raised)."""
    waiting, over, real = threading.Event(), threading.Event(), storage.create_staging

    def held(*args, **kwargs):
        try:
            made = real(*args, **kwargs) if create_first else None
            waiting.set()
            assert until.wait(60), "the hold was never released"
            return made if create_first else (then or real)(*args, **kwargs)
        finally:
            over.set()

    monkeypatch.setattr(storage, "create_staging", held)
    return waiting, over


def instruction_counts(job_path: Path, root: Path, nodes: int, cluster_values: dict[str, int]) -> dict:
    """{node: {kind: count}} of the first plan over `nodes` nodes (the planner is deterministic)."""
    from scheduler.planning.planner import NodeFigure, plan
    from schemas.instructions import kind_of

    prepared = prepare(read_job(job_path), job_path, [root], cluster_values)
    first = plan(prepared.program, [NodeFigure(n) for n in range(nodes)], prepared.uris)
    counts: dict[int, dict[str, int]] = {}
    for node, node_plan in first.node_plans.items():
        per = counts.setdefault(node, {})
        for ins in node_plan.instructions:
            per[kind_of(ins)] = per.get(kind_of(ins), 0) + 1
    return counts
