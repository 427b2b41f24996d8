"""The pod's front door: what a stranger who can connect may take before logging in, bounded.

- **Connections not logged in are capped** (`--max-pending-logins`, 64): one more is closed as
  soon as it is accepted, before Cap'n Proto reads a byte of it.
- **A login deadline** (`--login-timeout`, 10 s): a connection that has not logged in by then is
  closed, whatever it sends.
- **One attempt per connection, answered slowly**: a refused login is answered after
  REFUSAL_DELAY_S and the connection is closed soon after, so guessing costs a connection and a
  second per try, and at most max-pending-logins tries are in flight at once.
- **A refusal is data, not an exception**: `login` returns a `LoginRefusal` (schemas/rpc.capnp).
  pycapnp sends a failing server method's whole Python traceback to the caller, paths and all.
- **Logging is aggregated**: the first event of each kind (refused login, connection turned
  away at the cap, login deadline passed, connection broken by a malformed message) in a window
  of LOG_WINDOW_S is logged as it happens; the rest are counted and logged as one summary line
  at the end of the window. A flood costs a few log lines, not one per connection.

`Doorkeeper` is the bookkeeping alone (no sockets, tested directly), `FrontDoor` adds the timers
and the log lines; the RPC face is pod/rpc/server.py's GateImpl. No Cap'n Proto here: the command
line reads the defaults before loading it.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import Counter
from dataclasses import dataclass, field

from common.log import get_logger

log = get_logger()

LOGIN_TIMEOUT_S = 10.0
MAX_PENDING_LOGINS = 64
REFUSAL_DELAY_S = 1.0
CLOSE_AFTER_REFUSAL_S = 1.0  # time for the refusal to reach the caller before the connection closes
LOG_WINDOW_S = 10.0

# What a stranger's connection can end in, as the log names it.
REFUSED = "login refused"
TURNED_AWAY = "connection turned away: too many connections not logged in"
OVERDUE = "connection closed: no login within the deadline"
BROKEN = "connection closed: malformed message"


@dataclass
class Doorkeeper:
    """Counts connections not logged in and decides what the log says about strangers."""

    max_pending: int = MAX_PENDING_LOGINS
    window_s: float = LOG_WINDOW_S
    pending: int = 0
    window_start: float = 0.0
    counts: Counter = field(default_factory=Counter)  # kind -> events this window
    peers: set = field(default_factory=set)  # addresses seen this window

    def admit(self) -> bool:
        """A new connection: True to serve it (it counts as pending until it logs in or closes)."""
        if self.pending >= self.max_pending:
            return False
        self.pending += 1
        return True

    def settled(self) -> None:
        """A pending connection logged in, or closed without logging in."""
        self.pending = max(0, self.pending - 1)

    def note(self, kind: str, peer: str, now: float) -> bool:
        """Count one event; True when it is the first of its kind this window (log it in full)."""
        if not self.counts:
            self.window_start = now
        self.counts[kind] += 1
        self.peers.add(peer)
        return self.counts[kind] == 1

    def summary(self, now: float) -> dict | None:
        """At the end of a window with events beyond the first of each kind, their tally."""
        if not self.counts or now - self.window_start < self.window_s:
            return None
        counts, peers = self.counts, self.peers
        self.counts, self.peers = Counter(), set()
        if all(n == 1 for n in counts.values()):
            return None  # each was logged in full already
        return {"window_s": self.window_s, "addresses": len(peers),
                **{_key(kind): n for kind, n in sorted(counts.items())}}


def _key(kind: str) -> str:
    return {REFUSED: "refused_logins", TURNED_AWAY: "turned_away", OVERDUE: "login_deadline_passed",
            BROKEN: "malformed"}[kind]


class Stranger:
    """One accepted connection, until it logs in (then it is the scheduler's or a peer's)."""

    def __init__(self, peer: str, stream):
        self.peer, self.stream = peer, stream
        self.logged_in = False
        self.attempted = False
        self.deadline: asyncio.TimerHandle | None = None

    def close(self) -> None:
        try:
            self.stream.close()
        except Exception:  # closed already
            pass


class FrontDoor:
    """The pod's door: the Doorkeeper plus the timers and log lines around it."""

    def __init__(self, token: str, login_timeout: float = LOGIN_TIMEOUT_S,
                 max_pending: int = MAX_PENDING_LOGINS, refusal_delay: float = REFUSAL_DELAY_S):
        self.token = token.encode()
        self.login_timeout = login_timeout
        self.refusal_delay = refusal_delay
        self.keeper = Doorkeeper(max_pending=max_pending)

    def arrive(self, peer: str, stream) -> Stranger | None:
        """A new connection: its Stranger, or None once it has been turned away (closed)."""
        if not self.keeper.admit():
            self.event(TURNED_AWAY, peer)
            try:
                stream.close()
            except Exception:  # closed already
                pass
            return None
        stranger = Stranger(peer, stream)
        stranger.deadline = asyncio.get_running_loop().call_later(self.login_timeout, self._overdue, stranger)
        return stranger

    def leave(self, stranger: Stranger, broken: str = "") -> None:
        """The connection ended (`broken`: the reason when a malformed message ended it)."""
        if stranger.deadline is not None:
            stranger.deadline.cancel()
            stranger.deadline = None
        if not stranger.logged_in:
            self.keeper.settled()
        if broken:
            self.event(BROKEN, stranger.peer, reason=broken)

    def _overdue(self, stranger: Stranger) -> None:
        stranger.deadline = None
        if not stranger.logged_in:
            self.event(OVERDUE, stranger.peer)
            stranger.close()

    async def check(self, stranger: Stranger, token: str) -> str:
        """The refusal for this login ("none": logged in); refusals come late and close the door."""
        if stranger.logged_in:
            return "none"
        if not stranger.attempted and token and hmac.compare_digest(token.encode(), self.token):
            stranger.logged_in = True
            stranger.deadline.cancel()
            self.keeper.settled()
            return "none"
        refusal = "missingToken" if not token else "wrongToken"
        first = not stranger.attempted
        stranger.attempted = True
        if first:
            self.event(REFUSED, stranger.peer, reason=refusal)
            await asyncio.sleep(self.refusal_delay)
            asyncio.get_running_loop().call_later(CLOSE_AFTER_REFUSAL_S, stranger.close)
        return refusal

    def event(self, kind: str, peer: str, **details) -> None:
        if self.keeper.note(kind, peer, time.monotonic()):
            log.warning(kind, peer=peer, **details)

    def flush_log(self) -> None:
        """Log the tally of the window just ended, if it held more than one event of a kind."""
        summary = self.keeper.summary(time.monotonic())
        if summary is not None:
            log.warning("strangers in the last window", **summary)
