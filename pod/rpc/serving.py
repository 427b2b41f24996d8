"""A pod's tiles served to the peers that ask for them (tileHeader, readChunk, release): the
part of PodRuntime (pod/runtime.py) that the RPC face (pod/rpc/server.py) calls for a peer, kept in a
module of its own. Offers made before a peer asks are the runtime's (`_offer`)."""

from __future__ import annotations

import asyncio
import time

from common.log import get_logger
from pod.job_records import BufferRecord, Job
from pod.rpc.transfer import byte_view
from pod.statemachine import machine as m
from schemas.capnp_io import InstructionEvent, TileHeader
from schemas.remote_errors import Refused

log = get_logger()


class Serving:
    """PodRuntime's methods for serving peers (it provides jobs, feed, link, faults, data_port)."""

    async def wait_servable(self, job_id: str, generation: int, buffer: int,
                            patience_s: float) -> BufferRecord:
        """The buffer once every instruction filling it is done (waiting at most `patience_s`)."""
        job = self.job(job_id)
        job.state.check_generation(generation)
        key = (generation, buffer)
        if not self._servable(job, generation, buffer):
            refusal = job.state.doomed(generation, buffer)
            if refusal is not None:
                raise refusal
            fut = asyncio.get_running_loop().create_future()
            job.waiters.setdefault(key, []).append(fut)
            log.debug("a peer waits for a tile", job=job_id, generation=generation, buffer=buffer,
                      plan_here=generation in job.state.plans, patience_s=patience_s)
            try:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns the result when
                # the caller is cancelled just as the buffer becomes ready, and the RPC method
                # then writes the results of a call whose peer is gone (a SIGSEGV in pycapnp).
                async with asyncio.timeout(patience_s):
                    await fut
            except TimeoutError:
                raise job.state.unservable(generation, buffer, patience_s) from None
        return self._buffer(job, generation, buffer)

    async def tile_header(self, job_id: str, generation: int, buffer: int, patience_s: float) -> TileHeader:
        """Describe a servable buffer and offer a ticket for it on the data port."""
        delay = self.faults.hit("serve", generation=generation)
        if delay is not None:  # test-only: a slow answer to a peer
            await delay.wait()
        record = await self.wait_servable(job_id, generation, buffer, patience_s)
        await self._serving_copy(record)
        return self._tile_header(record)

    def _tile_header(self, record: BufferRecord) -> TileHeader:
        """A served tile's header, with a fresh data-port ticket (none: chunks over the RPC)."""
        if self.data_port is None:
            port, ticket = 0, b""
        else:
            port, ticket = self.data_port.port, self.data_port.offer(record.host)
        # the Allocate's dtype, which the fetcher's buffer has too: a GPU's host copy of an fp8
        # tile is uint8, whose numpy name would not say e4m3 or e5m2
        return TileHeader(shape=tuple(record.host.shape), dtype=record.dtype,
                          nbytes=record.host.nbytes, checksum=record.crc, data_port=port, ticket=ticket)

    def _servable(self, job: Job, generation: int, buffer: int) -> bool:
        plan = job.state.plans.get(generation)
        return (job.state.is_current(generation) and plan is not None and plan.servable(buffer)
                and (generation, buffer) in job.buffers)

    def read_chunk(self, job_id: str, generation: int, buffer: int, offset: int, length: int) -> bytes:
        job = self.job(job_id)
        job.state.check_generation(generation)
        record = self._buffer(job, generation, buffer)
        if record.host is None:
            raise Refused(f"buffer {buffer}: ask tileHeader first")
        data = byte_view(record.host)
        if offset > len(data):
            raise Refused(f"buffer {buffer}: offset {offset} is past its {len(data)} bytes")
        return bytes(data[offset:offset + length])

    def release(self, job_id: str, generation: int, buffer: int, node: int, nbytes: int,
                gave_up: bool = False) -> None:
        self.job(job_id)
        if gave_up:
            log.debug("a peer gave up fetching a tile", job=job_id, generation=generation,
                      buffer=buffer, peer=node)
        self.feed(m.TileReleased(job_id, generation, buffer, node, nbytes, time.time(), gave_up))

    def report_served(self, r: m.ReportServed) -> None:
        self.link.queue_event(r.job, r.generation, InstructionEvent(
            id=r.buffer, kind="serve", start=r.at, end=r.at, bytes=r.nbytes, peer=r.node))
