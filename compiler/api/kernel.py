"""`phobos.Kernel`: a checked kernel, called on numpy arrays (the interpreter) or GPU arrays.

A call takes the kernel's parameters positionally in declaration order or by name, infers every
dimension from the arrays' shapes, and writes the kernel's stores into the arrays it was given.
The GPU path, per (shapes, device), binds, tunes (or takes the pinned @autotune values), compiles
and loads once, under a lock; later calls only check the arrays and launch, on the current stream
of the arrays' device (torch's when a torch tensor is among them, else cupy's).
"""

from __future__ import annotations

import functools
import numbers
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from common.errors import ArrayError, Error, user_errors
from compiler.api import arrays as _arrays
from compiler.cuda.scalars import launch_scalar
from compiler.frontend import ir
from compiler.frontend.binding import Binding, bind
from compiler.frontend.walk import stored_tensors


@dataclass(frozen=True)
class _Launch:
    """What a GPU call needs once the arrays are checked: all fixed for (shapes, device)."""

    binding: Binding
    shapes: tuple[tuple[int, ...], ...]  # per tensor parameter, in declaration order
    device: int  # the GPU the function is loaded on, and the arrays are on
    function: object  # the loaded cupy function on its device
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    # per launch argument: (the tensor's index among the tensors, None), (the scalar's index among
    # all parameters, its dtype) or (the tensor's index, the tensor map it wants: MapSpec)
    order: tuple[tuple[int, object], ...]
    maps: bool = False  # it reads operands by bulk tensor copies: maps per call, cuLaunchKernel


_SCRATCH = "scratch"  # an argument slot of a split's launch: (index among the scratch, _SCRATCH)


@dataclass
class _Sequence:
    """A split loop's launches (compiler/cuda/mainloops/split_loop/launch.py) for (shapes, device): each part
    a _Launch whose `order` may also name scratch buffers, which each stream gets its own of (two streams'
    calls must not share partials)."""

    binding: Binding
    device: int
    parts: tuple[_Launch, ...]
    scratch: tuple  # schemas.compiled_leaf.Scratch
    buffers: dict  # stream pointer -> the scratch arrays


class _Stream:
    """The `.ptr` cupy's launch reads, for a stream that cupy does not own (torch's)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = ptr


class Kernel:
    """One checked kernel of a .phk source. Build it with `phobos.load` or `phobos.from_source`;
    `bind` returns a copy with dimensions or @autotune values pinned."""

    def __init__(self, kernel: ir.Kernel, file: str, text: str, *, dims: Mapping[str, int] | None = None,
                 tiles: Mapping[str, int] | None = None, autotune: bool = True, split: int | None = None):
        _check_split(split)
        self._ir = kernel
        self._split = split
        self._file = file
        self._text = text
        self._dims = dict(dims or {})
        self._tiles = dict(tiles or {})
        self._autotune = autotune
        self._params = tuple(p.name for p in kernel.params)
        self._tensor_types = {p.name: p.dtype for p in kernel.tensors}
        self._scalar_types = {p.name: p.dtype for p in kernel.scalars}
        self._tensor_indices = tuple(i for i, p in enumerate(kernel.params) if p.name in self._tensor_types)
        self._scalar_indices = tuple(i for i, p in enumerate(kernel.params) if p.name in self._scalar_types)
        self._launches: dict[tuple, _Launch] = {}
        self._bindings: dict[tuple, Binding] = {}
        self._lock = threading.Lock()

    # ---- what the kernel is ------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._ir.name

    @property
    def ir(self):
        """The checked kernel (compiler.frontend.ir.Kernel): a cluster job made of this kernel
        takes it rather than parsing the source again."""
        return self._ir

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

    @property
    def split(self) -> int | None:
        """The split-loop factor pinned by `bind(split=N)` (None: the cost model's on the GPU)."""
        return self._split

    def bind(self, *, dims: Mapping[str, int] | None = None, tiles: Mapping[str, int] | None = None,
             autotune: bool | None = None, split: int | None = None) -> Kernel:
        """A copy with `dims` and `tiles` (@autotune values) added to the pinned ones. With
        autotune=False, unpinned @autotune names take the first value of their list instead of
        being tuned (what `compiler run` does). `split=N` cuts the kernel's loop over N CTAs (the
        split-loop, docs/performance.md; 1: never split), a CompileError at the loop when its
        state is not associative; left out, the GPU path splits where the cost model says."""
        merged_dims = {**self._dims, **(dims or {})}
        merged_tiles = {**self._tiles, **(tiles or {})}
        if _all_dims(self._ir, merged_dims):  # check now what can be checked without arrays
            with user_errors():
                bind(self._ir, merged_dims, None, merged_tiles)
        split = self._split if split is None else split
        if split is not None and split > 1:
            from compiler.cuda.mainloops.split_loop import transform as split_loop

            with user_errors():
                split_loop.split_form(self._ir)  # a loop that cannot split is refused now, at it
        return Kernel(self._ir, self._file, self._text, dims=merged_dims, tiles=merged_tiles,
                      autotune=self._autotune if autotune is None else autotune, split=split)

    # ---- calling it ----------------------------------------------------------------------------

    def __call__(self, *args, **kwargs) -> None:
        """Run the kernel once over its whole grid; its stores land in the arrays given."""
        values = self._arguments(args, kwargs)
        for index in self._scalar_indices:
            value = values[index]
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                msg = f"scalar {self._params[index]} = {value!r} must be a number"
                raise Error(f"error: {msg}", msg)
        first = self._tensor_indices[0]
        if _arrays.on_gpu(self._params[first], values[first]):
            self._call_gpu(values)
        else:
            self._call_host(values)

    def _arguments(self, args: tuple, kwargs: dict) -> tuple:
        """Every parameter's value, in declaration order."""
        if not kwargs and len(args) == len(self._params):
            return args
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
        return tuple(values[n] for n in self._params)

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

    def _call_host(self, values: tuple) -> None:
        from compiler.interp.interpreter import run_kernel, scalar_arguments

        arrays = {}
        for index in self._tensor_indices:
            name = self._params[index]
            if _arrays.on_gpu(name, values[index]):
                first = self._params[self._tensor_indices[0]]
                raise _arrays.ArrayError(name, f"on a GPU while {first} is in host memory: give all "
                                               "arrays on one device")
            arrays[name] = _arrays.host_array(name, values[index], self._tensor_types[name])
            _arrays.check_host_array(name, arrays[name], self._tensor_types[name])
        scalars = {self._params[i]: values[i] for i in self._scalar_indices}
        shapes = {n: tuple(a.shape) for n, a in arrays.items()}
        key = tuple(shapes.values())
        binding = self._bindings.get(key)
        if binding is None:
            binding = self._bindings[key] = self._binding(shapes, self._tiles)
        with user_errors():
            scalars = scalar_arguments(self._ir, scalars)
            if self._split is not None and self._split > 1:  # the split's meaning, on the interpreter
                from compiler.cuda.mainloops.split_loop import plan as split_plan

                split = split_plan.plan_split(self._ir, binding, factor=self._split)
                split_plan.run_split_reference(split, arrays, scalars)
            else:
                run_kernel(self._ir, binding, arrays, scalars)

    # ---- GPU arrays: generated CUDA ------------------------------------------------------------

    def _call_gpu(self, values: tuple) -> None:
        """The hot path: check the arrays, find what (shapes, device) prepared, launch."""
        launch, args, stream = self._gpu_launch(values)
        cuda = _cupy_cuda()
        go = _launch_sequence if isinstance(launch, _Sequence) else _launch_with_maps if launch.maps \
            else _launch_plain
        if cuda.runtime.getDevice() == launch.device:
            go(launch, args, stream)
            return
        with cuda.Device(launch.device):  # the module is loaded in that device's context
            go(launch, args, stream)

    def _gpu_launch(self, values: tuple) -> tuple[_Launch, tuple, _Stream]:
        """Everything a GPU call does before the launch itself (benchmarks/api_call_overhead.py
        times it alone): the prepared launch, its arguments and the caller's stream."""
        views = [_arrays.device_array(self._params[i], values[i]) for i in self._tensor_indices]
        device = views[0].device
        torch = False
        for index, view in zip(self._tensor_indices, views, strict=True):
            name = self._params[index]
            _arrays.check_device_array(name, view, self._tensor_types[name], view.shape, device)
            torch = torch or view.torch
        key = (tuple([v.shape for v in views]), device)
        launch = self._launches.get(key)
        if launch is None:
            shapes = {self._params[i]: v.shape for i, v in zip(self._tensor_indices, views, strict=True)}
            launch = self._prepare_gpu(key, shapes, device)
        if isinstance(launch, _Sequence):
            return launch, (views, values, self._params), _current_stream(device, torch)
        if launch.maps:
            return launch, _map_args(launch, views, values, self._params), _current_stream(device, torch)
        args = [views[slot].ptr if dtype is None else launch_scalar(self._params[slot], values[slot], dtype)
                for slot, dtype in launch.order]
        return launch, tuple(args), _current_stream(device, torch)

    def _prepare_gpu(self, key: tuple, shapes: dict[str, tuple[int, ...]], device: int):
        from compiler.cuda import target
        from compiler.cuda.launch import load

        cupy = _arrays.cupy_module()

        with self._lock:
            launch = self._launches.get(key)
            if launch is not None:  # another thread prepared it meanwhile
                return launch
            with cupy.cuda.Device(device), user_errors():
                cc = target.device_capability(device)  # the PTX is for this GPU (target.py)
                binding, sequence = self._compiled(shapes, cc)
                parts = tuple(self._part(binding, key, device, load(k), k, sequence.scratch)
                              for k in sequence.kernels)
            # a one-kernel sequence with scratch (the split loop's one launch) still takes its buffers
            plain = len(parts) == 1 and not sequence.scratch
            launch = parts[0] if plain else _Sequence(binding, device, parts, sequence.scratch, {})
            self._launches[key] = launch
            return launch

    def _part(self, binding: Binding, key: tuple, device: int, function, compiled, scratch) -> _Launch:
        maps = {m.param: m for m in compiled.tensor_maps}
        where = {s.name: i for i, s in enumerate(scratch)}
        order = tuple((where[n], _SCRATCH) if n in where
                      else (self._slot(maps[n].tensor), maps[n]) if n in maps
                      else (self._slot(n), self._scalar_types.get(n)) for n in compiled.params)
        return _Launch(binding, key[0], device, function, compiled.grid, compiled.block,
                       compiled.shared_bytes, order, bool(maps))

    def prepare_gpu(self, shapes: Mapping[str, tuple[int, ...]], device: int = 0) -> None:
        """Bind, tune, compile and load for tensors of these `shapes` on `device` now, as the first
        call with such arrays would (a benchmark compiles its cases ahead, several at once)."""
        shapes = {n: tuple(shapes[n]) for n in self._tensor_types}
        self._prepare_gpu((tuple(shapes.values()), device), shapes, device)

    def _compiled(self, shapes: dict[str, tuple[int, ...]], cc: int):
        """(binding, split_launch.LaunchSequence) for these shapes on a GPU of capability `cc`: the
        tuned (or cached) tiles and schedule, the split-loop where the cost model says (its factor
        tuned around the model's, mainloops/split_loop/tune.py, unless autotune=False; or `split`), then the
        PTX (from the on-disk cache once any process has compiled it: a cached call runs neither the tuner nor
        NVRTC)."""
        from compiler.cuda.mainloops.split_loop import plan as split_plan
        from compiler.cuda.mainloops.split_loop import transform as split_loop
        from compiler.cuda.mainloops.split_loop import tune as split_tune
        from compiler.cuda.mainloops.split_loop.launch import compile_sequence

        binding = self._binding(shapes, self._tiles)
        with user_errors():
            tiles, schedule = self._tuned_tiles(binding, cc)
            binding = bind(self._ir, dict(binding.dims), shapes, tiles)
            sms = split_plan.device_sm_count()
            split = self._split
            if split is None and self._autotune and split_loop.why_not_split(self._ir) is None:
                split = split_tune.tune_factor(self._ir, binding, schedule=schedule, cc=cc, sm_count=sms)
            return binding, compile_sequence(self._ir, binding, schedule=schedule, cc=cc, split=split,
                                             sm_count=sms)

    def _slot(self, name: str) -> int:
        index = self._params.index(name)
        return self._tensor_indices.index(index) if name in self._tensor_types else index

    def _tuned_tiles(self, binding: Binding, cc: int):
        """The @autotune values for this binding: pinned, else tuned on the current GPU through
        the on-disk cache that `compiler cuda`/`ptx` share (compiler/cuda/tuning/autotune.py)."""
        from compiler.cuda.schedule import DEFAULT
        from compiler.cuda.tuning import autotune

        at = self._ir.autotune
        fixed = {**self._tiles, **{n: v for n, v in binding.dims.items() if n in binding.tile_values}}
        if at is None or not self._autotune or all(d.name in fixed for d in at.dims):
            return dict(binding.tile_values), DEFAULT
        points = [p for p in autotune.search_points(self._ir) if all(p[k] == v for k, v in fixed.items())]
        result = autotune.tune(self._ir, dict(binding.dims), points=points, cc=cc)
        return result.best, result.schedule


def _launch_plain(launch: _Launch, args: tuple, stream) -> None:
    launch.function(launch.grid, launch.block, args, shared_mem=launch.shared_bytes, stream=stream)


def _launch_with_maps(launch: _Launch, args: tuple, stream) -> None:
    from compiler.cuda.mainloops.tma_ws import maps as tensor_maps

    fn, shared = launch.function.ptr, launch.shared_bytes
    tensor_maps.launch(fn, launch.grid, launch.block, shared, stream.ptr, list(args))


def _launch_sequence(sequence: _Sequence, args: tuple, stream) -> None:
    """Each kernel of a split in order on the caller's stream, with that stream's scratch."""
    views, values, params = args
    buffers = sequence.buffers.get(stream.ptr)
    if buffers is None:
        cupy = _arrays.cupy_module()
        buffers = sequence.buffers[stream.ptr] = [
            (cupy.zeros if s.zeroed else cupy.empty)(s.shape, cupy.float32) for s in sequence.scratch]
    for part in sequence.parts:
        part_args = []
        for slot, kind in part.order:
            if kind == _SCRATCH:
                part_args.append(buffers[slot].data.ptr)
            elif kind is None:
                part_args.append(views[slot].ptr)
            elif isinstance(kind, str):
                part_args.append(launch_scalar(params[slot], values[slot], kind))
            else:  # a tensor map (tensor_maps.MapSpec), made by tensor_maps.launch when new
                part_args.append((kind, views[slot].ptr))
        (_launch_with_maps if part.maps else _launch_plain)(part, tuple(part_args), stream)


def _map_args(launch: _Launch, views, values: tuple, params) -> tuple:
    """The arguments of a kernel with tensor maps: each map as (spec, this call's address), which
    tensor_maps.launch makes into a map only for an address it has not kept one for."""
    from compiler.cuda.mainloops.tma_ws import maps as tensor_maps

    args = []
    for slot, kind in launch.order:
        if kind is None:
            args.append(views[slot].ptr)
        elif isinstance(kind, tensor_maps.MapSpec):  # made by tensor_maps.launch when new
            args.append((kind, views[slot].ptr))
        else:
            args.append(launch_scalar(params[slot], values[slot], kind))
    return tuple(args)


_streams: dict[int, _Stream] = {}


def _current_stream(device: int, torch: bool) -> _Stream:
    """The caller's current stream on `device`: torch's when torch tensors are passed, else cupy's."""
    if torch:
        ptr = _torch_cuda().current_stream(device).cuda_stream
    else:
        cuda = _cupy_cuda()
        if cuda.runtime.getDevice() == device:
            ptr = cuda.get_current_stream().ptr
        else:
            with cuda.Device(device):
                ptr = cuda.get_current_stream().ptr
    stream = _streams.get(ptr)
    if stream is None:
        stream = _streams[ptr] = _Stream(ptr)
    return stream


@functools.cache
def _cupy_cuda():
    """cupy.cuda, imported once: an import statement in the hot path costs a lookup per call."""
    return _arrays.cupy_module().cuda


@functools.cache
def _torch_cuda():
    import torch

    return torch.cuda


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


def _check_split(split) -> None:
    if split is not None and (isinstance(split, bool) or not isinstance(split, int) or split < 1):
        msg = f"split={split!r} must be a whole number of CTAs, 1 or more"
        raise Error(f"error: {msg}", msg)
