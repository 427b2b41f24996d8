"""Errors that cross the RPC: the one place their text is read.

pycapnp gives a failed call as an exception whose text holds the remote side's traceback (or the
transport's own message with "stack: ..." address lines); both programs read a reason out of it
here, never each with its own parser. No pycapnp import, so any module may use it.
"""

from __future__ import annotations


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
    if str(getattr(err, "type", "")).upper().endswith("DISCONNECTED") and "disconnect" not in line.lower():
        line = f"disconnected: {line}"
    return line[:300]
