"""Helpers for end-to-end runtime tests: real pod processes on loopback, one session per module.

A pod takes the session that said hello as its scheduler and exits when it drops, so a module
starts its pods once, opens one session on them, and runs every job through it (on all of its
nodes or on a subset). The event loop (with the Cap'n Proto KJ loop inside it) lives as long as
the module's fixture; each test drives it with `run_until_complete`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scheduler.prepare import prepare
from scheduler.run import PodSession, RunOptions, RunResult, start_pods_for


@dataclass
class Cluster:
    loop: asyncio.AbstractEventLoop
    session: PodSession
    options: RunOptions
    root: Path

    def run(self, job_path: Path, nodes: list[int] | None = None,
            cluster_values: dict[str, int] | None = None) -> RunResult:
        from scheduler.jobfile import read_job

        prepared = prepare(read_job(job_path), job_path, [self.root], cluster_values)
        return self.loop.run_until_complete(
            asyncio.wait_for(self.session.run(prepared, self.options, nodes), 120))


def open_cluster(root: Path, pods: int, device: str = "cpu", **options):
    """Start `pods` local pods and a session on them; returns (cluster, closer)."""
    import capnp

    loop = asyncio.new_event_loop()
    kj = capnp.kj_loop()
    loop.run_until_complete(_enter(kj))
    opts = RunOptions(storage_roots=(root,), **options)
    local = loop.run_until_complete(start_pods_for(opts, count=pods))
    session = PodSession(local.addresses, local.token)
    loop.run_until_complete(session.open())

    def close():
        loop.run_until_complete(session.close())
        loop.run_until_complete(local.stop())
        loop.run_until_complete(kj.__aexit__(None, None, None))
        loop.close()

    return Cluster(loop, session, opts, root), local, close


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
