"""The pod's shell toward its peers: fetching tiles (CUDA IPC, the bulk data port, RPC chunks),
and offering its own servable tiles to the peers that will fetch them before they ask
(pod/rpc/offers.py): a GPU pod's CUDA IPC handle to same-host GPU peers, a CPU pod's data-port ticket
and CRC-32C to any peer.

I/O only: whether to ask an owner again after a refusal is the machine's call (pod/statemachine/machine.py
FetchFailed); the transfer paths themselves are pod/rpc/transfer.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import capnp
import numpy as np

from common.log import get_logger
from pod.rpc.offers import Offer, Offers
from pod.rpc.transfer import TransferError, byte_view, check_crc, chunk_ranges, fetch_by_ticket, verify
from pod.statemachine import machine as m
from schemas import capnp_io, rpc_streams
from schemas.capnp_io import CHUNK_BYTES, NESTING_LIMIT, TRAVERSAL_LIMIT_WORDS, PodInfo, TileHeader
from schemas.instructions import Fetch
from schemas.remote_errors import Refused, check, classify, remote_reason

log = get_logger()
CHUNKS_IN_FLIGHT = 4
SPIN_S = 0.0005  # a device copy is watched from the event loop this long before a thread waits for it


@dataclass
class PeerLink:
    client: object
    pod: object
    info: PodInfo


class Fetching(NamedTuple):
    """One Fetch instruction as the peers shell needs it (a tuple: made on every fetch's path)."""

    job_id: str
    generation: int
    ins: Fetch
    address: str


class Peers:
    """Connections to other pods (made on first use, kept) and the fetches over them."""

    def __init__(self, token: str, fetch_timeout: float, backend, info: PodInfo, io_pool,
                 feed: Callable[[m.Stimulus], list], node: Callable[[], int], failed: Callable[[], None],
                 spawn: Callable, offers: Offers):
        self.token, self.patience = token, fetch_timeout
        self.backend, self.info, self.io_pool = backend, info, io_pool
        self.feed, self.node, self.failed, self.spawn = feed, node, failed, spawn
        self.offers = offers  # tiles same-host owners offered before this pod asked
        self.links: dict[str, PeerLink] = {}
        self.linking: dict[str, asyncio.Future] = {}  # links being made: one connection per peer
        # Links to peers that failed are kept, never freed: a dead connection's client caught in a
        # reference cycle (an exception's traceback) and torn down by the cycle collector in the
        # wrong order crashes the process (SIGSEGV, seen in tests/faults).
        self.retired: list[PeerLink] = []

    async def _link(self, address: str) -> PeerLink:
        link = self.links.get(address)
        if link is not None:
            return link
        pending = self.linking.get(address)
        if pending is not None:  # another task is connecting to that peer: share its link
            return await asyncio.shield(pending)
        pending = self.linking[address] = asyncio.get_running_loop().create_future()
        try:
            link = self.links[address] = await self._connect(address)
            pending.set_result(link)
        except BaseException as err:
            reason = err if isinstance(err, Exception) else ConnectionError("connecting was cancelled")
            pending.set_exception(reason)
            pending.exception()  # retrieved: a failure nobody else waited for is not logged
            raise
        finally:
            del self.linking[address]
        return link

    async def _connect(self, address: str) -> PeerLink:
        host, port = split_address(address)
        stream = await asyncio.wait_for(rpc_streams.connect(host, port), self.patience)
        client = capnp.TwoPartyClient(stream, traversal_limit_in_words=TRAVERSAL_LIMIT_WORDS,
                                      nesting_limit=NESTING_LIMIT)
        pod = await rpc_streams.login(client, self.token, self.patience)
        info = capnp_io.read_pod_info((await asyncio.wait_for(pod.info(), self.patience)).info)
        return PeerLink(client, pod, info)

    def _retire(self, address: str) -> None:
        self.failed()
        link = self.links.pop(address, None)
        if link is not None:
            self.retired.append(link)
        if self.backend.kind == "gpu":  # its allocations may be gone: unmap what we keep of them
            self._off_loop(self.backend.drop_ipc_owner, address)

    def _off_loop(self, fn, *args) -> None:
        """Run `fn(*args)` (unmapping: it waits on the device) in the I/O pool, not waited for;
        a failure is logged."""
        def logged(done) -> None:
            if not done.cancelled() and done.exception() is not None:
                log.warning("unmapping a peer's allocation failed", reason=remote_reason(done.exception()))

        with contextlib.suppress(RuntimeError):  # the pod is closing: the pool takes no work
            self.io_pool.submit(fn, *args).add_done_callback(logged)

    async def fetch(self, f: Fetching, array, dtype: str) -> None:
        """Fill `array` (a buffer of ours, of storage dtype `dtype`) with the peer's tile;
        TransferError says why not."""
        try:
            link = self.links.get(f.address) or await self._link(f.address)
            if not (self._ipc_possible(link) and await self._fetch_ipc(f, link, array, dtype)):
                await self._fetch_host(f, link, array, dtype)
        except TransferError:
            raise
        except TimeoutError:
            self._retire(f.address)
            raise TransferError(f"node {f.ins.peer} ({f.address}) did not answer within "
                                f"{self.patience:g} s") from None
        except Exception as err:
            self._retire(f.address)
            raise TransferError(f"fetch from node {f.ins.peer} ({f.address}): {remote_reason(err)}") from None

    async def _fetch_host(self, f: Fetching, link: PeerLink, array, dtype: str) -> None:
        """The tile through host memory: straight into `array` where the backend has it there
        (CPU), else into a host array uploaded after."""
        into = self.backend.host_view(array)
        if into is None:
            into = np.empty(tuple(array.shape), self.backend.host_dtype(array))
        path = await self._fill_host(f, link, into, dtype)
        if self.backend.host_view(array) is None:
            await asyncio.get_running_loop().run_in_executor(self.io_pool, self.backend.upload, array, into)
        self._fetched(f, link, into.nbytes, path)

    async def _fill_host(self, f: Fetching, link: PeerLink, into: np.ndarray, dtype: str) -> str:
        """Fill `into` over the bulk data port with the ticket the owner offered (no round trip),
        or with one asked for now (tileHeader); chunks over the RPC where the port fails. The
        path taken, for the log."""
        loop = asyncio.get_running_loop()
        offer = self.offers.take(f.job_id, f.generation, f.ins.peer, f.ins.peer_buffer)
        offered = offer is not None and bool(offer.header.data_port)
        header = offer.header if offered else await self._tile_header(f, link)
        _check_same_tile(header, into.shape, dtype, f.ins)
        while header.data_port:
            try:
                crc = await loop.run_in_executor(self.io_pool, fetch_by_ticket, split_address(f.address)[0],
                                                 header.data_port, header.ticket, into, self.patience)
                check_crc(crc, header.checksum, f"node {f.ins.peer}")
                return "bulk-port-offered" if offered else "bulk-port"
            except TransferError as err:
                if not offered:
                    log.info("bulk path failed; reading chunks over the RPC", reason=str(err))
                    break
                log.info("offered ticket failed; asking the owner for another", reason=str(err))
                offered, header = False, await self._tile_header(f, link)  # e.g. the ticket expired
        await self._fetch_chunks(f, link, header.nbytes, into)
        await loop.run_in_executor(self.io_pool, verify, into, header.checksum, f"node {f.ins.peer}")
        return "rpc-chunks"

    async def _tile_header(self, f: Fetching, link: PeerLink) -> TileHeader:
        reply = await self._ask_owner(
            f, lambda: link.pod.tileHeader(f.job_id, f.generation, f.ins.peer_buffer))
        return capnp_io.read_tile_header(reply.header)

    async def _fetch_chunks(self, f: Fetching, link: PeerLink, nbytes: int, into: np.ndarray) -> None:
        view = byte_view(into)
        slots = asyncio.Semaphore(CHUNKS_IN_FLIGHT)

        async def one(offset: int, length: int) -> None:
            async with slots:
                reply = check(await asyncio.wait_for(
                    link.pod.readChunk(f.job_id, f.generation, f.ins.peer_buffer, offset, length),
                    self.patience))
                data = reply.data
                if len(data) != length:
                    raise TransferError(f"node {f.ins.peer} sent {len(data)} bytes for a {length}-byte chunk")
                view[offset:offset + length] = data

        await asyncio.gather(*(one(o, n) for o, n in chunk_ranges(nbytes, CHUNK_BYTES)))

    async def _ask_owner(self, f: Fetching, ask):
        """The owner's reply to `ask()` (tileHeader or ipcHandle), once the owner has the tile.

        The owner waits up to --fetch-timeout for the tile, then answers notReady. Such an owner
        is alive and answering; what it waits for may be slow (a big leaf) or stuck on a third
        node, which whoever fetches from that node directly will blame. The machine says whether
        to ask again (while this plan is current): only an owner that does not answer (within its
        wait plus 5 s), breaks the connection or sends a bad tile is blamed."""
        while True:
            try:
                return check(await asyncio.wait_for(ask(), self.patience + 5))
            except Exception as err:
                verdict = self.feed(m.FetchFailed(f.job_id, f.generation, f.ins.id, f.ins.peer, classify(err),
                                                  remote_reason(err)))
                if not any(isinstance(v, m.FetchVerdict) and v.again for v in verdict):
                    raise
            log.info("tile not ready at its owner yet; asking again", job=f.job_id, instruction=f.ins.id,
                     peer=f.ins.peer)

    def _ipc_possible(self, link: PeerLink) -> bool:
        return (self.backend.kind == "gpu" and link.info.backend == "gpu"
                and link.info.host_id == self.info.host_id and link.info.pid != self.info.pid)

    async def _fetch_ipc(self, f: Fetching, link: PeerLink, array, dtype: str) -> bool:
        """A device copy out of the owner's allocation: offered already (no round trip), else
        the owner is asked for its handle, which it answers once the tile is complete. False:
        no copy could be made (the log says why), the host path is next. Every step here is on
        each fetch's path, most of them on the event loop's thread."""
        try:
            offer = self.offers.take(f.job_id, f.generation, f.ins.peer, f.ins.peer_buffer)
            path = "cuda-ipc-offered"
            if offer is None:
                reply = await self._ask_owner(
                    f, lambda: link.pod.ipcHandle(f.job_id, f.generation, f.ins.peer_buffer))
                offer = Offer(bytes(reply.handle), capnp_io.read_tile_header(reply.header), reply.deviceIndex)
                path = "cuda-ipc"
            _check_same_tile(offer.header, array.shape, dtype, f.ins)
            event = self.backend.start_ipc_copy(array, offer.handle, offer.device)
            if event is None:  # not mapped here yet: opening takes milliseconds, not on the loop
                event = await self._open_and_copy(array, offer, f.address)
                log.debug("mapped a peer allocation", job=f.job_id, peer=f.ins.peer,
                          bytes=offer.header.nbytes)
        except TransferError:
            raise
        except Exception as err:
            log.info("CUDA IPC fetch failed; using the host path", reason=remote_reason(err))
            return False
        try:
            if not event.done:
                await self._device_done(event)
        finally:
            closing = self.backend.ipc_copy_done(offer.handle, event)
            if closing:
                self._off_loop(self.backend.close_mappings, closing)
        # the owner hears of it once this fetch is reported (the next turn of the loop): the
        # tile is here, and what waits for it comes first
        asyncio.get_running_loop().call_soon(self._fetched, f, link, offer.header.nbytes, path)
        return True

    async def _open_and_copy(self, array, offer: Offer, address: str):
        """open_ipc_and_copy in the I/O pool. Should this fetch be cancelled meanwhile (its job
        dropped), the copy it starts still ends, and its mapping is unpinned then."""
        opening = asyncio.get_running_loop().run_in_executor(
            self.io_pool, self.backend.open_ipc_and_copy, array, offer.handle, offer.device,
            offer.header.nbytes, address)
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(lambda done: self._unpin_abandoned(offer.handle, done))
            raise

    def _unpin_abandoned(self, handle: bytes, opening: asyncio.Future) -> None:
        if not opening.cancelled() and opening.exception() is None:
            backend, event = self.backend, opening.result()
            self._off_loop(lambda: backend.close_mappings(backend.ipc_copy_done(handle, event)))

    async def _device_done(self, event) -> None:
        """Wait for a device copy: a 16 MiB copy takes microseconds, so it is watched from the
        loop (which runs other work between looks) before a worker thread waits for it."""
        deadline = time.perf_counter() + SPIN_S
        while not event.done:
            if time.perf_counter() > deadline:
                await asyncio.get_running_loop().run_in_executor(self.io_pool, event.synchronize)
                return
            await asyncio.sleep(0)

    # ---- offering our tiles -------------------------------------------------------------------

    def offer(self, job_id: str, generation: int, buffer: int, array, dtype: str, peers: list[str]) -> None:
        """Offer a servable buffer (of storage dtype `dtype`) to the same-host GPU pods at
        `peers`, which will fetch it."""
        handle = self.backend.ipc_handle(array)
        header = TileHeader(shape=tuple(array.shape), dtype=dtype, nbytes=int(array.nbytes), checksum=0)
        for address in peers:
            self.spawn(self._offer(address, job_id, generation, buffer, handle, header, self._ipc_possible))

    def offer_ticket(self, job_id: str, generation: int, buffer: int, header: TileHeader,
                     address: str) -> None:
        """Offer a CPU tile to the pod at `address`: its header with a data-port ticket of its own."""
        self.spawn(self._offer(address, job_id, generation, buffer, b"", header, lambda link: True))

    async def _offer(self, address: str, job_id: str, generation: int, buffer: int, handle: bytes,
                     header: TileHeader, wanted: Callable[[PeerLink], bool]) -> None:
        """One offer, to a peer `wanted` takes; a peer that does not take it asks when it fetches."""
        try:
            link = await self._link(address)
            if not wanted(link):
                return
            request = link.pod.tileReady_request()
            request.jobId, request.generation, request.buffer = job_id, generation, buffer
            request.node = self.node()
            request.handle, request.deviceIndex = handle, self.backend.device_index
            capnp_io.write_tile_header(request.header, header)
            check(await asyncio.wait_for(request.send(), self.patience))
        except Exception as err:
            log.info("offering a tile to a peer failed; it will ask for it", peer=address,
                     reason=remote_reason(err))

    def offered(self, job_id: str, generation: int, node: int, buffer: int, offer: Offer) -> None:
        if self.backend.kind != "gpu" and not offer.header.data_port:
            raise Refused("tileReady: this pod has no GPU")
        self.offers.put(job_id, generation, node, buffer, offer)
        log.debug("tile offered", job=job_id, generation=generation, node=node, buffer=buffer)

    def _fetched(self, f: Fetching, link: PeerLink, nbytes: int, path: str) -> None:
        """A fetch is done: logged, and the owner told its tile arrived (so it may free it once
        every peer has it), without holding the fetch up for the answer: the tile is here and
        checked, and an owner that is gone by now is the heartbeats' business, not this
        fetch's."""
        log.debug("fetched", job=f.job_id, instruction=f.ins.id, bytes=nbytes, path=path)
        self.spawn(self._release(f.job_id, f.generation, f.ins, f.address, nbytes, gave_up=False))

    def give_up(self, job_id: str, generation: int, ins: Fetch, address: str) -> None:
        """This pod will not fetch `ins`'s tile (the fetch failed or was dropped): tell its owner,
        whose Free of the tile would otherwise wait for this node until the job ends."""
        log.debug("telling the owner this pod will not fetch its tile", job=job_id, generation=generation,
                  instruction=ins.id, peer=ins.peer, buffer=ins.peer_buffer)
        self.spawn(self._release(job_id, generation, ins, address, 0, gave_up=True))

    async def _release(self, job_id: str, generation: int, ins: Fetch, address: str, nbytes: int,
                       gave_up: bool) -> None:
        try:
            link = self.links.get(address) or await self._link(address)
            check(await asyncio.wait_for(link.pod.release(
                job_id, generation, ins.peer_buffer, self.node(), nbytes, gave_up), self.patience))
        except Exception as err:
            what = "a give-up" if gave_up else "release"
            log.info(f"{what} to the tile's owner failed", peer=ins.peer, reason=remote_reason(err))


def _check_same_tile(header: TileHeader, shape: tuple[int, ...], dtype: str, ins: Fetch) -> None:
    """The owner's tile must have the local buffer's shape and storage dtype (tiles are never
    converted)."""
    if tuple(header.shape) != shape or (header.dtype or "f32") != dtype:
        raise TransferError(f"node {ins.peer} buffer {ins.peer_buffer} is {header.dtype}"
                            f"{list(header.shape)}, local buffer {ins.buffer} is {dtype}{list(shape)}")


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)
