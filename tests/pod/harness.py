"""Test-side helpers: start real pod processes, log in, play the scheduler's SchedulerSink."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import capnp

from schemas import capnp_io, rpc_streams
from schemas.remote_errors import remote_reason

REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789"
rpc = capnp_io.rpc()


@contextlib.contextmanager
def running_pods(count: int, root: Path, token: str = TOKEN, extra: tuple[str, ...] = (),
                 devices: tuple[str, ...] = ()):
    """Start `count` pods on loopback (storage root `root`; CPU pods unless `devices` names each
    pod's --device); yields [(process, address)].
    Their logs go to root/pod-N.log (a pipe nobody reads would block a chatty pod)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PHOBOS_TOKEN": token}
    level = os.environ.get("PHOBOS_TEST_POD_LOG", "warning")
    procs, logs = [], []
    try:
        for i in range(count):
            logs.append(open(root / f"pod-{i}.log", "a"))
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "pod.main", "--listen", "127.0.0.1:0",
                 "--device", devices[i] if devices else "cpu",
                 "--storage-root", str(root), "--log-level", level, *extra],
                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=logs[-1], text=True))
        pods = []
        for i, proc in enumerate(procs):
            line = proc.stdout.readline()
            assert line.startswith("PHOBOS_POD_LISTENING "), (line, (root / f"pod-{i}.log").read_text())
            pods.append((proc, line.split()[1]))
        yield pods
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        for log in logs:
            log.close()


def run_async(coro_fn, *args):
    """Run a coroutine function inside the KJ event loop (what every pycapnp call needs)."""
    async def main():
        async with capnp.kj_loop():
            return await coro_fn(*args)

    return asyncio.run(main())


async def connect(address: str, token: str = TOKEN, limit_words: int = capnp_io.TRAVERSAL_LIMIT_WORDS):
    """Log in to a pod; `limit_words` above the pod's own lets a test send what the pod refuses."""
    host, port = address.rsplit(":", 1)
    stream = await rpc_streams.connect(host, int(port))
    client = capnp.TwoPartyClient(stream, traversal_limit_in_words=limit_words,
                                  nesting_limit=capnp_io.NESTING_LIMIT)
    pod = await rpc_streams.login(client, token, 30)
    return client, pod


class Sink(rpc.SchedulerSink.Server):
    """The scheduler's side of the pods' reports, recorded for assertions."""

    def __init__(self):
        # (not `events` / `finished`: those names are the interface's methods)
        self.reported: list[tuple[int, capnp_io.InstructionEvent]] = []
        self.plans_done: dict[tuple[int, str, int], tuple[bool, str]] = {}
        self.beats: list[tuple[int, int, list[int]]] = []
        self.job_events: dict[str, list[capnp_io.InstructionEvent]] = {}
        self.changed = asyncio.Event()  # set on every `finished` (made lazily inside the loop)

    async def heartbeat(self, node, generation, running, _context, **kwargs):
        self.beats.append((node, generation, list(running)))

    async def events(self, node, generation, events, jobId, _context, **kwargs):
        batch = [capnp_io.read_event(e) for e in events]
        self.reported += [(node, e) for e in batch]
        self.job_events.setdefault(jobId, []).extend(batch)

    async def finished(self, node, jobId, generation, ok, message, _context, **kwargs):
        self.plans_done[(node, jobId, generation)] = (ok, message)
        self.changed.set()

    async def wait_finished(self, keys, timeout: float = 20.0):
        deadline = time.monotonic() + timeout
        while not all(k in self.plans_done for k in keys):
            left = deadline - time.monotonic()
            if left <= 0:
                failed = [(node, e.kind, e.id, e.message) for node, e in self.reported if not e.ok]
                raise AssertionError(f"plans not finished in time: have {self.plans_done}; "
                                     f"failed instructions (node, kind, id, reason): {failed}")
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except TimeoutError:
                pass
        return [self.plans_done[k] for k in keys]


async def logged(log: Path, *words: str, timeout: float = 60.0) -> None:
    """Wait until a line of the pod log `log` holds every word (an event of another process, not
    a delay)."""
    deadline = time.monotonic() + timeout
    while not any(all(w in line for w in words) for line in log.read_text().splitlines()):
        assert time.monotonic() < deadline, f"no line with {words} in {log} within {timeout} s"
        await asyncio.sleep(0.01)


async def hello_all(procs) -> tuple[Sink, list]:
    """Log in to every pod of `procs` and say hello as its scheduler (node = its index): the sink
    they report to, and each pod's (client, capability)."""
    sink = Sink()
    links = [await connect(addr) for _, addr in procs]
    for node, (_, pod) in enumerate(links):
        await pod.hello(sink, node)
    return sink, links


async def submit(pod, job_id: str, program: capnp_io.JobProgram, plan, peers, part_instructions=None,
                 staged: bool = True) -> None:
    # several parts when `part_instructions` says so, as the scheduler sends a huge plan
    await capnp_io.send_submit(pod, job_id, program, plan, peers,
                               part_instructions or capnp_io.PLAN_PART_INSTRUCTIONS, staged=staged)


def remote_message(err: BaseException) -> str:
    return remote_reason(err)


def in_process_pod(root: Path, backend, **options):
    """A pod (its machine and shells) in this process, on the running loop, with no scheduler
    (`options`: more of its PodConfig): returns (pod, finished, done): each plan's end as
    (ok, message) in `finished`, `done` set."""
    from pod.rpc.server import PodConfig, PodServer

    pod = PodServer(PodConfig("127.0.0.1", 0, "token", (root,), data_port=False, **options), backend)
    finished, done = [], asyncio.Event()

    def record(job_id, generation, ok, message):
        finished.append((ok, message))
        done.set()

    pod.link.queue_finished = record
    return pod, finished, done
