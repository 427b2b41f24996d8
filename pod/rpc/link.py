"""The pod's shell toward its scheduler: heartbeats out, reports out, in order, one batch in flight.

I/O only: whether the scheduler is still there (and what a failed heartbeat means) is the
machine's call (pod/statemachine/machine.py); this module sends, times the answers and feeds them back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from common.log import get_logger
from pod.statemachine import machine as m
from schemas import capnp_io
from schemas.remote_errors import FailureKind, check, classify, remote_reason

log = get_logger()
EVENT_BATCH = 1024


class SchedulerLink:
    """The scheduler `hello` named: its heartbeat loop and the outbox of events for it."""

    def __init__(self, machine: m.PodMachine, feed: Callable[[m.Stimulus], None], heartbeat_interval: float,
                 scheduler_timeout: float, spawn: Callable):
        self.machine, self.feed, self.spawn = machine, feed, spawn
        self.interval, self.timeout = heartbeat_interval, scheduler_timeout
        self.sink = None  # the SchedulerSink capability
        self.conn = None  # its connection (pod/rpc/gate.py Stranger)
        self.outbox: list[tuple] = []
        self.outbox_ready = asyncio.Event()
        self.outbox_delivered = 0  # items the scheduler took, ever (see events_delivered)
        self.delivery_waiters: list[tuple[int, asyncio.Future]] = []

    def hello(self, sink, conn, session: int) -> None:
        self.sink, self.conn = sink, conn
        self.spawn(self._heartbeat(sink, session))
        self.outbox_ready.set()

    def forget(self) -> None:
        """The scheduler is gone (and the pod serves on): nothing queued for it is sent."""
        self.outbox.clear()
        self._delivered(0, everything=True)
        self.sink = self.conn = None

    async def _heartbeat(self, sink, session: int) -> None:
        """One loop per hello; it ends once the machine says this session is over."""
        while self.machine.heartbeating(session):
            generation, running = self.machine.running()
            sent = time.monotonic()
            try:
                reply = await asyncio.wait_for(sink.heartbeat(self.machine.node, generation, running),
                                               timeout=max(self.interval, self.timeout))
                check(reply)
                self.feed(m.HeartbeatAnswered(session, sent, time.monotonic()))
            except Exception as err:
                self.feed(m.HeartbeatFailed(session, classify(err), remote_reason(err), time.monotonic()))
            if self.machine.heartbeating(session):
                await asyncio.sleep(self.interval)

    # ---- reports -----------------------------------------------------------------------------------

    def queue_event(self, job_id: str, generation: int, event: capnp_io.InstructionEvent) -> None:
        self.outbox.append(("event", job_id, generation, event))
        self.outbox_ready.set()

    def queue_finished(self, job_id: str, generation: int, ok: bool, message: str) -> None:
        self.outbox.append(("finished", job_id, generation, ok, message))
        self.outbox_ready.set()
        level = log.info if ok else log.warning
        level("plan finished", job=job_id, generation=generation, ok=ok, message=message)

    async def sender(self, stop: asyncio.Event) -> None:
        """Send queued events in order, batched per (job, generation), one call in flight."""
        while not stop.is_set():
            await self.outbox_ready.wait()
            self.outbox_ready.clear()
            while self.outbox and self.sink is not None:
                try:
                    await self._send_head()
                except Exception as err:
                    log.warning("reporting to the scheduler failed", reason=remote_reason(err),
                                kind=classify(err).value)
                    await asyncio.sleep(self.interval)  # the heartbeats decide whether it is gone

    async def _send_head(self) -> None:
        head = self.outbox[0]
        if head[0] == "finished":
            _, job_id, generation, ok, message = head
            await self.sink.finished(self.machine.node, job_id, generation, ok, message)
            self.outbox.pop(0)
            self._delivered(1)
            return
        _, job_id, generation, _ = head
        batch = []
        for item in self.outbox:
            if item[0] != "event" or item[1] != job_id or item[2] != generation or len(batch) >= EVENT_BATCH:
                break
            batch.append(item[3])
        request = self.sink.events_request()
        request.node, request.generation, request.jobId = self.machine.node, generation, job_id
        capnp_io.write_events(request, "events", batch)
        await request.send()
        del self.outbox[:len(batch)]
        self._delivered(len(batch))

    def _delivered(self, count: int, everything: bool = False) -> None:
        self.outbox_delivered += count
        waiting = []
        for target, fut in self.delivery_waiters:
            if everything or target <= self.outbox_delivered:
                if not fut.done():
                    fut.set_result(None)
            else:
                waiting.append((target, fut))
        self.delivery_waiters = waiting

    async def events_delivered(self) -> None:
        """Return once the scheduler has taken every event queued so far.

        A unit's first compute waits for this (pod/runtime.py), so that when its leaf takes the
        pod down at once, the scheduler already knows the compute's inputs were done and charges
        the unit. One round trip per unit; a slow or gone scheduler delays the compute by at
        most --scheduler-timeout (after that the pod is exiting anyway), never blocks it."""
        if self.sink is None or not self.outbox:
            return
        fut = asyncio.get_running_loop().create_future()
        # The outbox loses items only as the scheduler takes them, so this counts what is queued.
        self.delivery_waiters.append((self.outbox_delivered + len(self.outbox), fut))
        try:
            async with asyncio.timeout(self.timeout):
                await fut
        except TimeoutError:
            pass


__all__ = ["EVENT_BATCH", "FailureKind", "SchedulerLink"]
