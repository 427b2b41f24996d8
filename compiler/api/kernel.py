"""`phobos.Kernel`: a checked kernel, called on numpy arrays (the interpreter) or GPU arrays.

A call takes the kernel's parameters positionally in declaration order or by name, infers every
dimension from the arrays' shapes, and writes the kernel's stores into the arrays it was given.
The GPU path, per (shapes, device), binds, tunes (or takes the pinned @autotune values), compiles
and loads once, under a lock; later calls only check the arrays and launch, on the current stream
of the arrays' device (torch's when a torch tensor is among them, else cupy's).
"""

from __future__ import annotations

import numbers
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import ArrayError, Error, user_errors
from compiler.api import arrays as _arrays
from compiler.frontend import ir
from compiler.frontend.binding import Binding, bind
from compiler.frontend.walk import stored_tensors


@dataclass(frozen=True)
class _Launch:
    """What a GPU call needs once the arrays are checked: all fixed for (shapes, device)."""

    binding: Binding
    shapes: tuple[tuple[int, ...], ...]  # per tensor parameter, in declaration order
    function: object  # the loaded cupy function on its device
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    order: tuple[tuple[str, str | None], ...]  # (parameter, scalar dtype or None for a tensor)


class _Stream:
    """The `.ptr` cupy's launch reads, for a stream that cupy does not own (torch's)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class Kernel:
    """One checked kernel of a .phk source. Build it with `phobos.load` or `phobos.from_source`;
    `bind` returns a copy with dimensions or @autotune values pinned."""

    def __init__(self, kernel: ir.Kernel, file: str, text: str, *, dims: Mapping[str, int] | None = None,
                 tiles: Mapping[str, int] | None = None, autotune: bool = True):
        self._ir = kernel
        self._file = file
        self._text = text
        self._dims = dict(dims or {})
        self._tiles = dict(tiles or {})
        self._autotune = autotune
        self._params = tuple(p.name for p in kernel.params)
        self._tensor_types = {p.name: p.dtype for p in kernel.tensors}
        self._scalar_types = {p.name: p.dtype for p in kernel.scalars}
        self._launches: dict[tuple, _Launch] = {}
        self._bindings: dict[tuple, Binding] = {}
        self._lock = threading.Lock()

    # ---- what the kernel is ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._ir.name

    @property
    def file(self) -> str:
        """The file name errors show (`<string>` for source given as text)."""
        return self._file

    @property
    def source(self) -> str:
        """The whole text of the source the kernel was loaded from."""
        return self._text

    @property
    def parameters(self) -> tuple[str, ...]:
        return self._params

    @property
    def tensors(self) -> dict[str, str]:
        """Tensor parameters and their element types (f32, f16, bf16, i32), in order."""
        return dict(self._tensor_types)

    @property
    def scalars(self) -> dict[str, str]:
        return dict(self._scalar_types)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The tensors the kernel stores to (written in place by a call)."""
        written = stored_tensors(self._ir)
        return tuple(n for n in self._tensor_types if n in written)

    @property
    def dims(self) -> dict[str, int]:
        """The dimension values pinned by `bind` (the others come from the arrays)."""
        return dict(self._dims)

    @property
    def tiles(self) -> dict[str, int]:
        """The @autotune values pinned by `bind` (the others are tuned on the GPU)."""
        return dict(self._tiles)

    def __repr__(self) -> str:
        return f"<phobos.Kernel {self.name}({', '.join(self._params)}) from {self._file}>"

    def bind(self, *, dims: Mapping[str, int] | None = None, tiles: Mapping[str, int] | None = None,
             autotune: bool | None = None) -> Kernel:
        """A copy with `dims` and `tiles` (@autotune values) added to the pinned ones. With
        autotune=False, unpinned @autotune names take the first value of their list instead of
        being tuned (what `compiler run` does)."""
        merged_dims = {**self._dims, **(dims or {})}
        merged_tiles = {**self._tiles, **(tiles or {})}
        if _all_dims(self._ir, merged_dims):  # check now what can be checked without arrays
            with user_errors():
                bind(self._ir, merged_dims, None, merged_tiles)
        return Kernel(self._ir, self._file, self._text, dims=merged_dims, tiles=merged_tiles,
                      autotune=self._autotune if autotune is None else autotune)

    # ---- calling it ----------------------------------------------------------------------------

    def __call__(self, *args, **kwargs) -> None:
        """Run the kernel once over its whole grid; its stores land in the arrays given."""
        values = self._arguments(args, kwargs)
        for name in self._scalar_types:
            value = values[name]
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                msg = f"scalar {name} = {value!r} must be a number"
                raise Error(f"error: {msg}", msg)
        tensors = {n: values[n] for n in self._tensor_types}
        where = {n: _arrays.on_gpu(n, t) for n, t in tensors.items()}
        if all(where.values()):
            self._call_gpu(tensors, {n: values[n] for n in self._scalar_types})
        elif not any(where.values()):
            self._call_host(tensors, {n: values[n] for n in self._scalar_types})
        else:
            gpu = next(n for n, g in where.items() if g)
            host = next(n for n, g in where.items() if not g)
            raise ArrayError(host, f"in host memory while {gpu} is on a GPU: give all arrays on one device")

    def _arguments(self, args: tuple, kwargs: dict) -> dict:
        if len(args) > len(self._params):
            raise Error(f"error: kernel {self.name} takes {len(self._params)} arguments "
                        f"({', '.join(self._params)}), got {len(args)}", "too many arguments")
        values = dict(zip(self._params, args, strict=False))
        for name, value in kwargs.items():
            if name not in self._tensor_types and name not in self._scalar_types:
                msg = f"kernel {self.name} has no parameter {name} (it has: {', '.join(self._params)})"
                raise Error(f"error: {msg}", msg)
            if name in values:
                msg = f"parameter {name} given twice (by position and by name)"
                raise Error(f"error: {msg}", msg)
            values[name] = value
        missing = [n for n in self._params if n not in values]
        if missing:
            msg = f"kernel {self.name}: missing argument(s) {', '.join(missing)}"
            raise Error(f"error: {msg}", msg)
        return values

    def _binding(self, shapes: dict[str, tuple[int, ...]], tiles: Mapping[str, int]) -> Binding:
        dims = self._infer_dims(shapes)
        with user_errors():
            return bind(self._ir, dims, shapes, tiles)

    def _infer_dims(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
        """Every dimension from the arrays' shapes, checked against the pinned ones and each other."""
        dims = dict(self._dims)
        origin = dict.fromkeys(self._dims, "bind(dims=...)")
        for p in self._ir.tensors:
            shape = shapes[p.name]
            if len(shape) != len(p.dims):
                declared = ", ".join(str(d) for d in p.dims)
                raise ArrayError(p.name, f"expected {len(p.dims)} dimensions [{declared}], got shape {shape}")
            for d, n in zip(p.dims, shape, strict=True):
                if not isinstance(d, str):
                    continue
                if d in dims and dims[d] != n:
                    raise ArrayError(p.name, f"shape {shape} makes {d} = {n}, but {d} = {dims[d]} "
                                             f"from {origin[d]}")
                dims.setdefault(d, n)
                origin.setdefault(d, f"tensor {p.name}")
        return dims

    # ---- numpy arrays: the reference interpreter ------------------------------------------------

    def _call_host(self, tensors: dict, scalars: dict) -> None:
        from compiler.interp.interpreter import run_kernel, scalar_arguments

        arrays = {n: _arrays.host_array(n, t, self._tensor_types[n]) for n, t in tensors.items()}
        for name, array in arrays.items():
            _arrays.check_host_array(name, array, self._tensor_types[name])
        shapes = {n: tuple(a.shape) for n, a in arrays.items()}
        key = tuple(shapes.values())
        binding = self._bindings.get(key)
        if binding is None:
            binding = self._bindings[key] = self._binding(shapes, self._tiles)
        with user_errors():
            run_kernel(self._ir, binding, arrays, scalar_arguments(self._ir, scalars))

    # ---- GPU arrays: generated CUDA ------------------------------------------------------------

    def _call_gpu(self, tensors: dict, scalars: dict) -> None:
        views = {n: _arrays.device_array(t) for n, t in tensors.items()}
        device = next(iter(views.values())).device
        for name, view in views.items():
            _arrays.check_device_array(name, view, self._tensor_types[name], view.shape, device)
        key = (tuple(v.shape for v in views.values()), device)
        launch = self._launches.get(key)
        if launch is None:
            launch = self._prepare_gpu(key, {n: v.shape for n, v in views.items()}, device)
        args = []
        for name, scalar_type in launch.order:
            if scalar_type is None:
                args.append(views[name].ptr)
            else:
                args.append(_scalar(name, scalars[name], scalar_type))
        stream = _current_stream(device, any(v.torch for v in views.values()))
        launch.function(launch.grid, launch.block, tuple(args), shared_mem=launch.shared_bytes, stream=stream)

    def _prepare_gpu(self, key: tuple, shapes: dict[str, tuple[int, ...]], device: int) -> _Launch:
        import cupy

        from compiler.cuda import compile_kernel
        from compiler.cuda.launch import load

        with self._lock:
            launch = self._launches.get(key)
            if launch is not None:  # another thread prepared it meanwhile
                return launch
            binding = self._binding(shapes, self._tiles)
            with cupy.cuda.Device(device), user_errors():
                tiles, schedule = self._tuned_tiles(binding)
                binding = bind(self._ir, dict(binding.dims), shapes, tiles)
                compiled = compile_kernel(self._ir, binding, schedule=schedule)
                function = load(compiled)
            order = tuple((n, self._scalar_types.get(n)) for n in compiled.params)
            launch = _Launch(binding, key[0], function, compiled.grid, compiled.block,
                             compiled.shared_bytes, order)
            self._launches[key] = launch
            return launch

    def _tuned_tiles(self, binding: Binding):
        """The @autotune values for this binding: pinned, else tuned on the current GPU through
        the on-disk cache that `compiler cuda`/`ptx` share (compiler/cuda/autotune.py)."""
        from compiler.cuda import autotune
        from compiler.cuda.schedule import DEFAULT

        at = self._ir.autotune
        fixed = {**self._tiles, **{n: v for n, v in binding.dims.items() if n in binding.tile_values}}
        if at is None or not self._autotune or all(d.name in fixed for d in at.dims):
            return dict(binding.tile_values), DEFAULT
        points = [p for p in autotune.search_points(self._ir) if all(p[k] == v for k, v in fixed.items())]
        result = autotune.tune(self._ir, dict(binding.dims), points=points)
        return result.best, result.schedule


def _scalar(name: str, value, dtype: str):
    if dtype == "f32":
        return np.float32(value)
    if isinstance(value, bool) or int(value) != value:
        msg = f"scalar {name} = {value} must be an integer (it is i32)"
        raise Error(f"error: {msg}", msg)
    return np.int32(value)


_streams: dict[int, _Stream] = {}


def _current_stream(device: int, torch: bool) -> _Stream:
    """The caller's current stream on `device`: torch's when torch tensors are passed, else cupy's."""
    if torch:
        import torch as _torch

        ptr = _torch.cuda.current_stream(device).cuda_stream
    else:
        import cupy

        if cupy.cuda.runtime.getDevice() == device:
            ptr = cupy.cuda.get_current_stream().ptr
        else:
            with cupy.cuda.Device(device):
                ptr = cupy.cuda.get_current_stream().ptr
    stream = _streams.get(ptr)
    if stream is None:
        stream = _streams[ptr] = _Stream(ptr)
    return stream


def _all_dims(kernel: ir.Kernel, dims: Mapping[str, int]) -> bool:
    from compiler.frontend.binding import kernel_dims

    at = kernel.autotune
    fixed = {d.name for d in at.dims} if at else set()
    return all(d in dims or d in fixed for d in kernel_dims(kernel))


def load(path: str | os.PathLike, kernel: str | None = None) -> Kernel:
    """The kernel named `kernel` (or the only one) of the .phk file at `path`, parsed and checked."""
    from compiler.frontend.load import load_file, select_kernel

    with user_errors():
        module = load_file(Path(path), str(path))
        return Kernel(select_kernel(module, kernel, flag="kernel="), module.file, module.text)


def from_source(text: str, kernel: str | None = None, filename: str = "<string>") -> Kernel:
    """The same as `load`, for source text; errors name `filename`."""
    from compiler.frontend.load import load_text, select_kernel

    with user_errors():
        module = load_text(text, filename)
        return Kernel(select_kernel(module, kernel, flag="kernel="), module.file, module.text)
