"""Errors that cross the RPC: one typed refusal, one classifier, one reader of transport text.

A refusal crosses as data: `Refused(message, kind)` on the callee becomes the call's `failure`
result (a FailureKind and the message, schemas/rpc.capnp) and `Refused` again on the caller
(schemas/capnp_io.py check). Callers decide by `kind` (`classify` also sorts the transport's own
failures: a timeout, a dropped connection), never by reading the text. The text is only shown:
`remote_reason` turns any error into the one line a log or a user sees.
No pycapnp import, so any module may use it.
"""

from __future__ import annotations

import enum


class FailureKind(enum.Enum):
    """Why a call failed. The first seven are schemas/rpc.capnp's FailureKind (the values are
    its enumerant names); the last three are the caller's own view of a call that got no answer."""

    NONE = "none"
    REFUSED = "refused"
    BAD_PLAN = "badPlan"
    STALE_GENERATION = "staleGeneration"
    NOT_READY = "notReady"
    DECLARED_DEAD = "declaredDead"
    INTERNAL = "internal"
    TIMEOUT = "timeout"  # no answer in time
    DISCONNECTED = "disconnected"  # the connection dropped
    TRANSPORT = "transport"  # any other failure of the call itself (a malformed message)


WIRE_KINDS = frozenset(k for k in FailureKind if k not in (
    FailureKind.TIMEOUT, FailureKind.DISCONNECTED, FailureKind.TRANSPORT))


class Refused(Exception):
    """A request turned down, with why (`kind`) and a one-line message; crosses the RPC as data."""

    def __init__(self, message: str, kind: FailureKind = FailureKind.REFUSED):
        super().__init__(message)
        self.kind = kind


def check(reply):
    """`reply` (an RPC call's results) if the call was not refused; else its `failure` raised as
    `Refused` with the callee's kind and message."""
    failure = reply.failure
    kind = FailureKind(str(failure.kind))
    if kind is not FailureKind.NONE:
        raise Refused(failure.message, kind)
    return reply


def classify(err: BaseException) -> FailureKind:
    """The kind of a failed call: a refusal's own kind, or what happened to the call."""
    if isinstance(err, Refused):
        return err.kind
    if isinstance(err, TimeoutError):
        return FailureKind.TIMEOUT
    if _kj_type(err) == "DISCONNECTED" or isinstance(err, ConnectionError | EOFError):
        return FailureKind.DISCONNECTED
    return FailureKind.TRANSPORT


def _kj_type(err: BaseException) -> str:
    """Cap'n Proto's own kind of a KJ exception (FAILED, DISCONNECTED, OVERLOADED, ...), else ""."""
    return str(getattr(err, "type", "") or "").upper().rpartition(".")[2]


def remote_reason(err: BaseException) -> str:
    """The one-line reason out of an error, local or from an RPC call (the scheduler and the pods
    both read errors through this one function).

    Cap'n Proto appends "stack: ..." lines (addresses) to its errors, and pycapnp hands a remote
    Python exception over as text holding the remote traceback: its last unindented line
    ("PermissionError: login refused: wrong token") is the reason, less a plain exception name.
    A connection KJ reports dropped reads "disconnected: ..." whatever its description says."""
    text = str(getattr(err, "description", None) or str(err).strip() or type(err).__name__)
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("stack:")]
    if not lines:
        return type(err).__name__
    line = lines[0].strip()
    if "Traceback (most recent call last)" in text:
        line = [ln for ln in lines if not ln.startswith(" ")][-1]
        kind, sep, rest = line.partition(": ")
        if sep and kind.isidentifier():
            line = rest
    line = line.strip().removeprefix("message = ")
    # KJ's own kind of failure is not in the description; a dropped connection must say so
    # (callers tell a disconnect from a refusal by it)
    if _kj_type(err) == "DISCONNECTED" and "disconnect" not in line.lower():
        line = f"disconnected: {line}"
    return line[:300]
