"""Our mappings of same-host peers' allocations (CUDA IPC), kept across jobs, and when one closes.

Opening a peer allocation's handle costs milliseconds, a 16 MiB copy out of it about a tenth of
one. An owner keeps its allocations in a pool by size (pod/backends/backend_gpu.py), so a buffer of the
next job reuses an allocation of the last one with the same handle: a mapping is worth keeping
from job to job, and is opened once per owner allocation, not once per job.

What keeps that safe:
- **In use.** A mapping is pinned by each copy out of it from the moment the copy is issued until
  its fetch has seen it complete (or was cancelled), and a pinned mapping never closes: a pod runs
  several jobs at once, and one job's end must not unmap memory another job is copying from.
  Pinning per copy rather than per job also means a job that ends while it was still opening a
  mapping leaves nothing behind that keeps the mapping busy. A closing mapping's newest copy is
  waited for before the unmap all the same (the caller synchronizes `last_copy`: a copy whose
  fetch was cancelled may still run on the device).
- **Stale data.** A handle names one allocation: a new allocation gets a new handle even at the
  same address, so a mapping is only ever looked up by a handle its owner offers for a live,
  complete tile, and a mapping of an allocation the owner has freed is never copied from again.
- **Idle.** Once no copy pins it, a mapping is idle: kept for the next job, least recently
  used first out. What an idle mapping costs: nothing while its owner pools the allocation (the
  usual case: the owner frees pooled allocations only when an allocation fails for lack of
  memory, and lent ones only when freeing the others was not enough), but the allocation's
  memory itself when the owner has freed it (CUDA calls that undefined; in practice the
  importer's mapping keeps the memory). So idle mappings are bounded:
  at most IDLE_BYTES and IDLE_COUNT of them stay open; past either, the least recently used
  closes. IDLE_BYTES is 2 GiB, about 1.5% of an H200's memory: the most a freed owner allocation
  can stay held by this pod, and 8 times what the pod benchmark's 16 tiles in flight map.
  IDLE_COUNT caps the driver's mapping records for many small tiles.
- **Owner gone.** When a peer is lost, its idle mappings close (`drop_owner`); a pinned one
  closes when its last copy is done (`unpin`), as its owner's memory is gone anyway.
- **Shutdown.** The rest go with the pod's process (the driver unmaps them at its exit).

Pure bookkeeping, no CUDA: the GPU backend holds one under its lock and does the opening,
copying and closing (off the event loop); tests/pod/test_ipc_mappings.py runs every rule without a
GPU.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

IDLE_BYTES = 2 << 30
IDLE_COUNT = 256


@dataclass
class Mapping:
    pointer: int
    nbytes: int
    owner: str  # the owner pod's address
    copies: int = 0  # copies out of it issued and not yet seen done: it is pinned while any run
    # the event of the newest copy out of it, or a later event of the same stream (the backend
    # reuses its events: synchronizing one still waits for this copy, as the stream runs in order)
    last_copy: object | None = None
    owner_lost: bool = False  # close once idle, not kept


class IpcMappings:
    def __init__(self, idle_bytes: int = IDLE_BYTES, idle_count: int = IDLE_COUNT) -> None:
        self.idle_bytes, self.idle_count = idle_bytes, idle_count
        self._open: dict[bytes, Mapping] = {}
        self._idle: OrderedDict[bytes, None] = OrderedDict()  # least recently used first
        self._idle_total = 0

    def pin(self, handle: bytes, copy: object) -> int | None:
        """Our pointer for `handle`, pinned for the copy whose event is `copy` (recorded by the
        caller right after); None when not open here yet (nothing pinned)."""
        mapping = self._open.get(handle)
        if mapping is None:
            return None
        if mapping.copies == 0:
            self._busy(handle, mapping)
        mapping.copies += 1
        mapping.last_copy = copy
        return mapping.pointer

    def unpin(self, handle: bytes) -> list[Mapping]:
        """A copy out of `handle` is done (or its fetch gave up on it). Returns the mappings to
        close now (removed here; the caller waits for their last copies, then unmaps): this one
        if its owner is lost, and idle ones past the bounds, least recently used first."""
        mapping = self._open.get(handle)
        if mapping is None:
            return []
        mapping.copies -= 1
        if mapping.copies > 0:
            return []
        if mapping.owner_lost:
            return [self._remove(handle)]
        self._idle[handle] = None
        self._idle_total += mapping.nbytes
        return self._trim()

    def opened(self, handle: bytes, pointer: int, nbytes: int, owner: str,
               copy: object) -> tuple[int, int | None]:
        """Record a mapping just opened, pinned for the copy whose event is `copy`: (the pointer
        to copy from, a pointer to close at once or None). If another thread opened the same
        handle meanwhile, that one is kept and pinned, and `pointer` is the one to close."""
        if handle in self._open:
            return self.pin(handle, copy), pointer
        self._open[handle] = Mapping(pointer, nbytes, owner, copies=1, last_copy=copy)
        return pointer, None

    def drop_owner(self, owner: str) -> list[Mapping]:
        """The peer at `owner` is lost: its idle mappings, to close now; pinned ones close when
        their last copy is done."""
        for mapping in self._open.values():
            mapping.owner_lost |= mapping.owner == owner
        return [self._remove(h) for h in [h for h in self._idle if self._open[h].owner_lost]]

    def idle(self) -> list[bytes]:
        """The idle mappings' handles, least recently used first."""
        return list(self._idle)

    def __len__(self) -> int:
        return len(self._open)

    def _busy(self, handle: bytes, mapping: Mapping) -> None:
        if handle in self._idle:
            del self._idle[handle]
            self._idle_total -= mapping.nbytes

    def _trim(self) -> list[Mapping]:
        closing = []
        while self._idle and (self._idle_total > self.idle_bytes or len(self._idle) > self.idle_count):
            closing.append(self._remove(next(iter(self._idle))))
        return closing

    def _remove(self, handle: bytes) -> Mapping:
        mapping = self._open.pop(handle)
        self._busy(handle, mapping)
        return mapping
