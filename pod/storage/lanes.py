"""A CPU pod's loads and stores, each kind in a lane of its own that runs them in plan order.

Without lanes every ready load or store goes straight to the pod's I/O pool, and the pieces a plan
lets run side by side (two per node, scheduler/planning/planner.py) share the cores and the disk evenly:
both load at once, both compute, both store at once, and only then may the next two start, so the
disk sits idle while the pair loads and computes. A lane is a few threads of its own that run at
most `width` of its instructions at once and, when more are ready, take the one earliest in the
plan (the lowest key) next. So the first piece loads, computes and starts storing while the second
is still loading, the next piece starts as soon as the first one's store ends, and the stores
reach the disk one after another. A thread that ends one instruction takes the next itself, with
no hand-off through the event loop between them.

What runs and what it reads and writes do not change, only the order in which ready work gets a
thread; a lane runs every instruction handed to it and waits for nothing else, so it cannot hold
up a plan forever.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from concurrent.futures import Future
from dataclasses import dataclass

# Measured on the 2-core VM (docs/performance.md, "The CPU pod's pipeline, session 9"): a
# piece's two inputs are read side by side (one core each), while one store at a time already
# keeps the disk as busy as more do (1.8-1.9 GB/s O_DIRECT with 1, 2 or 3 writers) and lets the
# earliest piece end, and free its memory, first.
LOAD_WIDTH = 2
STORE_WIDTH = 1


class Lane:
    """An executor of `width` threads (started as needed) that runs the lowest key first (ties in
    the order submitted)."""

    def __init__(self, width: int, name: str):
        if width < 1:
            raise ValueError(f"a lane needs a width of at least 1, not {width}")
        self.width, self.name = width, name
        self._cond = threading.Condition()
        self._waiting: list[tuple[object, int, Future, object, tuple]] = []  # heap: key, arrival, ...
        self._arrivals = itertools.count()
        self._threads = 0
        self._idle = 0
        self._closed = False

    @property
    def waiting(self) -> int:
        """Work handed in and not taken by a thread yet."""
        with self._cond:
            return len(self._waiting)

    def submit(self, key, fn, *args) -> Future:
        """Run `fn(*args)` in its turn (`key`: the instruction's place in the plan); its future."""
        fut: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError(f"lane {self.name} is shut down")
            entry = (key, next(self._arrivals), fut, fn, args)
            heapq.heappush(self._waiting, entry)
            if self._idle:
                self._cond.notify()
            # an idle thread woken is counted idle until it runs: more work waiting than idle
            # threads to take it wants one more (else a lone thread woken for two works alone)
            if len(self._waiting) > self._idle and self._threads < self.width:
                self._start_thread(entry)
        return fut

    def _start_thread(self, entry: tuple) -> None:
        """One more thread (the caller holds the lock). One that cannot start (the process at
        its limit of threads) fails the submit, with its work taken back: counted, it would
        leave the lane waiting for a thread that never was, every later instruction with it."""
        self._threads += 1
        try:
            threading.Thread(target=self._work, name=f"{self.name}_{self._threads - 1}", daemon=True).start()
        except BaseException:
            self._threads -= 1
            self._waiting.remove(entry)
            heapq.heapify(self._waiting)
            raise

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._waiting:
                    return
                _, _, fut, fn, args = heapq.heappop(self._waiting)
            if not fut.set_running_or_notify_cancel():
                continue  # its caller stopped waiting before its turn came
            try:
                fut.set_result(fn(*args))
            except BaseException as err:  # the caller's to report, as the pool would
                fut.set_exception(err)

    def shutdown(self) -> None:
        """Run nothing more that has not started (its future is cancelled); the threads end."""
        with self._cond:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._cond.notify_all()
        for _, _, fut, _, _ in waiting:
            fut.cancel()


@dataclass
class IoLanes:
    """A CPU pod's two lanes. A GPU pod has none: its loads and stores go to the I/O pool as they
    come, as before (its copies to and from the device overlap on streams of their own)."""

    loads: Lane
    stores: Lane

    @classmethod
    def for_backend(cls, kind: str) -> IoLanes | None:
        if kind != "cpu":
            return None
        return cls(Lane(LOAD_WIDTH, "pod-load"), Lane(STORE_WIDTH, "pod-store"))

    def shutdown(self) -> None:
        self.loads.shutdown()
        self.stores.shutdown()
