"""Host side of the bulk tensor copies (TMA, compiler/cuda/mainloops/tma_ws/ring.py): one tensor map per
operand, built for the array of each launch and passed by value as a `__grid_constant__` parameter.

A tensor map describes a row-major 2-D tensor (its pointer, shape and row pitch), or a row-major
tensor of higher rank whose leading axes a copy indexes one position at a time (attention's
[H, N, D] operands: a 3-D map, so that a box at the end of one head's rows is zero-filled rather
than read from the next head), and the box one copy moves (box_rows x box_cols elements,
box_cols elements = 128 bytes with the 128-byte swizzle, the layout wgmma reads); elements
outside the tensor arrive as zeros. The driver builds it
(cuTensorMapEncodeTiled, called through ctypes on the libcuda that cupy already loaded), and a
kernel with such a parameter is launched by cuLaunchKernel directly, since the 128-byte map is
passed by value. The leaf launch interface (compiler.cuda.launch) is unchanged: callers pass
arrays and scalars, and the maps are made from the arrays.

A launch's host time counts in what a caller measures of a short kernel (a CUDA event recorded
before the launch on an idle GPU), so the maps and the packed argument block are kept: a map
depends only on its spec and the array's address (an address reused by a new array of the same
shape gets the same, still valid, map), and cuLaunchKernel copies the parameters at the launch,
so one packed block serves every launch with the same arguments.
"""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

MAP_BYTES = 128
# CUtensorMapDataType: (code, bytes per element). TFLOAT32 copies f32 elements and rounds each to
# TF32 (to nearest, ties to even) on the way into shared memory, as the language's TF32 dots
# round their operands (measured on the H200, mainloops/tma_ws/tf32.py)
DATA_TYPES = {"u8": (0, 1), "u16": (1, 2), "f32": (7, 4), "tf32": (11, 4)}  # u8: fp8 bytes
_INTERLEAVE_NONE, _SWIZZLE_128B, _L2_256B, _OOB_ZERO = 0, 3, 3, 0
KEPT = 256  # maps and packed argument blocks kept, most recently used first


class _Kept:
    """A small most-recently-used table, shared by the launching threads."""

    def __init__(self) -> None:
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key, make):
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
                return value
        value = make()
        with self._lock:
            self._items[key] = value
            while len(self._items) > KEPT:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


_MAPS, _PACKED = _Kept(), _Kept()


@dataclass(frozen=True)
class MapSpec:
    """The map a kernel parameter `param` wants of tensor `tensor`, a row-major [*outer, rows,
    cols] of `dtype` elements (DATA_TYPES: bytes (fp8), 16-bit, f32, or f32 rounded to TF32 by the copy);
    the leaf's bound shape: any buffer of that many elements will do. The box spans one
    position of each outer axis."""

    param: str
    tensor: str
    box_rows: int
    box_cols: int
    rows: int
    cols: int
    dtype: str = "u16"
    outer: tuple[int, ...] = ()  # leading axes, outermost first

    @property
    def elem_bytes(self) -> int:
        return DATA_TYPES[self.dtype][1]

    @property
    def rank(self) -> int:
        return 2 + len(self.outer)

    @property
    def elements(self) -> int:
        n = self.rows * self.cols
        for d in self.outer:
            n *= d
        return n


@lru_cache(maxsize=1)
def _driver() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
    lib.cuTensorMapEncodeTiled.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_uint32,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.POINTER(ctypes.c_uint32),
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
    ]
    lib.cuLaunchKernel.restype = ctypes.c_int
    lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    return lib


class TensorMap(ctypes.Structure):
    _fields_ = [("raw", ctypes.c_uint8 * (MAP_BYTES + 64))]  # 64-byte aligned inside

    def address(self) -> int:
        return (ctypes.addressof(self) + 63) & ~63


def geometry(spec: MapSpec) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(sizes, byte strides of every axis past the first, box), innermost axis first, as
    cuTensorMapEncodeTiled takes them."""
    sizes = (spec.cols, spec.rows, *reversed(spec.outer))
    strides, pitch = [], spec.elem_bytes
    for n in sizes[:-1]:
        pitch *= n
        strides.append(pitch)
    return sizes, tuple(strides), (spec.box_cols, spec.box_rows, *([1] * len(spec.outer)))


def encode(spec: MapSpec, ptr: int) -> TensorMap:
    """The map of the spec's tensor at device address `ptr` (made once, then kept)."""
    return _MAPS.get((spec, ptr), lambda: _encode(spec, ptr))


def _encode(spec: MapSpec, ptr: int) -> TensorMap:
    m = TensorMap()
    rank = spec.rank
    sizes, strides, boxes = geometry(spec)
    dims = (ctypes.c_uint64 * rank)(*sizes)
    pitches = (ctypes.c_uint64 * (rank - 1))(*strides)
    box = (ctypes.c_uint32 * rank)(*boxes)
    ones = (ctypes.c_uint32 * rank)(*([1] * rank))
    kind = DATA_TYPES[spec.dtype][0]
    modes = (_INTERLEAVE_NONE, _SWIZZLE_128B, _L2_256B, _OOB_ZERO)
    err = _driver().cuTensorMapEncodeTiled(m.address(), kind, rank, ptr, dims, pitches, box, ones, *modes)
    if err:
        raise RuntimeError(f"cuTensorMapEncodeTiled({spec}, {sizes[::-1]}) failed: CUresult {err}")
    return m


def launch(fn_ptr: int, grid, block, shared: int, stream_ptr: int, args: list) -> None:
    """cuLaunchKernel with `args` in parameter order: device pointers (ints), np.float32 /
    np.int32 scalars, or (MapSpec, device pointer) for a tensor map, made from them only when
    no launch of this function has had the same arguments (the packed block is kept)."""
    # a scalar by its bytes: -0.0 is not 0.0, and a NaN would not equal itself
    key = (fn_ptr, *[a.tobytes() if isinstance(a, np.generic) else a for a in args])
    held, slots = _PACKED.get(key, lambda: _pack(args))
    err = _driver().cuLaunchKernel(fn_ptr, *grid, *block, shared, stream_ptr, slots, None)
    if err:
        raise RuntimeError(f"cuLaunchKernel failed: CUresult {err}")


def _pack(args: list) -> tuple[list, ctypes.Array]:
    """(the values, alive as long as the block; the block of their addresses)."""
    held = []
    for a in args:
        if isinstance(a, tuple):
            held.append(encode(*a))
        elif isinstance(a, np.float32):
            held.append(ctypes.c_float(float(a)))
        elif isinstance(a, np.int32):
            held.append(ctypes.c_int32(int(a)))
        else:
            held.append(ctypes.c_uint64(int(a)))
    addresses = [h.address() if isinstance(h, TensorMap) else ctypes.addressof(h) for h in held]
    return held, (ctypes.c_void_p * len(held))(*addresses)
