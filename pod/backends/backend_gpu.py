"""The GPU backend: buffers are cupy arrays on one device, leaves run as PTX through cupy.

A buffer holds its tensor's storage dtype: f32, f16 and i32 as such, bf16 as its 16-bit pattern
(uint16: cupy has no bfloat16, and the leaves take bf16 as bits); on the host the same bytes are
viewed as ml_dtypes.bfloat16 (`host_dtype`).

A leaf comes compiled from the scheduler (schemas/compiled_leaf.py: PTX, its launch sequence and
parameter layout) and is loaded as it is, with no parse, CUDA generation or NVRTC here; a leaf sent
without one is compiled here into the same form (pod/backends/gpu_leaves.py). Prepared leaves are kept by
content for later jobs, the latest KEPT_LEAVES. Each concurrent compute runs
on its own CUDA stream taken from a small pool; host<->device copies use a separate copy stream per
calling thread. Buffers are allocated straight with cudaMalloc (not cupy's pool) so a buffer's
pointer is its allocation's base, which is what a CUDA IPC handle describes (same-host peers map it
instead of copying through the host).

The data path (docs/runtime.md, "The data path"): a load reads storage straight into pinned host
memory (cupy's pinned pool, reused) in pieces of PIECE_BYTES, two pieces in turn, and each piece
goes on with cudaMemcpyAsync on the thread's copy stream while the next is read; a store copies back
the same way and writes one piece while the next comes off the device. Several storage threads run
at once, so loads and stores also overlap each other and the computes. No pageable synchronous copy
is on that path. A peer allocation's IPC handle is opened once and the mapping kept for later jobs,
within bounds (pod/backends/ipc_mappings.py); a copy out of it is started on the event loop's thread, on a
stream kept for such copies, and waited for by its CUDA event (pod/rpc/peers.py), with no thread
hand-off; the events are reused.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
import weakref

import ml_dtypes
import numpy as np

from common import dtypes, storage
from pod.backends.backend_cpu import KEPT_LEAVES
from pod.backends.gpu_leaves import GpuLeaf, gpu_leaf
from pod.backends.ipc_mappings import IpcMappings, Mapping
from schemas.capnp_io import JobProgram
from schemas.compiled_leaf import CompiledLeaf
from schemas.program import Leaf

STREAMS = 4
PIECE_BYTES = 8 << 20  # loads and stores move through two pinned pieces of this size


class GpuBackend:
    kind = "gpu"
    stores_direct = False  # direct stores (backend_cpu.py) are not measured on a GPU host's disk yet

    def __init__(self, device_index: int):
        import cupy

        self.cupy = cupy
        self.device_index = device_index
        self.device = cupy.cuda.Device(device_index)
        self.device.use()
        self.capability = int(self.device.compute_capability)  # leaves are compiled for it
        self._leaves: dict[tuple[str, str], GpuLeaf] = {}
        with self.device:
            self._streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
            # every copy out of a peer's mapping goes on this one stream, in order: what lets a
            # mapping's last_copy be any later event of it (pod/backends/ipc_mappings.py)
            self._ipc_stream = cupy.cuda.Stream(non_blocking=True)
        self._ipc_events: list = []  # events of _ipc_stream seen done, for the next copies
        self._free_streams = list(self._streams)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._ipc = IpcMappings()  # our mappings of same-host peers' allocations, by IPC handle
        self._idle: dict[int, list] = {}  # bytes -> allocations no buffer uses now
        self._lent: set[int] = set()  # allocations (base pointers) whose IPC handle went to a peer
        self._launchers: dict[tuple[str, str], list] = {}  # (job, leaf) -> a prepared launch per kernel
        self.piece_bytes = PIECE_BYTES
        # leaves prepared for earlier jobs, by their content and compiled form, the latest KEPT_LEAVES: a
        # pod serving job after job of one kernel prepares its leaf once. Two jobs preparing at
        # once may both prepare a new leaf; either result serves (both are immutable).
        self._prepare_leaf = functools.lru_cache(maxsize=KEPT_LEAVES)(self._prepared)

    def describe(self) -> tuple[str, int]:
        props = self.cupy.cuda.runtime.getDeviceProperties(self.device_index)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        with self.device:
            free, _total = self.cupy.cuda.runtime.memGetInfo()
        return name, int(free)

    # ---- per job ----

    def prepare(self, job_id: str, program: JobProgram) -> dict[str, tuple[str, ...]]:
        writes = {}
        shipped = dict(program.compiled)
        for leaf in program.leaves:
            prepared = self._prepare_leaf(leaf, shipped.get(leaf.name))
            self._leaves[(job_id, leaf.name)] = prepared
            writes[leaf.name] = program.writes_of(leaf.name) or prepared.compiled.writes
        return writes

    def _prepared(self, leaf: Leaf, shipped: CompiledLeaf | None) -> GpuLeaf:
        """`leaf` as the scheduler compiled it (or compiled here when it sent none), its module
        loaded. Kept by content for later jobs (`_prepare_leaf`): a compile here holds Python's
        lock for milliseconds in a compute worker, beside the plan's first fetches and loads."""
        from compiler.cuda.launch import load

        prepared = gpu_leaf(leaf, shipped, self.capability)
        with self.device:
            # module load (the driver's PTX JIT) belongs to the job's set-up, not to its
            # first compute instruction; load refuses code made for another GPU
            for kernel in prepared.kernels:
                load(kernel)
        return prepared

    def forget(self, job_id: str) -> None:
        for key in [k for k in self._leaves if k[0] == job_id]:
            del self._leaves[key]
            self._launchers.pop(key, None)

    # ---- buffers ----

    def allocate(self, shape: tuple[int, ...], dtype: str = "f32"):
        cupy = self.cupy
        dtype = _DEVICE_DTYPES[dtype]
        nbytes = max(4, int(np.prod(shape)) * dtype.itemsize)
        with self.device:
            mem = self._take_allocation(nbytes)
            array = cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(mem, 0))
            # back to the idle list when the runtime drops the buffer (its Free instruction)
            weakref.finalize(array, self._give_back, nbytes, mem)
            stream = self._copy_stream()
            with stream:
                array.fill(0)
            # our streams do not wait for each other: finish the fill before any upload or compute
            stream.synchronize()
        return array

    def _take_allocation(self, nbytes: int):
        """A plain cudaMalloc allocation (base pointer, IPC-able) of `nbytes`, reused from an
        earlier buffer of that size where one is idle: a reused allocation keeps its IPC handle,
        so a same-host peer that fetched from it before finds its mapping already open."""
        with self._lock:
            idle = self._idle.get(nbytes)
            if idle:
                return idle.pop()
        for keep_lent in (True, False):
            try:
                return self.cupy.cuda.memory.Memory(nbytes)
            except self.cupy.cuda.memory.OutOfMemoryError:
                self._free_idle(keep_lent)  # idle blocks of other sizes: give them back and retry
        return self.cupy.cuda.memory.Memory(nbytes)

    def _free_idle(self, keep_lent: bool) -> None:
        """Free idle allocations: with `keep_lent`, only those whose IPC handle no peer was
        given. A peer may keep a lent one mapped for later jobs (pod/backends/ipc_mappings.py), and CUDA
        calls freeing it under that mapping undefined (the memory may stay held until the peer's
        mapping closes), so lent ones go only when freeing the others was not enough."""
        with self._lock:
            kept: dict[int, list] = {}
            for nbytes, idle in self._idle.items():
                for mem in idle:
                    if keep_lent and mem.ptr in self._lent:
                        kept.setdefault(nbytes, []).append(mem)
                    else:  # freed: a later allocation at its address is a new one, not lent yet
                        self._lent.discard(mem.ptr)
            self._idle = kept  # the others' last references: cudaFree

    def _give_back(self, nbytes: int, mem) -> None:
        with self._lock:
            self._idle.setdefault(nbytes, []).append(mem)

    def _copy_stream(self):
        stream = getattr(self._local, "stream", None)
        if stream is None:
            with self.device:
                stream = self._local.stream = self.cupy.cuda.Stream(non_blocking=True)
        return stream

    def host_dtype(self, buffer) -> np.dtype:
        """The numpy dtype of the buffer's bytes on the host: bf16 bits are ml_dtypes.bfloat16."""
        return _HOST_DTYPES.get(np.dtype(buffer.dtype), np.dtype(buffer.dtype))

    def pinned(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """A host array in page-locked memory (cupy's pinned pool: freed blocks are reused)."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape))
        memory = self.cupy.cuda.alloc_pinned_memory(max(1, count * dtype.itemsize))
        return np.frombuffer(memory, dtype, count).reshape(shape)  # keeps `memory` alive

    def fill(self, buffer, read) -> tuple[int, float]:
        """Fill the buffer piece by piece: `read(host, first, count)` puts rows first..first+count
        (along axis 0) into a pinned host piece, which is copied on asynchronously on this
        thread's copy stream while the next piece is read into the other pinned piece (double
        buffered). Returns (bytes read, seconds spent waiting for copies: the part of the
        host-to-device copy that reading did not hide)."""
        pieces = storage.row_pieces(tuple(buffer.shape), buffer.itemsize, self.piece_bytes)
        hosts = self._pinned_pieces(buffer, pieces)
        row_bytes = _row_bytes(buffer)
        copied = [None, None]  # the copy out of each pinned piece, not yet waited for
        nbytes, waited = 0, 0.0
        stream = self._copy_stream()
        with self.device:
            for i, (first, count) in enumerate(pieces):
                if copied[i % 2] is not None:
                    waited += _wait(copied[i % 2])
                host = hosts[i % 2][:count]
                nbytes += read(host, first, count)
                (buffer.data + first * row_bytes).copy_from_host_async(
                    ctypes.c_void_p(host.ctypes.data), host.nbytes, stream=stream)
                copied[i % 2] = stream.record()
            waited += _wait(stream)  # the pinned pieces go back to the pool only after the copies
        return nbytes, waited

    def drain(self, buffer, write) -> tuple[int, float]:
        """Fill's reverse: each piece is copied into a pinned host piece asynchronously while the
        one before it is written by `write(host, first, count)`. Returns (its results summed,
        seconds spent waiting for device-to-host copies)."""
        pieces = storage.row_pieces(tuple(buffer.shape), buffer.itemsize, self.piece_bytes)
        hosts = self._pinned_pieces(buffer, pieces)
        row_bytes = _row_bytes(buffer)
        stream = self._copy_stream()

        def copy_out(i: int):
            first, count = pieces[i]
            host = hosts[i % 2][:count]
            (buffer.data + first * row_bytes).copy_to_host_async(
                ctypes.c_void_p(host.ctypes.data), host.nbytes, stream=stream)
            return host, stream.record()

        written, waited = 0, 0.0
        with self.device:
            pending = copy_out(0) if pieces else None
            for i, (first, count) in enumerate(pieces):
                host, copied = pending
                waited += _wait(copied)
                if i + 1 < len(pieces):
                    pending = copy_out(i + 1)  # into the other piece, whose write is done
                written += write(host, first, count)
        return written, waited

    def _pinned_pieces(self, buffer, pieces: list[tuple[int, int]]) -> list[np.ndarray]:
        rows = pieces[0][1] if pieces else 0
        shape = (rows, *buffer.shape[1:])
        return [self.pinned(shape, self.host_dtype(buffer)) for _ in range(min(2, len(pieces)))]

    def upload(self, buffer, host: np.ndarray) -> None:
        source = np.asarray(host).reshape(buffer.shape)

        def read(pinned: np.ndarray, first: int, count: int) -> int:
            pinned[...] = source[first:first + count]
            return pinned.nbytes

        self.fill(buffer, read)

    def download(self, buffer) -> np.ndarray:
        """The buffer's contents in a pinned host array (served to peers from there)."""
        return self._to_host(buffer)

    def _to_host(self, buffer) -> np.ndarray:
        host = self.pinned(tuple(buffer.shape), self.host_dtype(buffer))
        stream = self._copy_stream()
        with self.device:
            buffer.data.copy_to_host_async(ctypes.c_void_p(host.ctypes.data), host.nbytes, stream=stream)
            stream.synchronize()
        return host

    def host_view(self, buffer):
        return None

    def nbytes(self, buffer) -> int:
        return int(buffer.nbytes)

    # ---- same-host peers ----

    def ipc_handle(self, buffer) -> bytes:
        """The handle of `buffer`'s allocation, for a same-host peer to map (lent from now on)."""
        with self._lock:
            self._lent.add(buffer.data.ptr)
        with self.device:
            return bytes(self.cupy.cuda.runtime.ipcGetMemHandle(buffer.data.ptr))

    def start_ipc_copy(self, buffer, handle: bytes, peer_device: int):
        """Start copying a same-host peer's buffer, by its IPC handle, into `buffer`, device to
        device, if the handle is mapped here already: returns the CUDA event that completes with
        the copy (its mapping pinned until `ipc_copy_done`), or None (then `open_ipc_and_copy`,
        off the event loop). Made for the event loop's thread, on every fetch's path: no wait, no
        device switch (the copy names both devices; the stream and events are our device's), one
        lock."""
        event = self._ipc_event()
        with self._lock:
            pointer = self._ipc.pin(handle, event)
        if pointer is None:
            self._ipc_events.append(event)
            return None
        return self._issue_ipc_copy(buffer, handle, pointer, peer_device, event)

    def open_ipc_and_copy(self, buffer, handle: bytes, peer_device: int, nbytes: int, owner: str):
        """Map the allocation of the peer at `owner` by its handle (milliseconds: not for the
        event loop) and start the copy as start_ipc_copy does. The mapping is kept for later
        copies, of this job and of later ones: the owner reuses the allocation, handle and all,
        for its next buffers of that size. When it closes: pod/backends/ipc_mappings.py."""
        event = self._ipc_event()
        with self.device:
            opened = self.cupy.cuda.runtime.ipcOpenMemHandle(handle)
        with self._lock:
            pointer, spare = self._ipc.opened(handle, opened, nbytes, owner, event)
        if spare is not None:  # opened meanwhile by another thread: that one is kept
            with self.device:
                self.cupy.cuda.runtime.ipcCloseMemHandle(spare)
        return self._issue_ipc_copy(buffer, handle, pointer, peer_device, event)

    def _issue_ipc_copy(self, buffer, handle: bytes, pointer: int, peer_device: int, event):
        stream = self._ipc_stream
        try:
            self.cupy.cuda.runtime.memcpyPeerAsync(buffer.data.ptr, self.device_index, pointer, peer_device,
                                                   buffer.nbytes, stream.ptr)
            stream.record(event)
        except BaseException:
            stream.synchronize()  # nothing of ours copies out of the mapping once it is unpinned
            self.close_mappings(self.ipc_copy_done(handle, event))
            raise
        return event

    def ipc_copy_done(self, handle: bytes, event) -> list[Mapping]:
        """The copy `event` completes with was seen done (or its fetch gave up on it): its
        mapping is unpinned, the event kept for a later copy. Returns the mappings to close now
        (`close_mappings`, off the event loop): past the idle bounds, or of a lost owner."""
        self._ipc_events.append(event)
        with self._lock:
            return self._ipc.unpin(handle)

    def _ipc_event(self):
        """An event for a copy on _ipc_stream: one seen done before (a list's append and pop
        are atomic: no lock), or a new one, made on our device."""
        try:
            return self._ipc_events.pop()
        except IndexError:
            with self.device:
                return self.cupy.cuda.Event(block=False, disable_timing=True)

    def drop_ipc_owner(self, owner: str) -> None:
        """The peer at `owner` is lost: close our idle mappings of its allocations."""
        with self._lock:
            closing = self._ipc.drop_owner(owner)
        self.close_mappings(closing)

    def close_mappings(self, closing: list[Mapping]) -> None:
        """Unmap `closing` once the last copy out of each is done (a copy whose fetch was
        cancelled may still run). Waits on the device: for a worker thread, not the loop."""
        with self.device:
            for mapping in closing:
                if mapping.last_copy is not None:
                    mapping.last_copy.synchronize()
                self.cupy.cuda.runtime.ipcCloseMemHandle(mapping.pointer)

    # ---- compute ----

    def compute(self, job_id: str, leaf_name: str, bound: dict, scalars: dict[str, float | int]) -> None:
        prepared = self._leaves[(job_id, leaf_name)]
        launches = self._launchers.get((job_id, leaf_name))
        if launches is None:  # the job's scalars are fixed: the launches are prepared once per job and leaf
            from compiler.cuda.launch import prepared_launch

            values = {name: scalars[name] for name in prepared.leaf.scalars}
            launches = self._launchers[(job_id, leaf_name)] = [
                prepared_launch(kernel, values) for kernel in prepared.kernels]
        with self._lock:
            stream = self._free_streams.pop() if self._free_streams else self._streams[0]
        try:
            with self.device, stream:
                arrays, converted = _device_arrays(self.cupy, prepared.compiled, bound)
                for go in launches:  # in order on one stream: a split launch's kernels
                    go(arrays, stream)
                for name in converted:
                    if name in prepared.compiled.writes:
                        bound[name][...] = _to_f32(self.cupy, arrays[name])
                stream.synchronize()
        finally:
            with self._lock:
                if stream not in self._free_streams:
                    self._free_streams.append(stream)


def _row_bytes(buffer) -> int:
    return int(np.prod(buffer.shape[1:], dtype=np.int64)) * buffer.itemsize


def _wait(stream_or_event) -> float:
    start = time.perf_counter()
    stream_or_event.synchronize()
    return time.perf_counter() - start


def _device_arrays(cupy, compiled: CompiledLeaf, bound: dict):
    """Like the CPU backend's: converted copies for non-f32 parameters (bf16 as its bit pattern,
    which is what compiler.cuda.launch expects), zeros for unbound parameters; and the launch
    sequence's scratch buffers, this launch's own (computes of one leaf run at once)."""
    arrays, converted = {}, []
    for scratch in compiled.scratch:
        make = cupy.zeros if scratch.zeroed else cupy.empty
        arrays[scratch.name] = make(scratch.shape, _DEVICE_DTYPES[scratch.dtype])
    for param in compiled.tensors:
        buf = bound.get(param.name)
        if buf is None:
            arrays[param.name] = cupy.zeros(param.shape, _DEVICE_DTYPES[param.dtype])
        elif buf.dtype == _DEVICE_DTYPES[param.dtype]:
            arrays[param.name] = buf  # held in the declared dtype: no conversion
        elif buf.dtype != cupy.float32:
            raise TypeError(f"tensor {param.name}: a {buf.dtype} buffer for a {param.dtype} parameter")
        elif param.dtype == "bf16":
            # round to nearest even on the bit pattern: bf16 = upper half of f32
            bits = buf.view(cupy.uint32)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            arrays[param.name] = rounded.astype(cupy.uint16)
            converted.append(param.name)
        else:
            arrays[param.name] = buf.astype(_DEVICE_DTYPES[param.dtype])
            converted.append(param.name)
    return arrays, converted


def _to_f32(cupy, array):
    if array.dtype == cupy.uint16:  # bf16 bit pattern: the upper half of an f32
        return (array.astype(cupy.uint32) << 16).view(cupy.float32)
    return array.astype(cupy.float32)


# storage dtype -> device dtype (bf16 as its bits) and back to the host view of those bytes
_DEVICE_DTYPES = {name: dtypes.device_dtype(name) for name in dtypes.names(storage=True)}
_HOST_DTYPES = {np.dtype(np.uint16): np.dtype(ml_dtypes.bfloat16)}
