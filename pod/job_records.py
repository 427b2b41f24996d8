"""What a pod keeps per job and per buffer while it runs them: the records PodRuntime
(pod/runtime.py) and its serving half (pod/rpc/serving.py) share."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pod.statemachine import state as st
from pod.storage.disk import PlanDisk
from schemas.capnp_io import JobProgram


@dataclass
class BufferRecord:
    array: object  # numpy (cpu) or cupy (gpu) array in its tensor's storage dtype
    dtype: str  # that storage dtype's name, as its Allocate named it (f32, f16, bf16, i32)
    host: np.ndarray | None = None  # host copy for serving (gpu), or the array itself (cpu)
    crc: int | None = None
    serving: asyncio.Future | None = None  # the host copy and crc being made (in the I/O pool)
    lent: bool = False  # its IPC handle went to a peer: the allocation is not reused while it may copy


@dataclass
class Job:
    job_id: str
    state: st.PodState
    # the pod's jobs numbered as they came: an earlier job's I/O goes first (pod/storage/lanes.py)
    order: int = 0
    program: JobProgram | None = None
    scalars: dict = field(default_factory=dict)
    peers: dict[int, str] = field(default_factory=dict)
    paths: dict[tuple[int, int], Path] = field(default_factory=dict)  # (generation, tensor) -> confined path
    buffers: dict[tuple[int, int], BufferRecord] = field(default_factory=dict)  # (generation, buffer)
    waiters: dict[tuple[int, int], list[asyncio.Future]] = field(default_factory=dict)
    computing: set[tuple[int, int]] = field(default_factory=set)  # (generation, unit) computes begun
    preparing: asyncio.Future | None = None  # the program's leaves prepared by the backend
    writes: dict[str, tuple[str, ...]] | None = None  # leaf -> written parameters
    # buffers of dropped generations whose IPC handles peers hold: kept (not reused) until the
    # job is forgotten, since such a peer may still be copying out of them
    lent: list[BufferRecord] = field(default_factory=list)
    disk: dict[int, PlanDisk] = field(default_factory=dict)  # generation -> its read-ahead and write-back

    def stop_disk(self, generation: int) -> None:
        """The generation is over (finished or dropped): no more reading ahead for it."""
        disk = self.disk.pop(generation, None)
        if disk is not None:
            disk.stop()
