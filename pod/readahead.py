"""Reading a plan's inputs ahead of its loads.

A load of a tile of a wider matrix copies rows out of a memory map; from a cold file each page
fault reads a little, so the disk sees small reads from four storage threads at once and runs
well below its sequential speed (the cold 8192^3 matmul read its inputs at about 1.1 GB/s on the
H200 host, against 1.7 GB/s for one plain sequential read). So a plan's loads are announced to the
kernel ahead of time, in plan order: `posix_fadvise(WILLNEED)` over each load's byte span queues
large reads together, and a load then finds its rows in the page cache, or on the way.

At most `budget` bytes (and `most` loads) are advised beyond the loads already started (a job
larger than memory must not push its own next inputs out of the cache); as each load starts,
further ones are advised. A span is advised only when the region is a fair share of it
(MIN_USEFUL: a narrow column strip of a wide matrix would read mostly bytes nobody asked for).

Pure bookkeeping; the pod (pod/runtime.py) says where each load's bytes are (`span_of`, asked
only as the window reaches that load) and makes the system calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

READ_AHEAD_BYTES = 1 << 30
MAX_LOADS_AHEAD = 64  # and at most this many loads (each span is worked out on the event loop)
MIN_USEFUL = 0.25


@dataclass(frozen=True)
class Span:
    path: Path
    offset: int
    nbytes: int  # from the region's first byte to its last, gaps included
    useful: int  # the region's own bytes

    @property
    def worth_advising(self) -> bool:
        return self.nbytes > 0 and self.useful >= MIN_USEFUL * self.nbytes


class ReadAhead:
    """One plan's loads (their ids, in plan order): which spans to advise as the loads start."""

    def __init__(self, loads: list[int], span_of: Callable[[int], Span | None],
                 budget: int = READ_AHEAD_BYTES, most: int = MAX_LOADS_AHEAD):
        self.span_of, self.budget, self.most = span_of, budget, most
        self.queue = deque(loads)
        self.waiting = set(loads)  # not advised and not started
        self.ahead: dict[int, int] = {}  # advised loads not started yet -> their span's bytes
        self.ahead_bytes = 0

    def load_started(self, load: int) -> list[Span]:
        """`load` starts now: the spans to advise from here (its own first, when not advised)."""
        self.ahead_bytes -= self.ahead.pop(load, 0)
        advise = []
        if load in self.waiting:
            self.waiting.discard(load)
            advise += self._worth(load)
        while self.queue and self.ahead_bytes < self.budget and len(self.ahead) < self.most:
            ahead = self.queue.popleft()
            if ahead not in self.waiting:
                continue  # started already (and advised then)
            self.waiting.discard(ahead)
            for span in self._worth(ahead):
                self.ahead[ahead] = span.nbytes
                self.ahead_bytes += span.nbytes
                advise.append(span)
        return advise

    def _worth(self, load: int) -> list[Span]:
        span = self.span_of(load)
        return [span] if span is not None and span.worth_advising else []
