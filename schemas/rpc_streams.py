"""Opening and serving Cap'n Proto RPC streams, and running an event loop for them (uvloop).

Every RPC connection of the runtime (scheduler to pod, pod to peer, a pod accepting one) goes
through `connect` or `serve` here instead of pycapnp's own `AsyncIoStream.create_connection` /
`create_server`, because of a crash between pycapnp 2.2.4 and uvloop 0.23:

pycapnp's stream protocol (an asyncio BufferedProtocol) wants no bytes before Cap'n Proto asks
for some. It pauses reading in `connection_made`, which neither asyncio nor uvloop honours
(cpython#103607), so it pauses again from inside `get_buffer()` when bytes arrive early. Under
uvloop, `get_buffer()` runs inside libuv's allocation callback, and pausing there stops the
libuv stream: its read callback becomes NULL, and libuv calls it right after the allocation
returns (`uv__read`, src/unix/stream.c): a jump to address 0, exit 139. Bytes arrive early
whenever the peer speaks first, which every RPC client does (the pod side: an incoming
connection) and every non-Cap'n Proto server does (a banner, garbage, or an EOF from a peer that
closes or resets at once: the scheduler side). docs/runtime.md gives the 30-line reproduction
with no Cap'n Proto in it (a BufferedProtocol that pauses in get_buffer under uvloop).

The workaround sits at the seam where the bug is: pycapnp's protocol gets a transport whose
`pause_reading()`, when called inside `get_buffer()`, is only noted, and done once libuv has
delivered the bytes (`buffer_updated`, where stopping a stream is allowed) unless Cap'n Proto has
asked to read again meanwhile. The protocol's behaviour is otherwise pycapnp's own.
"""

from __future__ import annotations

import asyncio
import functools

import capnp
from capnp.lib.capnp import _PyAsyncIoStreamProtocol

from common.log import get_logger
from schemas.remote_errors import FailureKind, Refused, remote_reason

log = get_logger()


class _DeferredPauseTransport:
    """The real transport, except that a pause asked for inside get_buffer() waits."""

    def __init__(self, transport):
        self._transport = transport
        self.in_get_buffer = False
        self.pause_pending = False
        # The hot paths, bound once (every chunk written goes through write).
        self.write = transport.write
        self.is_closing = transport.is_closing

    def pause_reading(self) -> None:
        if self.in_get_buffer:
            self.pause_pending = True
        else:
            self.pause_pending = False
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        self.pause_pending = False
        self._transport.resume_reading()

    def apply_pending_pause(self) -> None:
        if self.pause_pending:
            self.pause_pending = False
            if not self._transport.is_closing():
                self._transport.pause_reading()

    def __getattr__(self, name):
        return getattr(self._transport, name)


class _Protocol(_PyAsyncIoStreamProtocol):
    def __init__(self, on_connected=None, stream=None):
        super().__init__(self._connected if on_connected is not None else None, stream)
        self.on_connected = on_connected
        self.peer = "?"

    def connection_made(self, transport):
        self.peer = _address(transport.get_extra_info("peername"))
        super().connection_made(_DeferredPauseTransport(transport))

    def _connected(self, stream):
        on_connected, self.on_connected = self.on_connected, None
        return on_connected(stream, self.peer)

    def get_buffer(self, size_hint):
        transport = self.transport
        if transport is None:  # lost already: take the bytes, they go nowhere
            return bytearray(max(size_hint, 1))
        transport.in_get_buffer = True
        try:
            return super().get_buffer(size_hint)
        finally:
            transport.in_get_buffer = False

    def buffer_updated(self, size):
        transport = self.transport
        super().buffer_updated(size)
        if transport is not None:
            transport.apply_pending_pause()


async def connect(host: str, port: int) -> capnp.AsyncIoStream:
    """A TCP stream to HOST:PORT for a TwoPartyClient (pycapnp's create_connection, made safe)."""
    stream = capnp.AsyncIoStream()
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(_Protocol, host, port)
    stream._post_init(protocol)
    return stream


async def serve(callback, host: str, port: int) -> asyncio.AbstractServer:
    """Listen on HOST:PORT; `callback(stream, peer)` (a coroutine function; `peer` is the
    caller's "host:port") runs for each connection."""

    def accepted():
        stream = capnp.AsyncIoStream()
        protocol = _Protocol(callback, stream)
        stream._post_init(protocol)
        return protocol

    return await asyncio.get_running_loop().create_server(accepted, host, port, backlog=1024)


class LoginRefused(Exception):
    """A pod refused our token (the text says why: "login refused: wrong token")."""


REFUSAL_TEXT = {"missingToken": "missing token", "wrongToken": "wrong token"}


async def login(client, token: str, timeout: float):
    """The Pod capability behind a connection's Gate, or LoginRefused naming the refusal."""
    from schemas import capnp_io

    gate = client.bootstrap().cast_as(capnp_io.rpc().Gate)
    reply = await asyncio.wait_for(gate.login(token), timeout)
    refusal = str(reply.refusal)
    if refusal != "none":
        raise LoginRefused(f"login refused: {REFUSAL_TEXT.get(refusal, refusal)}")
    return reply.pod


def results_of_live_call(context):
    """The results of the call this RPC method serves, for a method that awaited something first.

    When the caller goes away (a peer killed mid-fetch), pycapnp frees the call and cancels the
    method's task; touching the results after that is a use-after-free (a SIGSEGV: one healthy pod
    lost in about 1,700 soak runs). The cancellation normally surfaces at the await, but anything
    that swallows it (wait_for on Python 3.11 does when the awaited thing finishes at the same
    moment) lets the method go on, so look before writing: a pending cancel ends the method."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError("the caller of this RPC is gone")
    return context.results


def refuse(context, err: Refused) -> None:
    """Answer the call `context` serves with `err` as its `failure` result (not an exception: an
    exception would cross as text, and pycapnp would put the callee's traceback in it)."""
    failure = results_of_live_call(context).failure
    failure.kind = err.kind.value
    failure.message = str(err)[:300]


def answers_refusals(method):
    """Wrap an RPC method so that a `Refused` it raises is answered as the call's failure, and
    any other error as an `internal` one (never a traceback on the wire). An internal error is
    also logged here, where it happened: the caller may be another pod, whose log is elsewhere
    and which may only note that its fetch failed."""
    @functools.wraps(method)
    async def wrapped(self, *args, _context, **kwargs):
        try:
            return await method(self, *args, _context=_context, **kwargs)
        except Refused as err:
            refuse(_context, err)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug or a broken device: the caller learns it as a failure
            reason = remote_reason(err)
            log.warning("answered a call with an internal error", method=method.__name__,
                                 error=type(err).__name__, reason=reason)
            refuse(_context, Refused(reason, FailureKind.INTERNAL))

    return wrapped


def _address(peername) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return str(peername)


def run(coro):
    """Run `coro` to the end inside pycapnp's KJ loop, on uvloop where it is installed."""
    try:
        import uvloop
    except ImportError:
        uvloop = None
    wrapped = capnp.run(coro)
    return uvloop.run(wrapped) if uvloop is not None else asyncio.run(wrapped)
