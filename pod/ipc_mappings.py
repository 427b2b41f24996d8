"""Our mappings of same-host peers' allocations (CUDA IPC), kept across jobs, and when one closes.

Opening a peer allocation's handle costs milliseconds, a 16 MiB copy out of it about a tenth of
one. An owner keeps its allocations in a pool by size (pod/backend_gpu.py), so a buffer of the
next job reuses an allocation of the last one with the same handle: a mapping is worth keeping
from job to job, and is opened once per owner allocation, not once per job.

What keeps that safe:
- **In use.** A mapping counts the running jobs that fetched through it, and its newest copy. It
  never closes while a job that used it runs (a pod runs several jobs at once: one job's end must
  not unmap memory another is copying from), and a closing mapping's newest copy is waited for
  before the unmap (the caller synchronizes `last_copy`: a cancelled fetch's copy may still run).
- **Stale data.** A handle names one allocation: a new allocation gets a new handle even at the
  same address, so a mapping is only ever looked up by a handle its owner offers for a live,
  complete tile, and a mapping of an allocation the owner has freed is never copied from again.
- **Idle.** Once no running job uses it, a mapping is idle: kept for the next job, least recently
  used first out. What an idle mapping costs: nothing while its owner pools the allocation (the
  usual case: the owner frees pooled allocations only when an allocation fails for lack of
  memory, and lent ones only when freeing the others was not enough), but the allocation's
  memory itself when the owner has freed it (CUDA calls that undefined; in practice the
  importer's mapping keeps the memory). So idle mappings are bounded:
  at most IDLE_BYTES and IDLE_COUNT of them stay open; past either, the least recently used
  closes. IDLE_BYTES is 2 GiB, about 1.5% of an H200's memory: the most a freed owner allocation
  can stay held by this pod, and 8 times what the pod benchmark's 16 tiles in flight map.
  IDLE_COUNT caps the driver's mapping records for many small tiles.
- **Owner gone.** When a peer is lost, its idle mappings close (`drop_owner`); one still in use
  closes when its last job is forgotten (`forget`), as its owner's memory is gone anyway.
- **Shutdown.** The rest go with the pod's process (the driver unmaps them at its exit).

Pure bookkeeping, no CUDA: the GPU backend holds one under its lock and does the opening,
copying and closing; tests/pod/test_ipc_mappings.py runs every rule without a GPU.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

IDLE_BYTES = 2 << 30
IDLE_COUNT = 256


@dataclass
class Mapping:
    pointer: int
    nbytes: int
    owner: str  # the owner pod's address
    jobs: set[str] = field(default_factory=set)  # running jobs that fetched through it
    last_copy: object | None = None  # the event of the newest copy out of it
    owner_lost: bool = False  # close once idle, not kept


class IpcMappings:
    def __init__(self, idle_bytes: int = IDLE_BYTES, idle_count: int = IDLE_COUNT) -> None:
        self.idle_bytes, self.idle_count = idle_bytes, idle_count
        self._open: dict[bytes, Mapping] = {}
        self._idle: OrderedDict[bytes, None] = OrderedDict()  # least recently used first
        self._idle_total = 0

    def use(self, handle: bytes, job_id: str) -> int | None:
        """Our pointer for `handle`, with `job_id` counted as a user; None when not open yet."""
        mapping = self._open.get(handle)
        if mapping is None:
            return None
        self._busy(handle, mapping)
        mapping.jobs.add(job_id)
        return mapping.pointer

    def opened(self, handle: bytes, pointer: int, job_id: str, nbytes: int, owner: str) -> int | None:
        """Record a mapping just opened for `job_id`. If another thread opened the same handle
        meanwhile, that one is kept and `pointer` is returned to be closed at once."""
        if self.use(handle, job_id) is not None:
            return pointer
        self._open[handle] = Mapping(pointer, nbytes, owner, {job_id})
        return None

    def pointer(self, handle: bytes) -> int:
        return self._open[handle].pointer

    def copied(self, handle: bytes, event: object) -> None:
        self._open[handle].last_copy = event

    def forget(self, job_id: str) -> list[Mapping]:
        """`job_id` is gone: the mappings only it used turn idle. Returns those to close now
        (removed here; the caller waits for their last copies, then unmaps): idle ones past the
        bounds, least recently used first, and ones whose owner is lost."""
        for handle, mapping in self._open.items():
            if job_id in mapping.jobs:
                mapping.jobs.discard(job_id)
                if not mapping.jobs:
                    self._idle[handle] = None
                    self._idle_total += mapping.nbytes
        return self._close_idle(lambda m: m.owner_lost) + self._trim()

    def drop_owner(self, owner: str) -> list[Mapping]:
        """The peer at `owner` is lost: its idle mappings, to close now; those in use close when
        their last job is forgotten."""
        for mapping in self._open.values():
            mapping.owner_lost |= mapping.owner == owner
        return self._close_idle(lambda m: m.owner_lost)

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

    def _close_idle(self, which) -> list[Mapping]:
        return [self._remove(h) for h in [h for h in self._idle if which(self._open[h])]]

    def _remove(self, handle: bytes) -> Mapping:
        mapping = self._open.pop(handle)
        self._busy(handle, mapping)
        return mapping
