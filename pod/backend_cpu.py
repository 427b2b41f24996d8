"""The CPU backend: buffers are numpy arrays, leaves run on the reference interpreter.

Each leaf is parsed, checked and bound once per job (`prepare`), then launched as often as the
plan says. A buffer holds its tensor's storage dtype (f32, f16, bf16 as ml_dtypes.bfloat16, i32),
which is the dtype the kernel declares, so a leaf gets its buffers as they are; a parameter bound
to a buffer of another dtype gets a converted copy, and written parameters are converted back.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import threading
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from compiler.frontend import ir, walk
from compiler.frontend.binding import Binding, tensor_shape
from schemas.capnp_io import JobProgram
from schemas.program import Leaf

_PARAM_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
                 "bf16": np.dtype(ml_dtypes.bfloat16), "i32": np.dtype(np.int32)}


def host_id() -> str:
    """Equal for pods on one host (one boot of it): hostname plus the kernel's boot id."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


def available_host_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class PreparedLeaf:
    leaf: Leaf
    kernel: ir.Kernel
    binding: Binding
    writes: tuple[str, ...]


def prepare_leaf(leaf: Leaf) -> PreparedLeaf:
    from compiler.cluster.leaves import load_leaf  # parse + check + bind

    kernel, binding = load_leaf(leaf)
    return PreparedLeaf(leaf, kernel, binding, tuple(walk.stored_tensors(kernel)))


class CpuBackend:
    kind = "cpu"
    device_index = -1
    capability = 0  # no GPU: no compute capability (PodInfo)

    def __init__(self) -> None:
        self._leaves: dict[tuple[str, str], PreparedLeaf] = {}
        self._buffers = HostBuffers()

    def describe(self) -> tuple[str, int]:
        """(device name, bytes of memory buffers may fill)."""
        return f"cpu ({os.cpu_count()} cores)", available_host_memory()

    # ---- per job ----

    def prepare(self, job_id: str, program: JobProgram) -> dict[str, tuple[str, ...]]:
        """Parse and bind every leaf once; returns each leaf's written tensor parameters."""
        writes = {}
        for leaf in program.leaves:
            prepared = prepare_leaf(leaf)
            self._leaves[(job_id, leaf.name)] = prepared
            writes[leaf.name] = program.writes_of(leaf.name) or prepared.writes
        return writes

    def forget(self, job_id: str) -> None:
        for key in [k for k in self._leaves if k[0] == job_id]:
            del self._leaves[key]
        self._buffers.trim()

    # ---- buffers ----

    def allocate(self, shape: tuple[int, ...], dtype: str = "f32") -> np.ndarray:
        """A buffer of zeros: memory of a buffer no longer referenced where one of that size is
        (HostBuffers), else fresh."""
        return self._buffers.zeros(shape, _PARAM_DTYPES[dtype])

    def upload(self, buffer: np.ndarray, host: np.ndarray) -> None:
        buffer[...] = host

    def fill(self, buffer: np.ndarray, read) -> tuple[int, float]:
        """Fill the buffer with `read(host, first, count)` (rows first..first+count along axis 0;
        it returns bytes read): on the CPU the buffer is the host array, filled in one piece.
        Returns (bytes read, seconds of host-to-device copy: none)."""
        return read(buffer, 0, _rows(buffer)), 0.0

    def drain(self, buffer: np.ndarray, write) -> tuple[int, float]:
        """`write(host, first, count)` of the buffer's contents, in one piece: (its result, copy
        seconds: none)."""
        return write(buffer, 0, _rows(buffer)), 0.0

    def download(self, buffer: np.ndarray) -> np.ndarray:
        """The buffer's contents as a C-contiguous host array (no copy on the CPU)."""
        return buffer

    def host_view(self, buffer: np.ndarray) -> np.ndarray | None:
        """A host array aliasing the buffer, written into directly by a fetch (None on a GPU)."""
        return buffer

    def host_dtype(self, buffer: np.ndarray) -> np.dtype:
        """The numpy dtype of the buffer's bytes on the host (its storage dtype)."""
        return buffer.dtype

    def nbytes(self, buffer: np.ndarray) -> int:
        return buffer.nbytes

    # ---- compute ----

    def compute(self, job_id: str, leaf_name: str, bound: dict[str, np.ndarray],
                scalars: dict[str, float | int]) -> None:
        """Run one launch of the leaf on the bound buffers (blocking; called from a worker thread)."""
        from compiler.interp.interpreter import run_kernel

        prepared = self._leaves[(job_id, leaf_name)]
        arrays, converted = _leaf_arrays(prepared, bound)
        run_kernel(prepared.kernel, prepared.binding, arrays,
                   {name: scalars[name] for name in prepared.leaf.scalars})
        for name in converted:
            if name in prepared.writes:
                bound[name][...] = arrays[name].astype(bound[name].dtype)


class HostBuffers:
    """The memory of large buffers, kept for reuse once nothing references it any more.

    A fresh buffer costs a page fault and the kernel's zeroing of every page on its first touch
    (about 0.25 s/GiB here), paid again for each unit's buffers: the load that fills them or the
    leaf that writes them runs that much slower. Buffers of a size seen before reuse earlier
    buffers' memory instead, zeroed in place (a memset of memory already mapped, an order of
    magnitude faster).

    A block is idle when its only references are this object's: every array or memoryview made
    from a buffer (numpy views keep the block that owns the memory as their base) holds it, so a
    block still read by a store, a data-port send or a leaf is never handed out again, whatever
    freed the buffer. At most IDLE_BYTES of idle blocks are kept (`trim`)."""

    MIN_BYTES = 1 << 20  # smaller buffers are allocated afresh each time: faults cost little there
    IDLE_BYTES = 1 << 30

    def __init__(self) -> None:
        self._blocks: dict[int, list[np.ndarray]] = {}  # byte size -> every block of that size
        self._lock = threading.Lock()

    def zeros(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < self.MIN_BYTES:
            return np.zeros(shape, dtype)
        with self._lock:
            blocks = self._blocks.setdefault(nbytes, [])
            idle = [i for i in range(len(blocks)) if _idle(blocks, i)]
            if idle:
                block = blocks[idle[0]]
                block.fill(0)
            else:
                block = np.zeros(nbytes, np.uint8)  # mapped afresh: the kernel zeroes its pages
                blocks.append(block)
                self._trim(self.IDLE_BYTES)
            return block.view(dtype).reshape(shape)

    def trim(self) -> None:
        """Let idle blocks go beyond IDLE_BYTES (at a job's end)."""
        with self._lock:
            self._trim(self.IDLE_BYTES)

    def _trim(self, keep: int) -> None:
        for nbytes, blocks in self._blocks.items():
            for i in reversed([i for i in range(len(blocks)) if _idle(blocks, i)]):
                if keep >= nbytes:
                    keep -= nbytes
                else:
                    del blocks[i]


def _idle(blocks: list[np.ndarray], i: int) -> bool:
    """Whether nothing references blocks[i] but the list: getrefcount sees the list's reference
    and its own argument's."""
    return sys.getrefcount(blocks[i]) == 2


def _leaf_arrays(prepared: PreparedLeaf, bound: dict[str, np.ndarray]):
    """Each tensor parameter's array in its declared dtype (converted copies where not f32);
    a parameter the launch does not bind gets zeros (the leaf never touches it)."""
    arrays: dict[str, np.ndarray] = {}
    converted: list[str] = []
    for param in prepared.kernel.tensors:
        dtype = _PARAM_DTYPES[param.dtype]
        buf = bound.get(param.name)
        if buf is None:
            arrays[param.name] = np.zeros(tensor_shape(param, prepared.binding.env), dtype)
        elif buf.dtype == dtype:
            arrays[param.name] = buf
        else:
            arrays[param.name] = buf.astype(dtype)
            converted.append(param.name)
    return arrays, converted


def _rows(buffer: np.ndarray) -> int:
    return int(buffer.shape[0]) if buffer.ndim else 1
