"""Running compiled leaves on the GPU through cupy: PTX -> module (cached) -> launch.

`launch` takes device arrays and never copies through the host (the runtime's GPU pods call it);
`run_kernel_gpu` is the host-array convenience used by `compiler run --device gpu` and the tests.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from common import dtypes
from common.errors import UserError
from compiler.cuda import target
from compiler.cuda.scalars import launch_scalar

if TYPE_CHECKING:  # a pod launching a shipped leaf never loads the generator (compiled.py)
    from compiler.cuda.compiled import CompiledKernel
    from compiler.frontend import ir

# bf16 travels as its 16-bit pattern, fp8 as its byte: cupy has neither
_DTYPES = {name: dtypes.device_dtype(name) for name in dtypes.NAMES}
_MAX_DYNAMIC_SMEM_ATTR = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

_functions: dict[tuple[int, str, str], object] = {}
_modules: dict[tuple[int, str, str], object] = {}  # kept alive as long as their functions
_plans: dict[tuple[str, str, tuple], tuple] = {}
_lock = threading.Lock()


def _function(compiled: CompiledKernel):
    """The loaded function of `compiled` on the current device; its PTX is JIT-compiled by the
    driver on first use (ptxas takes about 0.1 s of a build machine's core for a warpgroup-MMA
    kernel)."""
    import cupy

    dev = cupy.cuda.Device().id
    key = (dev, compiled.ptx, compiled.entry)
    fn = _functions.get(key)
    if fn is None:
        # code this GPU cannot run is the user's error at the dot, never the driver's at the load
        target.check(compiled, target.device_capability(dev))
        module, fn = _load_module(compiled)  # outside the lock: loads on other threads go on
        with _lock:
            if key not in _functions:  # another thread's load of the same code won: keep its
                _modules[key], _functions[key] = module, fn
            fn = _functions[key]
    return fn


def _load_module(compiled: CompiledKernel):
    """(module, function) of `compiled` newly loaded on the current device (the driver's JIT)."""
    import cupy

    module = cupy.cuda.function.Module()
    module.load(compiled.ptx.encode())
    fn = module.get_function(compiled.entry)
    if compiled.shared_bytes > 48 * 1024:
        cupy.cuda.driver.funcSetAttribute(fn.ptr, _MAX_DYNAMIC_SMEM_ATTR, compiled.shared_bytes)
    return module, fn


def load(compiled: CompiledKernel):
    """Load the module on the current device now (the driver JIT-compiles the PTX here, which can
    take tens of milliseconds), so that the first launch does not pay for it; returns the loaded
    cupy function, which phobos.Kernel launches directly."""
    return _function(compiled)


def load_all(kernels: list, threads: int) -> list[str | None]:
    """load() of each of `kernels` on the current device, on up to `threads` threads at once
    (cupy calls cuModuleLoadData without the GIL, so the driver may JIT several PTX modules at
    a time); per kernel None, or why the driver refused it (its launch would raise the same)."""
    import cupy

    dev = cupy.cuda.Device().id

    def one(compiled) -> str | None:
        return load_refusal(compiled, dev)

    if threads <= 1 or len(kernels) <= 1:
        return [one(k) for k in kernels]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(one, kernels))


def current_device() -> int:
    import cupy

    return cupy.cuda.Device().id


def load_refusal(compiled: CompiledKernel, device: int) -> str | None:
    """load() of `compiled` on `device` from any thread (a new thread's current device is device
    0): None, or why the driver refused it (the candidate's refusal, reported, not raised)."""
    import cupy

    try:
        with cupy.cuda.Device(device):
            _function(compiled)
    except Exception as e:  # noqa: BLE001 - whatever the driver says is this candidate's
        return f"load failed: {e}"
    return None


def function_attributes(compiled: CompiledKernel) -> dict[str, int]:
    """Registers and local (spill) memory of the loaded function, as the driver reports them."""
    import cupy

    fn = _function(compiled)
    get = cupy.cuda.driver.funcGetAttribute
    return {
        "num_regs": get(4, fn.ptr),
        "local_size_bytes": get(3, fn.ptr),
        "max_threads_per_block": get(0, fn.ptr),
    }


def _plan(compiled: CompiledKernel) -> tuple:
    """Per parameter (name, kind): None for an array, "f32"/"i32" for a scalar, or the MapSpec of
    a tensor map; made once per kernel (the launch's host time counts in a short kernel's
    timing, mainloops/tma_ws/maps.py). Keyed by the maps too: one PTX whose dimensions are parameters
    serves several shapes, and each shape has its own maps (a plan keyed by the PTX alone gave a
    second shape the first one's maps: tests/cuda/test_tma_store_gpu.py's batched case)."""
    key = (compiled.ptx, compiled.entry, compiled.tensor_maps)
    plan = _plans.get(key)
    if plan is None:
        maps = {m.param: m for m in compiled.tensor_maps}
        kinds = dict(compiled.scalars) | maps
        plan = _plans[key] = tuple((name, kinds.get(name)) for name in compiled.params)
    return plan


def launch(compiled: CompiledKernel, arrays: dict, scalars: dict, stream=None) -> None:
    """Launch on the current device; `arrays` maps every tensor parameter to a C-contiguous cupy
    array of the bound shape (16-byte aligned), `scalars` every scalar parameter to a number. A
    kernel with tensor maps gets each as (spec, address), made by tensor_maps.launch only for
    arguments it has not launched with before."""
    import cupy

    fn = _function(compiled)
    by_maps = bool(compiled.tensor_maps)
    args = []
    for name, kind in _plan(compiled):
        if kind is None:
            a = _checked_array(cupy, arrays, name)
            args.append(a.data.ptr if by_maps else a)
        elif isinstance(kind, str):
            args.append(_scalar(scalars, name, kind))
        else:
            args.append((kind, _map_array(cupy, arrays, kind).data.ptr))
    if not by_maps:
        fn(compiled.grid, compiled.block, tuple(args), shared_mem=compiled.shared_bytes, stream=stream)
        return
    from compiler.cuda.mainloops.tma_ws import maps as tensor_maps

    s = stream if stream is not None else cupy.cuda.get_current_stream()
    tensor_maps.launch(fn.ptr, compiled.grid, compiled.block, compiled.shared_bytes, s.ptr, args)


def _scalar(scalars: dict, name: str, dtype: str):
    if name not in scalars:
        raise UserError(f"scalar {name} is missing")
    return launch_scalar(name, scalars[name], dtype)


def _checked_array(cupy, arrays: dict, name: str):
    a = arrays.get(name)
    if a is None:
        raise UserError(f"tensor {name} is missing")
    if not isinstance(a, cupy.ndarray) or not a.flags.c_contiguous:
        raise UserError(f"tensor {name} must be a C-contiguous cupy array")
    if a.data.ptr % 16:
        raise UserError(f"tensor {name} must start on a 16-byte boundary")
    return a


def _map_array(cupy, arrays: dict, spec):
    """The array a tensor map describes: the leaf's bound number and size of elements."""
    arr = _checked_array(cupy, arrays, spec.tensor)
    if arr.size != spec.elements or arr.itemsize != spec.elem_bytes:
        shape, bits = "x".join(map(str, (*spec.outer, spec.rows, spec.cols))), 8 * spec.elem_bytes
        raise UserError(f"tensor {spec.tensor} must hold {shape} {bits}-bit elements")
    return arr


def prepared_launch(compiled: CompiledKernel, scalars: dict):
    """`launch` with everything that does not change between launches done once: the function
    looked up, the scalars converted, the parameter order fixed. The returned
    `go(arrays, stream)` only puts the tensors in their slots (the pods' hot path; the arrays
    are the pod's own allocations, checked once here by the first call's `launch`)."""
    scalar_types = dict(compiled.scalars)
    fixed: list = []
    tensor_slots: list[tuple[int, str]] = []
    for i, name in enumerate(compiled.params):
        if name in scalar_types:
            fixed.append(_scalar(scalars, name, scalar_types[name]))
        else:
            fixed.append(None)
            tensor_slots.append((i, name))
    fn = _function(compiled)
    grid, block, shared = compiled.grid, compiled.block, compiled.shared_bytes
    checked = []

    def go(arrays: dict, stream) -> None:
        if not checked or compiled.tensor_maps:  # every check of `launch` (and the maps of these arrays)
            launch(compiled, arrays, scalars, stream=stream)
            checked.append(True)
            return
        args = list(fixed)
        for i, name in tensor_slots:
            args[i] = arrays[name]
        fn(grid, block, tuple(args), shared_mem=shared, stream=stream)

    return go


def run_kernel_gpu(
    kernel: ir.Kernel, binding, arrays: dict[str, np.ndarray], scalars: dict, schedule=None, tf32=False
) -> dict[str, np.ndarray]:
    """Copy host arrays in, run, copy the stored tensors out (returned by name)."""
    import cupy

    from compiler.cuda.compiled import compile_kernel
    from compiler.frontend import walk

    options = {"tf32": tf32} | ({"schedule": schedule} if schedule is not None else {})
    compiled = compile_kernel(kernel, binding, cc=target.device_capability(), **options)
    device = {}
    for p in kernel.tensors:
        host = arrays.get(p.name)
        if host is None:
            raise UserError(f"tensor {p.name} is missing")
        shape = tuple(d if isinstance(d, int) else binding.env[d] for d in p.dims)
        if tuple(host.shape) != shape:
            raise UserError(f"tensor {p.name} has shape {tuple(host.shape)}, expected {shape}")
        host = np.ascontiguousarray(host)
        held = dtypes.ml_name_of(host.dtype)
        if p.dtype in ("bf16", "e4m3", "e5m2") and held in (None, p.dtype) and (
                host.dtype.itemsize == _DTYPES[p.dtype].itemsize):
            host = host.view(_DTYPES[p.dtype])
        elif host.dtype != _DTYPES[p.dtype]:
            raise UserError(f"tensor {p.name} has dtype {host.dtype}, expected {p.dtype}")
        device[p.name] = cupy.asarray(host)
    launch(compiled, device, scalars)
    cupy.cuda.get_current_stream().synchronize()
    out = {}
    for name in walk.stored_tensors(kernel):
        result = cupy.asnumpy(device[name])
        param = next(p for p in kernel.tensors if p.name == name)
        if param.dtype == "bf16":
            import ml_dtypes

            result = result.view(ml_dtypes.bfloat16)
        out[name] = result
    return out
