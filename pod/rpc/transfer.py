"""Moving tiles between pods: a ticketed bulk TCP path, and chunked reads over the RPC as fallback.

Why two paths: one pod's asyncio event loop (and pycapnp's transport on top of it) moves a few
hundred MB/s on loopback, while a blocking socket in a thread moves several GB/s. So the RPC only
negotiates (tileHeader hands out a one-time ticket for the owner's data port) and the bytes go
over a plain socket straight into the destination array, in a worker thread. When the data port
cannot be reached, the fetcher falls back to `readChunk` over the RPC (4 MiB chunks, a few in
flight). Either way the fetcher verifies the tile's CRC-32C (`crc32c_of`) and gives up within
bounded time.

The data port accepts a connection, reads a 16-byte ticket, and answers with exactly the tile's
bytes (or closes at once for an unknown or expired ticket). Tickets are random, single-use,
expire after TICKET_TTL_S, and are only handed out over the token-authenticated RPC.
"""

from __future__ import annotations

import collections
import functools
import secrets
import socket
import socketserver
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from common import options
from common.errors import UserError

TICKET_BYTES = 16
PORT_WAIT_S = 60.0  # how long the port waits for a connected fetcher's ticket, and a ticket's life
# PHOBOS_TEST_TICKET_TTL_S (test-only, like PHOBOS_FAULT) shortens a ticket's life, so that a test
# sees an offered ticket expire and the fetcher ask its owner for another
TICKET_TTL_S = options.current().ticket_ttl_s
TICKET_TTL_S = PORT_WAIT_S if TICKET_TTL_S is None else TICKET_TTL_S
CRC_PIECE = 1 << 20


class TransferError(Exception):
    """A tile could not be fetched from a peer; the text names the peer and the reason."""


def crc32c_of(data, value: int = 0) -> int:
    """The CRC-32C (Castagnoli's polynomial, iSCSI's and ext4's CRC) of a bytes-like object,
    continued from `value` (the CRC-32C of the bytes before it). The one checksum of tiles: the
    owner's, the fetcher's and its pieces'.

    Why not zlib's crc32: CRC-32C is the same class of check (a 32-bit CRC) and at tile lengths
    detects at least as much (every odd number of flipped bits, since its polynomial has x + 1
    as a factor, and so every 1 to 3 flipped bits in up to 2^31 - 1 bits, its period), at ~1 ms
    per 16 MiB with SSE4.2's crc32 instruction against zlib's ~4 ms: the fetcher's check was
    what kept a loopback fetch below plain sockets. The `crc32c` package uses the instruction
    (or ARMv8's) when the CPU has it, else a table-driven CRC-32C of its own: the same values,
    at half zlib's speed (8 ms per 16 MiB here). It releases the GIL from 32 KiB on, so pieces
    are checksummed beside the receiving (tests/pod/test_transfer.py checks both)."""
    return _crc32c()(data, value)


@functools.cache
def _crc32c():
    # Imported at the first checksum, not with this module: its package imports importlib.metadata
    # (~40 ms here), which a pod that never moves a tile (one local pod) should not pay at start.
    import crc32c

    return crc32c.crc32c


def require_crc32c() -> None:
    """Refuse to start a pod that could not checksum a tile: without the crc32c package every
    tile it serves or fetches through host memory fails at its first checksum (an owner's
    tileHeader answered an internal error; seen on a GPU machine without the wheel, where a GPU
    pod serving a CPU pod hung that way). Found, not imported (`_crc32c` says why)."""
    import importlib.util

    if importlib.util.find_spec("crc32c") is None:
        raise UserError("the crc32c package is not installed: a pod checks every tile it moves "
                        "with it (CRC-32C); install third_party/requirements.lock")


def checksum(array: np.ndarray) -> int:
    """The CRC-32C of an array's bytes in C order."""
    return crc32c_of(byte_view(np.ascontiguousarray(array)))


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
        sock.settimeout(PORT_WAIT_S)
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
    """Fill `into` (C-contiguous) from a peer's data port; returns the CRC-32C of what arrived.
    Blocking: run it in a worker thread.

    The checksum is computed as the bytes arrive, a piece of CRC_PIECE bytes at a time, by a
    helper thread of this one (`crc32c_of` releases the GIL), so it runs beside the receiving instead of
    between its reads; once the last byte is in, this thread checksums the pieces the helper has
    not started yet, beside it (on a loaded machine the helper falls behind while the bytes
    come). The pieces' CRCs are joined in order (`_Pieces`). `timeout_s` bounds the connection
    and every wait for bytes: a hung peer costs at most that long per stall, never forever."""
    view = byte_view(into)
    n = len(view)
    pieces, ok = _Pieces(view, _crc_helper()), False
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
                pieces.arrived(got)
            ok = True
    except TimeoutError:
        raise TransferError(f"data port {host}:{port} sent nothing for {timeout_s:g} s") from None
    except OSError as err:
        raise TransferError(f"data port {host}:{port}: {err.strerror or err}") from None
    finally:
        crc = pieces.finish(ok)  # no piece's checksum may read the view after we return
    return crc


class _Pieces:
    """The CRC-32C of a buffer filled front to back, checksummed in whole pieces of CRC_PIECE
    bytes by whichever thread is free, and joined in order: crc(A + B) is crc(B) XOR
    shift(crc(A)), with shift a linear map of 32-bit values for len(B) = CRC_PIECE
    (`_piece_shift`). The tail shorter than a piece is checksummed last, on from the rest."""

    def __init__(self, view: memoryview, helper: ThreadPoolExecutor):
        self.view, self.helper = view, helper
        self.queued = 0  # bytes handed out as whole pieces
        self.todo: collections.deque[int] = collections.deque()  # starts of pieces not yet taken
        self.crcs: dict[int, int] = {}  # piece start -> its CRC-32C (from 0)
        self.runs: list = []

    def arrived(self, got: int) -> None:
        while got - self.queued >= CRC_PIECE:
            self.todo.append(self.queued)
            self.queued += CRC_PIECE
            self.runs.append(self.helper.submit(self._one))

    def _one(self) -> None:
        try:
            start = self.todo.popleft()  # atomic: the helper and this thread may both take
        except IndexError:
            return
        self.crcs[start] = crc32c_of(self.view[start:start + CRC_PIECE])

    def finish(self, complete: bool) -> int:
        """The CRC-32C of the whole buffer (0 for a transfer that broke off: nothing to check)."""
        if not complete:
            self.todo.clear()
        while self.todo:
            self._one()
        for run in self.runs:
            run.result()
        if not complete:
            return 0
        shift, crc = _piece_shift(), 0
        for start in range(0, self.queued, CRC_PIECE):
            piece = self.crcs[start]
            crc = piece if start == 0 else piece ^ shift(crc)
        return crc32c_of(self.view[self.queued:], crc)


_helpers = threading.local()


def _crc_helper() -> ThreadPoolExecutor:
    """This thread's own one-thread checksum helper (kept for its later transfers)."""
    helper = getattr(_helpers, "pool", None)
    if helper is None:
        helper = _helpers.pool = ThreadPoolExecutor(1, thread_name_prefix="pod-crc")
    return helper


@functools.cache
def _piece_shift():
    """x -> the CRC after CRC_PIECE more bytes from x, less what the bytes add: a linear map over
    GF(2), tabulated per byte of x from its values on the 32 single bits. Why it holds for any
    CRC with a fixed initial and final XOR (CRC-32C's, as crc32's, are 0xFFFFFFFF): the register
    after more bytes is affine in the register before, so crc(B, from x) = L(x) XOR crc(B, from
    0), and L(x) = crc(zeros, from x) XOR crc(zeros, from 0) for zeros as long as B. Made at the
    first fetch's end (~2 ms with the instruction)."""
    zeros = bytes(CRC_PIECE)
    base = crc32c_of(zeros, 0)
    bit = [crc32c_of(zeros, 1 << i) ^ base for i in range(32)]
    tables = []
    for byte in range(4):
        table = [0] * 256
        for value in range(1, 256):
            low = value & -value  # the lowest set bit
            table[value] = table[value ^ low] ^ bit[8 * byte + low.bit_length() - 1]
        tables.append(table)
    t0, t1, t2, t3 = tables

    def shift(x: int) -> int:
        return t0[x & 255] ^ t1[x >> 8 & 255] ^ t2[x >> 16 & 255] ^ t3[x >> 24]

    return shift


def check_crc(actual: int, expected: int, peer: str) -> None:
    if actual != expected:
        raise TransferError(
            f"tile from {peer} failed its checksum (CRC-32C {actual:#010x}, expected {expected:#010x})")


def verify(into: np.ndarray, expected: int, peer: str) -> None:
    check_crc(checksum(into), expected, peer)


def chunk_ranges(nbytes: int, chunk: int) -> list[tuple[int, int]]:
    return [(offset, min(chunk, nbytes - offset)) for offset in range(0, nbytes, chunk)]
