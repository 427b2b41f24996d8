"""The CPU backend: buffers are numpy arrays, leaves run on the reference interpreter.

Each leaf is parsed, checked and bound once per job (`prepare`), then launched as often as the
plan says. A buffer holds its tensor's storage dtype (f32, f16, bf16 as ml_dtypes.bfloat16, i32),
which is the dtype the kernel declares, so a leaf gets its buffers as they are; a parameter bound
to a buffer of another dtype gets a converted copy, and written parameters are converted back.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from common.storage import STORAGE_DTYPES
from pod.backends.host_buffers import HostBuffers
from pod.host import available_host_memory
from schemas.capnp_io import JobProgram
from schemas.program import Leaf

if TYPE_CHECKING:  # the front end loads with the first job (pod/cli.py, FIRST_JOB_MODULES): at
    # the top it held the pod 20-25 ms before it could listen
    from compiler.frontend import ir
    from compiler.frontend.binding import Binding

KEPT_LEAVES = 32


@dataclass(frozen=True)
class PreparedLeaf:
    leaf: Leaf
    kernel: ir.Kernel
    binding: Binding
    writes: tuple[str, ...]


def prepare_leaf(leaf: Leaf) -> PreparedLeaf:
    from compiler.cluster.leaves import load_leaf  # parse + check + bind
    from compiler.frontend import walk

    kernel, binding = load_leaf(leaf)
    return PreparedLeaf(leaf, kernel, binding, tuple(walk.stored_tensors(kernel)))


class CpuBackend:
    kind = "cpu"
    device_index = -1
    capability = 0  # no GPU: no compute capability (PodInfo)
    # A store's long runs go to the disk straight from the buffer (common/fileio.py write_runs):
    # a buffered write of a new file's pages cost 0.9-3.4 ms/MiB here, most of it faulting in
    # fresh page-cache memory; the buffers are page-aligned for it (pod/backends/host_buffers.py).
    stores_direct = True

    def __init__(self) -> None:
        self._leaves: dict[tuple[str, str], PreparedLeaf] = {}
        # leaves prepared for earlier jobs, by their content, the latest KEPT_LEAVES: a pod
        # serving job after job of one kernel parses its leaf once (6-8 ms a job here, in a
        # compute worker beside the first loads, holding Python's lock). Two jobs preparing at
        # once may both parse a new leaf; either result serves (the kernel's IR is frozen).
        self._prepare_leaf = functools.lru_cache(maxsize=KEPT_LEAVES)(prepare_leaf)
        self._buffers = HostBuffers()

    def describe(self) -> tuple[str, int]:
        """(device name, bytes of memory buffers may fill)."""
        return f"cpu ({os.cpu_count()} cores)", available_host_memory()

    # ---- per job ----

    def prepare(self, job_id: str, program: JobProgram) -> dict[str, tuple[str, ...]]:
        """Parse and bind every leaf once, or take it as an earlier job prepared it (the same leaf:
        source, dims, tile values); returns each leaf's written tensor parameters."""
        writes = {}
        for leaf in program.leaves:
            prepared = self._prepare_leaf(leaf)
            self._leaves[(job_id, leaf.name)] = prepared
            writes[leaf.name] = program.writes_of(leaf.name) or prepared.writes
        return writes

    def forget(self, job_id: str) -> None:
        for key in [k for k in self._leaves if k[0] == job_id]:
            del self._leaves[key]
        self._buffers.trim()

    # ---- buffers ----

    def allocate(self, shape: tuple[int, ...], dtype: str = "f32") -> np.ndarray:
        """A buffer of zeros, as far as anything reading it can tell (pod/backends/host_buffers.py)."""
        return self._buffers.take(shape, STORAGE_DTYPES[dtype])

    def upload(self, buffer: np.ndarray, host: np.ndarray) -> None:
        buffer[...] = host
        self._buffers.written_whole(buffer)

    def fill(self, buffer: np.ndarray, read) -> tuple[int, float]:
        """Fill the buffer with `read(host, first, count)` (rows first..first+count along axis 0;
        it returns bytes read): on the CPU the buffer is the host array, filled in one piece.
        Returns (bytes read, seconds of host-to-device copy: none)."""
        nbytes = read(buffer, 0, _rows(buffer))
        self._buffers.written_whole(buffer)  # a load's region is the buffer's whole shape
        return nbytes, 0.0

    def drain(self, buffer: np.ndarray, write) -> tuple[int, float]:
        """`write(host, first, count)` of the buffer's contents, in one piece: (its result, copy
        seconds: none)."""
        self._buffers.before_use(buffer)
        return write(buffer, 0, _rows(buffer)), 0.0

    def download(self, buffer: np.ndarray) -> np.ndarray:
        """The buffer's contents as a C-contiguous host array (no copy on the CPU)."""
        self._buffers.before_use(buffer)
        return buffer

    def host_view(self, buffer: np.ndarray) -> np.ndarray | None:
        """A host array aliasing the buffer, written into directly by a fetch (None on a GPU)."""
        self._buffers.before_use(buffer)
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
        for buffer in bound.values():
            self._buffers.before_use(buffer)
        arrays, converted = _leaf_arrays(prepared, bound)
        run_kernel(prepared.kernel, prepared.binding, arrays,
                   {name: scalars[name] for name in prepared.leaf.scalars})
        for name in converted:
            if name in prepared.writes:
                bound[name][...] = arrays[name].astype(bound[name].dtype)


def _leaf_arrays(prepared: PreparedLeaf, bound: dict[str, np.ndarray]):
    """Each tensor parameter's array in its declared dtype (converted copies where not f32);
    a parameter the launch does not bind gets zeros (the leaf never touches it)."""
    from compiler.frontend.binding import tensor_shape

    arrays: dict[str, np.ndarray] = {}
    converted: list[str] = []
    for param in prepared.kernel.tensors:
        dtype = STORAGE_DTYPES[param.dtype]
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
