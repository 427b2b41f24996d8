"""A peer that goes away while its tile becomes ready must not get results written for it.

pycapnp cancels an RPC method's task when its caller disconnects and frees the call; a method
that writes results after such a cancel touches freed memory (tools/soak_faults.py found a pod
killed by SIGSEGV in tileHeader). These tests pin both guards: the wait for a servable buffer
lets the cancel through even when the buffer becomes ready in the same loop turn, and the
results of a call whose task is being cancelled are never handed out.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from pod.rpc.offers import Offers
from pod.runtime import PodRuntime
from pod.statemachine.machine import PodMachine
from schemas.rpc_streams import results_of_live_call

NO_BACKEND = SimpleNamespace(kind="cpu", forget=lambda job_id: None)  # these tests run no instruction


def bare_runtime(root) -> PodRuntime:
    """A runtime with its machine and no scheduler or peers (these tests only serve)."""
    machine = PodMachine(scheduler_timeout=5.0)
    return PodRuntime(NO_BACKEND, [root], None, machine, machine.handle, link=None,
                      peers=SimpleNamespace(offers=Offers()), io_pool=ThreadPoolExecutor(1))


def test_cancel_arriving_with_the_buffer_is_not_swallowed(tmp_path):
    async def scenario():
        runtime = bare_runtime(tmp_path)
        try:
            waiting = asyncio.ensure_future(runtime.wait_servable("job", 0, 5, patience_s=10))
            await asyncio.sleep(0)  # now parked on the buffer's waiter
            job = runtime.job("job")
            assert (0, 5) in job.waiters
            runtime._wake(job, (0, 5), None)  # ready ...
            waiting.cancel()  # ... and the caller gone, in the same turn
            with pytest.raises(asyncio.CancelledError):
                await waiting
        finally:
            runtime.close()

    asyncio.run(scenario())


def test_waiting_past_the_patience_for_a_buffer_no_plan_produces_is_refused(tmp_path):
    async def scenario():
        runtime = bare_runtime(tmp_path)
        try:
            with pytest.raises(Exception, match="no plan of generation 0 on this node produces it"):
                await runtime.wait_servable("job", 0, 5, patience_s=0.05)
        finally:
            runtime.close()

    asyncio.run(scenario())


def test_results_of_a_cancelled_call_are_never_handed_out():
    context = SimpleNamespace(results="the results")

    async def method(started: asyncio.Event, go_on: asyncio.Event):
        started.set()
        try:
            await go_on.wait()
        except asyncio.CancelledError:
            pass  # swallowed, as asyncio.wait_for on 3.11 may do
        return results_of_live_call(context)

    async def scenario():
        started, go_on = asyncio.Event(), asyncio.Event()
        task = asyncio.ensure_future(method(started, go_on))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        live = asyncio.ensure_future(method(asyncio.Event(), go_on))
        go_on.set()
        assert await live == "the results"

    asyncio.run(scenario())
