"""The GPU backend: buffers are cupy f32 arrays on one device, leaves run as PTX through cupy.

Leaves are compiled once per job (compiler.cuda.compile_kernel at the leaf's own dims and tile
values; when the scheduler sends PTX, the pod only regenerates the launch metadata and uses that
PTX). Each concurrent compute runs on its own CUDA stream taken from a small pool; host<->device
copies use a separate copy stream per calling thread. Buffers are allocated straight with
cudaMalloc (not cupy's pool) so a buffer's pointer is its allocation's base, which is what a CUDA
IPC handle describes (same-host peers map it instead of copying through the host).
"""

from __future__ import annotations

import threading

import numpy as np

from pod.backend_cpu import PreparedLeaf, prepare_leaf
from schemas.capnp_io import JobProgram

STREAMS = 4


class GpuBackend:
    kind = "gpu"

    def __init__(self, device_index: int):
        import cupy

        self.cupy = cupy
        self.device_index = device_index
        self.device = cupy.cuda.Device(device_index)
        self.device.use()
        self._leaves: dict[tuple[str, str], tuple[PreparedLeaf, object]] = {}
        with self.device:
            self._streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
        self._free_streams = list(self._streams)
        self._lock = threading.Lock()
        self._local = threading.local()

    def describe(self) -> tuple[str, int]:
        props = self.cupy.cuda.runtime.getDeviceProperties(self.device_index)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        with self.device:
            free, _total = self.cupy.cuda.runtime.memGetInfo()
        return name, int(free)

    # ---- per job ----

    def prepare(self, job_id: str, program: JobProgram) -> dict[str, tuple[str, ...]]:
        from compiler.cuda import CompiledKernel, compile_kernel, generate_source
        from compiler.cuda.launch import load

        writes = {}
        ptx = dict(program.leaf_ptx)
        for leaf in program.leaves:
            prepared = prepare_leaf(leaf)
            if leaf.name in ptx:
                gen = generate_source(prepared.kernel, prepared.binding)
                compiled = CompiledKernel(
                    cuda_source=gen.source, ptx=ptx[leaf.name], entry=gen.entry, params=gen.params,
                    grid=gen.grid, block=gen.block, shared_bytes=gen.shared_bytes,
                    line_spans=gen.line_spans, tensors=tuple(p.name for p in prepared.kernel.tensors),
                    scalars=tuple((p.name, p.dtype) for p in prepared.kernel.scalars))
            else:
                compiled = compile_kernel(prepared.kernel, prepared.binding)
            with self.device:
                # module load (the driver's PTX JIT) belongs to the job's set-up, not to its
                # first compute instruction
                load(compiled)
            self._leaves[(job_id, leaf.name)] = (prepared, compiled)
            writes[leaf.name] = program.writes_of(leaf.name) or prepared.writes
        return writes

    def forget(self, job_id: str) -> None:
        for key in [k for k in self._leaves if k[0] == job_id]:
            del self._leaves[key]

    # ---- buffers ----

    def allocate(self, shape: tuple[int, ...]):
        cupy = self.cupy
        nbytes = max(4, int(np.prod(shape)) * 4)
        with self.device:
            mem = cupy.cuda.memory.Memory(nbytes)  # plain cudaMalloc: base pointer, IPC-able
            array = cupy.ndarray(shape, dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(mem, 0))
            stream = self._copy_stream()
            with stream:
                array.fill(0)
            # our streams do not wait for each other: finish the fill before any upload or compute
            stream.synchronize()
        return array

    def _copy_stream(self):
        stream = getattr(self._local, "stream", None)
        if stream is None:
            with self.device:
                stream = self._local.stream = self.cupy.cuda.Stream(non_blocking=True)
        return stream

    def upload(self, buffer, host: np.ndarray) -> None:
        stream = self._copy_stream()
        with self.device:
            buffer.set(np.ascontiguousarray(host, dtype=np.float32), stream=stream)
            stream.synchronize()

    def download(self, buffer) -> np.ndarray:
        stream = self._copy_stream()
        with self.device:
            host = buffer.get(stream=stream)
            stream.synchronize()
        return host

    def host_view(self, buffer):
        return None

    def nbytes(self, buffer) -> int:
        return int(buffer.nbytes)

    # ---- same-host peers ----

    def ipc_handle(self, buffer) -> bytes:
        with self.device:
            return bytes(self.cupy.cuda.runtime.ipcGetMemHandle(buffer.data.ptr))

    def copy_from_ipc(self, buffer, handle: bytes, peer_device: int) -> None:
        """Copy a same-host peer's buffer (by its IPC handle) into `buffer`, device to device."""
        cupy = self.cupy
        runtime = cupy.cuda.runtime
        with self.device:
            ptr = runtime.ipcOpenMemHandle(handle)
            try:
                stream = self._copy_stream()
                runtime.memcpyPeerAsync(buffer.data.ptr, self.device_index, ptr, peer_device,
                                        buffer.nbytes, stream.ptr)
                stream.synchronize()
            finally:
                runtime.ipcCloseMemHandle(ptr)

    # ---- compute ----

    def compute(self, job_id: str, leaf_name: str, bound: dict, scalars: dict[str, float | int]) -> None:
        from compiler.cuda.launch import launch

        prepared, compiled = self._leaves[(job_id, leaf_name)]
        with self._lock:
            stream = self._free_streams.pop() if self._free_streams else self._streams[0]
        try:
            with self.device, stream:
                arrays, converted = _device_arrays(self.cupy, prepared, bound)
                launch(compiled, arrays, {name: scalars[name] for name in prepared.leaf.scalars},
                       stream=stream)
                for name in converted:
                    if name in prepared.writes:
                        bound[name][...] = _to_f32(self.cupy, arrays[name])
                stream.synchronize()
        finally:
            with self._lock:
                if stream not in self._free_streams:
                    self._free_streams.append(stream)


def _device_arrays(cupy, prepared: PreparedLeaf, bound: dict):
    """Like the CPU backend's: converted copies for non-f32 parameters (bf16 as its bit pattern,
    which is what compiler.cuda.launch expects), zeros for unbound parameters."""
    from compiler.frontend.binding import tensor_shape

    arrays, converted = {}, []
    for param in prepared.kernel.tensors:
        buf = bound.get(param.name)
        if buf is None:
            dtype = {"f32": cupy.float32, "f16": cupy.float16, "bf16": cupy.uint16, "i32": cupy.int32}
            arrays[param.name] = cupy.zeros(tensor_shape(param, prepared.binding.env), dtype[param.dtype])
        elif param.dtype == "f32":
            arrays[param.name] = buf
        elif param.dtype == "bf16":
            # round to nearest even on the bit pattern: bf16 = upper half of f32
            bits = buf.view(cupy.uint32)
            rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
            arrays[param.name] = rounded.astype(cupy.uint16)
            converted.append(param.name)
        else:
            arrays[param.name] = buf.astype({"f16": cupy.float16, "i32": cupy.int32}[param.dtype])
            converted.append(param.name)
    return arrays, converted


def _to_f32(cupy, array):
    if array.dtype == cupy.uint16:  # bf16 bit pattern: the upper half of an f32
        return (array.astype(cupy.uint32) << 16).view(cupy.float32)
    return array.astype(cupy.float32)
