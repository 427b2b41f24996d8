"""A pod prepares a job's leaves beside the plan's first loads, not in front of them, and a leaf
it cannot prepare still refuses the plan.

The pod (its machine and shells) runs in this process with the CPU backend, fed by hand as in
test_leaf_parses.py; the backend's preparation is held on an event, so that what runs before it
ends is seen, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from pod.backends.backend_cpu import CpuBackend
from scheduler.jobs import prepare as prep
from scheduler.jobs.job_storage import JobStorage
from scheduler.planning.planner import NodeFigure, plan
from schemas.capnp_io import job_program
from schemas.remote_errors import Refused
from tests.job_files import write_add_job
from tests.pod.harness import in_process_pod


class HeldBackend(CpuBackend):
    """The CPU backend whose `prepare` waits for `go` (and then fails, with `fail`)."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.started, self.go, self.fail = threading.Event(), threading.Event(), fail

    def prepare(self, job_id, program):
        self.started.set()
        assert self.go.wait(30)
        writes = super().prepare(job_id, program)
        if self.fail:  # after the leaves are parsed: a compute not waiting for this verdict would run
            raise Refused("the leaf cannot be prepared here")
        return writes


def _job(tmp_path):
    job, want = write_add_job(tmp_path, seed=7)
    prepared = prep.prepare(job, tmp_path / "add.job", [tmp_path], {"BLOCK": 256}, job_id="beside")
    files = JobStorage.open(prepared)
    files.stage()
    node_plan = plan(prepared.program, [NodeFigure(0, 0)], prepared.uris, 1).node_plans[0]
    return prepared, files, node_plan, want


async def _run(tmp_path, backend: HeldBackend, prepared, node_plan):
    """Submit the plan; returns (kinds of the instructions done before the preparation was let
    go, the submit's error or None, the plan's (ok, message), the leaves run: (ok, message) of
    each compute event). The plan's first units load while
    the leaves are prepared; the next ones wait for their memory, which a compute frees."""
    pod, finished, done = in_process_pod(tmp_path, backend)
    try:
        program = job_program(prepared.program, prepared.scalars)
        submit = asyncio.ensure_future(pod.submit(prepared.job_id, 1, program, node_plan, (), more=False))
        for _ in range(3000):  # a load done while the leaves are being prepared
            if any(item[3].kind == "load" for item in pod.link.outbox):
                break
            await asyncio.sleep(0.01)
        before = sorted({item[3].kind for item in pod.link.outbox})
        assert backend.started.is_set() and not submit.done()  # the submit waits for the leaves
        backend.go.set()
        try:
            await asyncio.wait_for(submit, 30)
            error = None
        except Refused as err:
            error = str(err)
        await asyncio.wait_for(done.wait(), 30)
        computes = [(item[3].ok, item[3].message) for item in pod.link.outbox if item[3].kind == "compute"]
    finally:
        pod.runtime.close()
    return before, error, finished[0], computes


def test_the_loads_run_while_the_leaves_are_prepared(tmp_path):
    prepared, files, node_plan, want = _job(tmp_path)
    before, error, (ok, message), computes = asyncio.run(_run(tmp_path, HeldBackend(), prepared, node_plan))
    assert computes and all(ok for ok, _ in computes)
    assert "load" in before and "compute" not in before and "store" not in before
    assert error is None and ok, message
    files.commit()
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), want)


def test_a_leaf_that_cannot_be_prepared_refuses_the_plan_and_nothing_is_computed(tmp_path):
    prepared, files, node_plan, _ = _job(tmp_path)
    before, error, (ok, message), computes = asyncio.run(_run(tmp_path, HeldBackend(fail=True), prepared,
                                                             node_plan))
    assert error is not None and "cannot be prepared" in error  # the scheduler fails the job with it
    assert not ok and "cannot be prepared" in message  # the plan's first compute failed with it
    assert not any(ok for ok, _ in computes)  # no leaf ran
    files.abandon()
