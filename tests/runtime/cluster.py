"""Helpers for end-to-end runtime tests: real pod processes on loopback, one session per module.

A pod takes the session that said hello as its scheduler and exits when it drops, so a module
starts its pods once, opens one session on them, and runs every job through it (on all of its
nodes or on a subset). The event loop (with the Cap'n Proto KJ loop inside it) lives as long as
the module's fixture; each test drives it with `run_until_complete`.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.jobs.prepare import prepare
from scheduler.running.run import PodSession, RunOptions, RunResult, start_pods_for

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Cluster:
    loop: asyncio.AbstractEventLoop
    session: PodSession
    options: RunOptions
    root: Path

    def run(self, job_path: Path, nodes: list[int] | None = None,
            cluster_values: dict[str, int] | None = None) -> RunResult:
        from scheduler.jobs.jobfile import read_job

        prepared = prepare(read_job(job_path), job_path, [self.root], cluster_values)
        return self.loop.run_until_complete(
            asyncio.wait_for(self.session.run(prepared, self.options, nodes), 120))


def open_cluster(root: Path, pods: int, device: str = "cpu", **options):
    """Start `pods` local pods and a session on them; returns (cluster, closer)."""
    loop, kj = _loop()
    opts = RunOptions(storage_roots=(root,), **options)
    local = loop.run_until_complete(start_pods_for(opts, count=pods))
    cluster, close_session = _session(loop, kj, local.addresses, local.token, opts)

    def close():
        loop.run_until_complete(local.stop())
        close_session()

    return cluster, local, close


def open_session(root: Path, addresses: list[str], token: str, **options):
    """A session on pods already running (`start_pod`), as `--pods` opens; returns (cluster,
    closer). Closing it is the scheduler leaving: pods started with --keep-serving stay up."""
    loop, kj = _loop()
    return _session(loop, kj, addresses, token, RunOptions(storage_roots=(root,), **options))


def _loop():
    import capnp

    loop = asyncio.new_event_loop()
    kj = capnp.kj_loop()
    loop.run_until_complete(_enter(kj))
    return loop, kj


def _session(loop, kj, addresses: list[str], token: str, options: RunOptions):
    session = PodSession(addresses, token)
    loop.run_until_complete(session.open())

    def close():
        loop.run_until_complete(session.close())
        loop.run_until_complete(kj.__aexit__(None, None, None))
        loop.close()

    return Cluster(loop, session, options, options.storage_roots[0]), close


def program_env(token: str) -> dict[str, str]:
    """The environment a pod or scheduler program of this checkout runs in, with `token`."""
    path = str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return dict(os.environ, PHOBOS_TOKEN=token, PYTHONPATH=path)


def start_pod(folder: Path, token: str, *flags: str) -> tuple[subprocess.Popen, str]:
    """A CPU pod process serving `folder` (with `flags`, e.g. --keep-serving); (process, address)."""
    module = os.environ.get("PHOBOS_POD_MODULE", "pod.main")
    pod = subprocess.Popen([sys.executable, "-m", module, "--listen", "127.0.0.1:0", "--device", "cpu",
                            "--storage-root", str(folder), "--log-level", "error", *flags],
                           env=program_env(token), stdout=subprocess.PIPE, text=True, cwd=REPO)
    line = pod.stdout.readline()
    assert line.startswith("PHOBOS_POD_LISTENING "), line
    return pod, line.split()[1]


async def _enter(kj):
    await kj.__aenter__()


def reference(kernel_file: Path, dims: dict[str, int], arrays: dict[str, np.ndarray],
              scalars: dict[str, float] | None = None) -> dict[str, np.ndarray]:
    """The plain kernel's result under the reference interpreter (the language's meaning)."""
    from compiler.frontend.binding import bind
    from compiler.frontend.load import load_file
    from compiler.interp.interpreter import run_kernel

    kernel = load_file(kernel_file).kernel()
    tensors = {k: v.copy() for k, v in arrays.items()}
    binding = bind(kernel, dims, {k: v.shape for k, v in tensors.items()})
    run_kernel(kernel, binding, tensors, scalars or {})
    return tensors


def run_scheduler(folder: Path, token: str, *argv: str) -> subprocess.CompletedProcess:
    """A `phobos-sched` command of this checkout, its storage root `folder`, run to its end."""
    return subprocess.run([sys.executable, "-m", "scheduler.main", *argv, "--storage-root", str(folder)],
                          env=program_env(token), capture_output=True, text=True, cwd=REPO, timeout=300)
