"""A CPU pod's I/O lanes (pod/storage/lanes.py): ready work runs earliest in the plan first, at most a
lane's width at once; and in a pod, a plan's second piece loads only once its first piece's loads
are under way, and its stores go one at a time.

Every wait here is for an event (work held until the test lets it go), never for a time.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from pod.backends.backend_cpu import CpuBackend
from pod.statemachine import machine as m
from pod.storage.lanes import LOAD_WIDTH, STORE_WIDTH, IoLanes, Lane
from scheduler.jobs import prepare as prep
from scheduler.jobs.job_storage import JobStorage
from scheduler.planning.planner import NodeFigure, plan
from schemas.capnp_io import job_program
from schemas.instructions import Allocate, Load, Store
from schemas.program import Region
from schemas.remote_errors import Refused
from tests.job_files import write_add_job
from tests.pod.harness import in_process_pod


def _held(lane: Lane, gate: threading.Event, started: threading.Event):
    """Hand the lane a piece of work that holds its thread until `gate` is set."""
    def hold():
        started.set()
        assert gate.wait(30)
    return lane.submit((-1,), hold)


def test_a_lane_runs_waiting_work_lowest_key_first():
    lane, gate, started, ran = Lane(1, "test"), threading.Event(), threading.Event(), []
    first = _held(lane, gate, started)
    assert started.wait(30)  # the lane's one thread is busy: what comes now waits
    later = [lane.submit((key,), ran.append, key) for key in (5, 3, 4, 9, 0)]
    assert lane.waiting == 5
    gate.set()
    for fut in [first, *later]:
        fut.result(30)
    assert ran == [0, 3, 4, 5, 9]
    lane.shutdown()


def test_a_lane_runs_at_most_its_width_at_once_and_shutdown_cancels_what_waits():
    lane, gate = Lane(2, "test"), threading.Event()
    starts = [threading.Event(), threading.Event()]
    held = [_held(lane, gate, started) for started in starts]
    assert all(started.wait(30) for started in starts)
    third = lane.submit((0,), lambda: "ran")
    assert lane.waiting == 1  # both threads are held: the third waits, whatever its key
    lane.shutdown()
    assert third.cancelled()
    gate.set()
    assert [fut.result(30) for fut in held] == [None, None]
    with pytest.raises(RuntimeError, match="shut down"):
        lane.submit((0,), print)


def test_work_handed_to_a_lane_whose_one_thread_is_idle_gets_a_second_thread():
    """A lane of width 2 whose one thread has gone idle is handed two works at once: the thread
    woken takes one, and a second thread the other (the woken thread still counts as idle until
    it runs, so waking it alone would leave the second work waiting for the first)."""
    lane, gate = Lane(2, "test"), threading.Event()
    lane.submit((0,), len, ()).result(30)
    for _ in range(3000):  # the thread that ran it goes back to wait for work
        with lane._cond:
            if lane._idle == 1:
                break
        time.sleep(0.01)
    else:
        pytest.fail("the lane's thread never went idle")
    starts = [threading.Event(), threading.Event()]
    held = [_held(lane, gate, started) for started in starts]
    assert all(started.wait(30) for started in starts)  # both at once, not one after the other
    gate.set()
    assert [fut.result(30) for fut in held] == [None, None]
    lane.shutdown()


def test_work_whose_caller_stopped_waiting_is_skipped():
    lane, gate, started, ran = Lane(1, "test"), threading.Event(), threading.Event(), []
    first = _held(lane, gate, started)
    assert started.wait(30)
    dropped, kept = lane.submit((1,), ran.append, 1), lane.submit((2,), ran.append, 2)
    assert dropped.cancel()
    gate.set()
    first.result(30)
    kept.result(30)
    assert ran == [2]
    lane.shutdown()


def test_only_a_cpu_pod_has_lanes():
    assert IoLanes.for_backend("gpu") is None
    lanes = IoLanes.for_backend("cpu")
    assert (lanes.loads.width, lanes.stores.width) == (LOAD_WIDTH, STORE_WIDTH) == (2, 1)
    lanes.shutdown()


class HeldBackend(CpuBackend):
    """The CPU backend whose loads and stores wait for `go`, noting which buffers they fill and
    how many run at once."""

    def __init__(self):
        super().__init__()
        self.go, self.lock = threading.Event(), threading.Lock()
        self.filling: list[int] = []  # ids of the buffers being filled now
        self.most = {"fill": 0, "drain": 0}
        self.now = {"fill": 0, "drain": 0}

    def _held(self, kind: str, buffer, work):
        with self.lock:
            self.now[kind] += 1
            self.most[kind] = max(self.most[kind], self.now[kind])
            if kind == "fill":
                self.filling.append(id(buffer))
        try:
            assert self.go.wait(30)
            return work()
        finally:
            with self.lock:
                self.now[kind] -= 1

    def fill(self, buffer, read):
        return self._held("fill", buffer, lambda: super(HeldBackend, self).fill(buffer, read))

    def drain(self, buffer, write):
        return self._held("drain", buffer, lambda: super(HeldBackend, self).drain(buffer, write))


async def _run_held(tmp_path, backend: HeldBackend, prepared, node_plan) -> tuple[set[int], bool]:
    """Submit the plan; once the load lane holds work waiting, the buffers being filled and the
    plan's outcome."""
    pod, finished, done = in_process_pod(tmp_path, backend)
    try:
        program = job_program(prepared.program, prepared.scalars)
        await pod.submit(prepared.job_id, 1, program, node_plan, (), more=False)
        lanes = pod.runtime.lanes
        for _ in range(3000):  # the first piece's loads hold the lane's threads, the second's wait
            with backend.lock:  # (or, without lanes, the second piece's loads run as well)
                running = len(backend.filling)
                if running > 2 or (running == 2 and lanes is not None and lanes.loads.waiting >= 2):
                    break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the first piece's loads never held the lane with the second's waiting")
        with backend.lock:
            filling = set(backend.filling)
        runtime = pod.runtime
        loads = [ins for ins in node_plan.instructions if isinstance(ins, Load)]
        first_inputs = {id(runtime.jobs[prepared.job_id].buffers[(1, ins.buffer)].array) for ins in loads[:2]}
        backend.go.set()
        await asyncio.wait_for(done.wait(), 30)
    finally:
        pod.runtime.close()
    return filling == first_inputs and len(filling) == 2, finished[0]


def test_a_cpu_pod_loads_its_first_piece_first_and_stores_one_at_a_time(tmp_path):
    job, want = write_add_job(tmp_path, seed=3, n=4096)
    prepared = prep.prepare(job, tmp_path / "add.job", [tmp_path], {"BLOCK": 256}, job_id="lanes")
    files = JobStorage.open(prepared)
    files.stage()
    node_plan = plan(prepared.program, [NodeFigure(0, 0)], prepared.uris, 1).node_plans[0]
    backend = HeldBackend()
    first_piece_first, (ok, message) = asyncio.run(_run_held(tmp_path, backend, prepared, node_plan))
    assert ok, message
    assert first_piece_first  # the two loads running were the first piece's; the second's waited
    assert backend.most == {"fill": LOAD_WIDTH, "drain": STORE_WIDTH}
    files.commit()
    np.testing.assert_array_equal(np.load(tmp_path / "c.npy"), want)


def test_a_store_that_waited_in_its_lane_past_its_lease_asks_again_before_it_writes(tmp_path):
    async def main():
        pod, _, _ = in_process_pod(tmp_path, CpuBackend())
        runtime, loop, wrote = pod.runtime, asyncio.get_running_loop(), []
        job = runtime.job("j")
        store = Store(7, (), 0, 0, Region("c", (0,), (4,)), 0)

        def write(label):
            return loop.run_in_executor(None, runtime._under_lease, until, job, 1, store, loop, wrote.append,
                                        label)

        try:
            until = float("inf")  # still within the lease: written without asking
            await write("within")
            until = float("-inf")  # past it: asked again; alone, the pod is granted it
            await write("asked again")
            pod.feed(m.Stop("the pod is exiting"))  # past it, and now refused: nothing is written
            with pytest.raises(Refused, match="store refused"):
                await write("refused")
        finally:
            runtime.close()
        return wrote

    assert asyncio.run(main()) == ["within", "asked again"]


def test_a_cpu_pod_runs_its_allocates_at_once_not_as_tasks(tmp_path):
    """The machine starts a plan's first Allocates: they have run by the time `feed` returns, with
    no turn of the event loop (a task each would still be waiting for one), and the loads they
    let start are tasks by then."""
    job, _ = write_add_job(tmp_path, seed=5, n=4096)
    prepared = prep.prepare(job, tmp_path / "add.job", [tmp_path], {"BLOCK": 256}, job_id="quick")
    node_plan = plan(prepared.program, [NodeFigure(0, 0)], prepared.uris, 1).node_plans[0]

    async def main():
        pod, _, _ = in_process_pod(tmp_path, CpuBackend())
        try:
            program = job_program(prepared.program, prepared.scalars)
            [prepare] = pod.feed(m.PlanPart("quick", 1, node_plan, program))
            tasks = len(pod.runtime.tasks)
            pod.feed(m.PlanReady("quick", prepare.checked, {"main": ("c",)}, program))
            allocated = sorted(b for _, b in pod.runtime.jobs["quick"].buffers)
            return allocated, len(pod.runtime.tasks) - tasks
        finally:
            pod.runtime.cancel_tasks()
            pod.runtime.close()

    allocated, new_tasks = asyncio.run(main())
    first_two = [ins.buffer for ins in node_plan.instructions[:20] if isinstance(ins, Allocate)]
    assert allocated == sorted(first_two) and len(first_two) == 6  # the first two pieces' buffers
    assert new_tasks == 4  # the four loads they let start, and nothing else


def test_a_store_of_a_job_dropped_while_it_waited_in_its_lane_writes_nothing(tmp_path):
    """A keep-serving pod whose scheduler left drops its jobs and is alone, and alone the machine
    grants every store it is asked for: a store taken from its lane just then (the scheduler
    declared the pod dead, or its connection dropped while the lease still ran) must not write,
    whether its lease ran out meanwhile (it asks again) or not."""
    async def main():
        pod, _, _ = in_process_pod(tmp_path, CpuBackend(), keep_serving=True)
        runtime, loop, wrote = pod.runtime, asyncio.get_running_loop(), []
        job = runtime.job("j")
        store = Store(7, (), 0, 0, Region("c", (0,), (4,)), 0)
        try:
            pod.feed(m.Hello(node=0, now=time.monotonic()))
            within = pod.machine.lease_until()  # the lease a store granted now writes under
            assert within > time.monotonic()
            pod.feed(m.SchedulerLost("connection reset"))
            assert pod.machine.link == m.ALONE
            for until in (float("-inf"), within):
                with pytest.raises(Refused, match="store refused"):
                    await loop.run_in_executor(None, runtime._under_lease, until, job, 1, store, loop,
                                               wrote.append, until)
        finally:
            runtime.close()
        return wrote

    assert asyncio.run(main()) == []


def test_a_thread_that_cannot_start_fails_its_submit_and_leaves_the_lane_whole(monkeypatch):
    """A thread a lane could not start (the process at its limit of threads, for a moment) fails
    that submit, whose work never runs (its instruction is reported failed), and does not count:
    the next submit starts one, instead of waiting for a thread that never was."""
    lane, ran, real_start = Lane(1, "test"), [], threading.Thread.start

    def cannot_start(thread):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", cannot_start)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        lane.submit((0,), ran.append, "failed")
    monkeypatch.setattr(threading.Thread, "start", real_start)
    assert lane.waiting == 0
    lane.submit((1,), ran.append, "next").result(30)
    assert ran == ["next"]
    lane.shutdown()
