"""Which jobs use each opened mapping of a same-host peer's allocation, and when one may close.

A pod opens a peer allocation's CUDA IPC handle once and keeps the mapping for later fetches
(opening costs milliseconds, a 16 MiB copy microseconds), and a reused allocation keeps its
handle, so one mapping serves every job that fetches from it. A pod runs several jobs at once:
closing every mapping when one job is forgotten would unmap memory that another job is copying
from. So a mapping closes only when the last job that used it is forgotten, and only after the
last copy that read it has finished (the caller waits for that copy's event before unmapping).

Pure bookkeeping, no CUDA: the GPU backend holds one under its lock and does the opening,
copying and closing.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Mapping:
    pointer: int
    jobs: set[str] = field(default_factory=set)
    last_copy: object | None = None  # the event of the newest copy out of it


class IpcMappings:
    def __init__(self) -> None:
        self._open: dict[bytes, Mapping] = {}

    def use(self, handle: bytes, job_id: str) -> int | None:
        """Our pointer for `handle`, with `job_id` counted as a user; None when not open yet."""
        mapping = self._open.get(handle)
        if mapping is None:
            return None
        mapping.jobs.add(job_id)
        return mapping.pointer

    def opened(self, handle: bytes, pointer: int, job_id: str) -> int | None:
        """Record a mapping just opened for `job_id`. If another thread opened the same handle
        meanwhile, that one is kept and `pointer` is returned to be closed at once."""
        if handle in self._open:
            self._open[handle].jobs.add(job_id)
            return pointer
        self._open[handle] = Mapping(pointer, {job_id})
        return None

    def pointer(self, handle: bytes) -> int:
        return self._open[handle].pointer

    def copied(self, handle: bytes, event: object) -> None:
        self._open[handle].last_copy = event

    def forget(self, job_id: str) -> list[Mapping]:
        """The mappings no job uses once `job_id` is gone: removed here, for the caller to close
        after their last copies."""
        unused = []
        for handle, mapping in list(self._open.items()):
            mapping.jobs.discard(job_id)
            if not mapping.jobs:
                unused.append(self._open.pop(handle))
        return unused

    def __len__(self) -> int:
        return len(self._open)
