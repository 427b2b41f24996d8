"""Moving tiles between pods: a ticketed bulk TCP path, and chunked reads over the RPC as fallback.

Why two paths: one pod's asyncio event loop (and pycapnp's transport on top of it) moves a few
hundred MB/s on loopback, while a blocking socket in a thread moves several GB/s. So the RPC only
negotiates (tileHeader hands out a one-time ticket for the owner's data port) and the bytes go
over a plain socket straight into the destination array, in a worker thread. When the data port
cannot be reached, the fetcher falls back to `readChunk` over the RPC (4 MiB chunks, a few in
flight). Either way the fetcher verifies the tile's crc32 and gives up within bounded time.

The data port accepts a connection, reads a 16-byte ticket, and answers with exactly the tile's
bytes (or closes at once for an unknown or expired ticket). Tickets are random, single-use,
expire after TICKET_TTL_S, and are only handed out over the token-authenticated RPC.
"""

from __future__ import annotations

import secrets
import socket
import socketserver
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

TICKET_BYTES = 16
TICKET_TTL_S = 60.0
CRC_PIECE = 1 << 20


class TransferError(Exception):
    """A tile could not be fetched from a peer; the text names the peer and the reason."""


def checksum(array: np.ndarray) -> int:
    return zlib.crc32(byte_view(np.ascontiguousarray(array)))


def byte_view(array: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array, writable where it is (no copy). Through a uint8 view,
    since a buffer of ml_dtypes.bfloat16 cannot be exported to a memoryview directly."""
    return memoryview(array.reshape(-1).view(np.uint8))


@dataclass
class _Offer:
    data: memoryview
    expires: float


class DataPort:
    """The owner's side: a threaded TCP server handing out tiles by ticket."""

    def __init__(self, host: str):
        self._offers: dict[bytes, _Offer] = {}
        self._lock = threading.Lock()
        port = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                port._serve(self.request)

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server((host, 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="pod-data-port", daemon=True)
        self._thread.start()

    def offer(self, data: np.ndarray) -> bytes:
        """A ticket for one transfer of `data` (kept alive by the offer until used or expired)."""
        ticket = secrets.token_bytes(TICKET_BYTES)
        now = time.monotonic()
        with self._lock:
            for key in [k for k, o in self._offers.items() if o.expires < now]:
                del self._offers[key]
            view = byte_view(np.ascontiguousarray(data))
            self._offers[ticket] = _Offer(view, now + TICKET_TTL_S)
        return ticket

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(TICKET_TTL_S)
        try:
            ticket = _recv_exactly(sock, TICKET_BYTES)
            with self._lock:
                offer = self._offers.pop(ticket, None)
            if offer is None or offer.expires < time.monotonic():
                return
            sock.sendall(offer.data)
        except OSError:
            return  # the fetcher went away; it reports the failure on its side

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            self._offers.clear()


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError("connection closed early")
        got += k
    return bytes(out)


def fetch_by_ticket(host: str, port: int, ticket: bytes, into: np.ndarray, timeout_s: float) -> int:
    """Fill `into` (C-contiguous) from a peer's data port; returns the crc32 of what arrived.
    Blocking: run it in a worker thread.

    The checksum is computed as the bytes arrive (in pieces of at least CRC_PIECE) by a helper
    thread of this one (zlib releases the GIL), so it runs beside the receiving instead of between
    its reads: on loopback a 16 MiB tile's crc32 takes about as long as its bytes. `timeout_s`
    bounds the connection and every wait for bytes: a hung peer costs at most that long per
    stall, never forever."""
    view = byte_view(into)
    n = len(view)
    crc = [0]
    checked, last = 0, None

    def add(lo: int, hi: int) -> None:  # pieces run in order: the helper has one thread
        crc[0] = zlib.crc32(view[lo:hi], crc[0])

    helper = _crc_helper()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(ticket)
            got = 0
            while got < n:
                k = sock.recv_into(view[got:])
                if k == 0:
                    raise TransferError(f"data port {host}:{port} closed after {got} of {n} bytes")
                got += k
                if got - checked >= CRC_PIECE or got == n:
                    last = helper.submit(add, checked, got)
                    checked = got
    except TimeoutError:
        raise TransferError(f"data port {host}:{port} sent nothing for {timeout_s:g} s") from None
    except OSError as err:
        raise TransferError(f"data port {host}:{port}: {err.strerror or err}") from None
    finally:
        if last is not None:
            last.result()  # the view must outlive every piece's checksum
    return crc[0]


_helpers = threading.local()


def _crc_helper() -> ThreadPoolExecutor:
    """This thread's own one-thread checksum helper (kept for its later transfers)."""
    helper = getattr(_helpers, "pool", None)
    if helper is None:
        helper = _helpers.pool = ThreadPoolExecutor(1, thread_name_prefix="pod-crc")
    return helper


def check_crc(actual: int, expected: int, peer: str) -> None:
    if actual != expected:
        raise TransferError(
            f"tile from {peer} failed its checksum (crc32 {actual:#010x}, expected {expected:#010x})")


def verify(into: np.ndarray, expected: int, peer: str) -> None:
    check_crc(checksum(into), expected, peer)


def chunk_ranges(nbytes: int, chunk: int) -> list[tuple[int, int]]:
    return [(offset, min(chunk, nbytes - offset)) for offset in range(0, nbytes, chunk)]
