"""What the API needs to know of an array, read without copying it.

Three families of arrays are taken:
- numpy arrays, and torch tensors or other DLPack exporters in host memory: a numpy view of the
  same memory (`np.from_dlpack`), for the reference interpreter;
- torch tensors and cupy arrays in GPU memory: their device pointer, device, dtype, shape and
  layout, read from the objects' own attributes (the pointer DLPack would hand over, without
  building a capsule on every call: the call's overhead budget is a few microseconds);
- any other object with `__dlpack__` in GPU memory: a cupy view through `cupy.from_dlpack`.

Nothing is ever copied: an array that is not C-contiguous is refused, not made contiguous.
"""

from __future__ import annotations

import numpy as np

from common.errors import ArrayError, Error
from compiler.interp.values import STORAGE_DTYPES

DLPACK_CPU = 1  # DLPack device types (dlpack.h DLDeviceType)
DLPACK_CUDA_DEVICES = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
ALIGNMENT = 16  # the generated code loads vectors; launch.py asks the same of every tensor

# numpy / cupy dtypes by the kernel's element type. cupy has no bfloat16: a bf16 tensor held by
# cupy is its 16-bit patterns as uint16 (as compiler/cuda/launch.py passes it).
HOST_DTYPES = {name: np.dtype(dt) for name, dt in STORAGE_DTYPES.items()}
CUPY_DTYPES = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "i32": np.dtype(np.int32),
               "bf16": np.dtype(np.uint16)}
TORCH_DTYPES = {"f32": "torch.float32", "f16": "torch.float16", "i32": "torch.int32",
                "bf16": "torch.bfloat16", "e4m3": "torch.float8_e4m3fn", "e5m2": "torch.float8_e5m2"}
# fp8 arrays come from torch (or numpy with ml_dtypes): cupy's uint8 cannot say which format it holds


class DeviceArray:
    """A GPU array as the launch sees it (a plain slotted class: built on every call, and a frozen
    dataclass's __init__ costs a microsecond more per array)."""

    __slots__ = ("ptr", "device", "dtype", "shape", "contiguous", "torch")

    def __init__(self, ptr: int, device: int, dtype: str | None, shape: tuple[int, ...], contiguous: bool,
                 torch: bool):
        self.ptr = ptr
        self.device = device
        self.dtype = dtype  # the kernel element type it holds, None when it is none of them
        self.shape = shape
        self.contiguous = contiguous
        self.torch = torch  # a torch tensor: the call runs on torch's current stream


_TYPE_FAMILIES: dict[type, str] = {np.ndarray: "numpy"}  # filled as types are met


def _family(obj) -> str:
    kind = type(obj)
    family = _TYPE_FAMILIES.get(kind)
    if family is None:
        family = _TYPE_FAMILIES[kind] = _type_family(kind) if kind.__module__.startswith(
            ("torch", "cupy")) or issubclass(kind, np.ndarray) else "dlpack"
    if family == "torch":
        return "torch-gpu" if obj.is_cuda else "torch-cpu"
    if family != "dlpack":
        return family
    if hasattr(obj, "__dlpack_device__"):
        kind = obj.__dlpack_device__()[0]
        if kind == DLPACK_CPU:
            return "dlpack-cpu"
        if kind in DLPACK_CUDA_DEVICES:
            return "dlpack-gpu"
    return "other"


def _type_family(kind: type) -> str:
    if issubclass(kind, np.ndarray):
        return "numpy"
    return "torch" if kind.__module__.startswith("torch") else "cupy"


def on_gpu(name: str, obj) -> bool:
    """True for a GPU array, False for a host one; anything else is refused, naming `name`."""
    family = _family(obj)
    if family == "other":
        raise ArrayError(name, f"expected a numpy, torch or cupy array (or a DLPack exporter), "
                               f"got {type(obj).__name__}")
    return family in ("torch-gpu", "cupy", "dlpack-gpu")


def host_array(name: str, obj, dtype: str) -> np.ndarray:
    """A numpy view of a host array (no copy); refused when it is not C-contiguous."""
    family = _family(obj)
    if family == "torch-cpu":
        if not obj.is_contiguous():
            raise ArrayError(name, "not contiguous; phobos never copies an argument (call .contiguous())")
        if str(obj.dtype) == "torch.bfloat16":  # numpy has no bf16 of its own: view the bits
            import torch

            return np.from_dlpack(obj.view(torch.int16)).view(HOST_DTYPES["bf16"])
        if str(obj.dtype) in (TORCH_DTYPES["e4m3"], TORCH_DTYPES["e5m2"]):  # nor fp8: the bytes
            import torch

            name_of = {v: k for k, v in TORCH_DTYPES.items()}[str(obj.dtype)]
            return np.from_dlpack(obj.view(torch.uint8)).view(HOST_DTYPES[name_of])
        array = np.from_dlpack(obj)
    elif family == "dlpack-cpu":
        array = np.from_dlpack(obj)
    else:
        array = obj
    if not array.flags.c_contiguous:
        raise ArrayError(name, "not C-contiguous; phobos never copies an argument "
                               "(np.ascontiguousarray makes a contiguous copy)")
    if dtype == "bf16" and array.dtype == np.dtype("V2"):
        array = array.view(HOST_DTYPES["bf16"])
    return array


def device_array(name: str, obj) -> DeviceArray:
    """What the launch needs of a GPU array; a host array is refused, naming `name`."""
    family = _family(obj)
    if family not in ("torch-gpu", "cupy", "dlpack-gpu"):
        on_gpu(name, obj)  # refuses what is no array at all
        raise ArrayError(name, "in host memory while the first tensor is on a GPU: give all arrays "
                               "on one device")  # (the first tensor decides where the call runs)
    if family == "torch-gpu":
        dtype = _TORCH_NAMES.get(str(obj.dtype))
        return DeviceArray(obj.data_ptr(), obj.device.index, dtype, tuple(obj.shape), obj.is_contiguous(),
                           True)
    if family == "dlpack-gpu":
        obj = cupy_module().from_dlpack(obj)
    dtype = _CUPY_NAMES.get(obj.dtype)
    return DeviceArray(obj.data.ptr, obj.device.id, dtype, obj.shape, obj.flags.c_contiguous, False)


def cupy_module():
    """cupy, which loads and launches the generated code whatever array library the caller uses;
    its absence is the caller's to fix, said in one line."""
    try:
        import cupy
    except ImportError:
        msg = "calling a kernel on GPU arrays needs cupy, which is not installed here"
        raise Error(f"error: {msg}", msg) from None
    return cupy


_TORCH_NAMES = {v: k for k, v in TORCH_DTYPES.items()}
_CUPY_NAMES = {v: k for k, v in CUPY_DTYPES.items()}


def check_device_array(name: str, view: DeviceArray, dtype: str, shape: tuple[int, ...], device: int) -> None:
    """Refuse, naming the parameter, what the launch cannot take as it is."""
    if view.device != device:
        raise ArrayError(name, f"on GPU {view.device}, the other arrays on GPU {device}")
    if view.dtype != dtype:
        held = "an unsupported dtype" if view.dtype is None else view.dtype
        hint = " (cupy holds bf16 as uint16)" if dtype == "bf16" and not view.torch else ""
        raise ArrayError(name, f"the kernel expects {dtype}, got {held}{hint}")
    if view.shape != shape:
        raise ArrayError(name, f"expected shape {shape}, got {view.shape}")
    if not view.contiguous:
        raise ArrayError(name, "not C-contiguous; phobos never copies an argument")
    if view.ptr % ALIGNMENT:
        raise ArrayError(name, f"must start on a {ALIGNMENT}-byte boundary")


def check_host_array(name: str, array: np.ndarray, dtype: str) -> None:
    if array.dtype != HOST_DTYPES[dtype]:
        raise ArrayError(name, f"the kernel expects {dtype}, got an array of {array.dtype}")
