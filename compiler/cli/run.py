"""`//compiler -- run`: run a kernel on .npy files, with the reference interpreter or on a GPU.

    run FILE.phk [--kernel NAME] --dim N=... --scalar alpha=... --tensor a=in.npy ...
        [--tile BLOCK=...] [--device cpu|gpu] [--split N]

--split N cuts the kernel's loop over N CTAs (the split-loop, docs/performance.md); 1 never splits;
left out, the GPU path splits where the cost model says. A loop whose state is not associative is
refused at the loop (file:line:col). On the CPU a forced split runs both of its kernels on the
reference interpreter.

Inputs are memory-mapped; tensors the kernel stores to are read into memory (or created with
zeros when their file does not exist yet) and written back only after the whole run succeeded,
each through a temporary file and os.replace, so a failed run leaves every file as it was, and a
run killed at any moment (kill -9 included) leaves each output whole: old, new, or not yet there.
A killed run may leave its hidden temporary file (`.c.npy.XXXX.tmp`) beside the output.
Test-only fault hook: PHOBOS_RUN_FAULT=stop-at=piece:N SIGSTOPs the process as it starts the N-th
write of at most PIECE_BYTES (the first output's .npy header is piece 1) to a temporary file,
PHOBOS_RUN_FAULT=stop-at=rename:N as it starts the N-th rename (tests/compiler/test_run_killed.py).
bf16 tensors are .npy files of ml_dtypes.bfloat16, written with a header numpy reads back as
bf16 once ml_dtypes is imported (common.storage.write_npy).
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from common import options
from common.atomic import refuse_read_only
from common.cli import user_path
from common.errors import UserError
from common.fault_points import FaultPoints
from common.storage import read_npy, write_npy
from compiler.cli.args import (
    add_cta_split_flag,
    add_kernel_flag,
    add_value_flags,
    cta_split,
    parse_assignments,
    parse_scalars,
)
from compiler.frontend import ir
from compiler.frontend.binding import Binding, bind, dims_from_files, tensor_shape
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.walk import first_old_value_read
from compiler.interp.interpreter import scalar_arguments, stored_tensors
from compiler.interp.values import STORAGE_DTYPES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("run", help="run a kernel on .npy tensors (reference interpreter or GPU)")
    p.add_argument("file", help="kernel source (.phk)")
    add_kernel_flag(p)
    p.add_argument("--dim", action="append", metavar="NAME=N", help="a dimension value")
    p.add_argument("--scalar", action="append", metavar="NAME=V", help="a scalar argument")
    p.add_argument("--tensor", action="append", metavar="NAME=FILE.npy",
                   help="a tensor's .npy file; outputs are created when missing")
    add_value_flags(p, cluster=False)
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                   help="cpu: the reference interpreter (default); gpu: CUDA through cupy")
    add_cta_split_flag(p)
    p.set_defaults(func=handle)


def _read_npy(name: str, path: Path, expected: np.dtype, writable: bool) -> np.ndarray:
    try:
        array = read_npy(path, writable=writable)
    except UserError as err:
        raise UserError(f"tensor {name}: {err}") from None
    if array.dtype != expected:
        raise UserError(f"tensor {name}: {path} holds {array.dtype}, the kernel expects {expected.name}")
    return array


def load_tensors(kernel: ir.Kernel, paths: dict[str, str],
                 env: Mapping[str, int]) -> tuple[dict[str, np.ndarray], dict[str, Path]]:
    """Read every tensor (outputs into writable memory) and say where each output goes."""
    params = {t.name: t for t in kernel.tensors}
    for name in paths:
        if name not in params:
            raise UserError(f"kernel {kernel.name} has no tensor {name} (it has: {', '.join(params)})")
    outputs = stored_tensors(kernel.body)
    arrays: dict[str, np.ndarray] = {}
    targets: dict[str, Path] = {}
    for name, param in params.items():
        if name not in paths:
            raise UserError(f"missing tensor {name}: give --tensor {name}=FILE.npy")
        path = user_path(paths[name])
        expected = STORAGE_DTYPES[param.dtype]
        if name in outputs:
            targets[name] = path
            if not path.parent.is_dir():
                raise UserError(f"tensor {name}: folder {path.parent} does not exist")
            refuse_read_only(path, f"tensor {name}")
            if not path.exists():
                require_creatable(kernel, name, path)
                arrays[name] = np.zeros(tensor_shape(param, env), dtype=expected)
                continue
        elif not path.exists():
            raise UserError(f"tensor {name}: no such file {path}")
        arrays[name] = _read_npy(name, path, expected, writable=name in outputs)
    return arrays, targets


def existing_shapes(paths: dict[str, str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """The shape of every tensor file that exists and has a readable header, for dims left out
    (a file that cannot be read is reported when it is loaded)."""
    from common.storage import npy_shape

    shapes = {}
    for name, p in paths.items():
        try:
            shapes[name] = (npy_shape(user_path(p)), p)
        except UserError:
            continue
    return shapes


def require_creatable(kernel: ir.Kernel, name: str, path: Path) -> None:
    """A missing output is created, unless the kernel reads its old values first: then the
    error points at the line that reads them."""
    span = first_old_value_read(kernel, name)
    if span is not None:
        raise CompileError(span, f"tensor {name}: {path} does not exist, and the kernel reads its old "
                                 "values here before writing them; create the file first")


FAULT_ENV = options.RUN_FAULT
PIECE_BYTES = 1 << 20
# PHOBOS_RUN_FAULT=stop-at=piece:N|rename:N stops the command there (tests/compiler/test_run_killed.py)
_fault_point = FaultPoints(lambda: options.current().run_fault, "stop-at", signal.SIGSTOP)


class _Pieces:
    """A file that takes each write in pieces of at most PIECE_BYTES, flushed as they go, with the
    fault point before each: a test can stop the command with a temporary file half written."""

    def __init__(self, f):
        self.f = f

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        for at in range(0, max(len(view), 1), PIECE_BYTES):
            _fault_point("piece")
            self.f.write(view[at : at + PIECE_BYTES])
            self.f.flush()


def write_outputs(results: dict[str, np.ndarray], targets: dict[str, Path]) -> None:
    """Write every output to a temporary file first, then move them all into place."""
    staged: list[tuple[Path, Path]] = []
    try:
        for name, path in targets.items():
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            staged.append((Path(tmp), path))
            with os.fdopen(fd, "wb") as f:
                write_npy(_Pieces(f), results[name])
        for tmp, path in staged:
            _fault_point("rename")
            os.replace(tmp, path)
    except OSError as err:
        raise UserError(f"cannot write outputs: {err}") from None
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)


def _require_gpu() -> None:
    """A one-line user error when this machine cannot run `--device gpu` at all."""
    try:
        import cupy
    except ImportError:
        raise UserError("--device gpu needs cupy, which is not installed here") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as err:  # cupy raises its own CUDA runtime errors when there is no driver
        raise UserError(f"--device gpu: no usable NVIDIA GPU ({err})") from None
    if count < 1:
        raise UserError("--device gpu: no NVIDIA GPU is visible")


def execute(kernel: ir.Kernel, binding: Binding, arrays: dict[str, np.ndarray], scalars: dict,
            device: str, split: int | None = None) -> dict[str, np.ndarray]:
    """Run through the Python API (phobos.Kernel), with the tile values already bound (the first
    of each @autotune list unless --tile pins them: the command line does not tune)."""
    from compiler.api.kernel import Kernel

    api_kernel = Kernel(kernel, kernel.span.file, kernel.source, tiles=dict(binding.tile_values),
                        autotune=False).bind(split=split)
    if device == "cpu":
        api_kernel(**arrays, **scalars)
        return arrays
    return _execute_gpu(api_kernel, arrays, scalars)


def _execute_gpu(api_kernel, arrays: dict[str, np.ndarray], scalars: dict) -> dict[str, np.ndarray]:
    """Copy the host arrays to the current GPU, call the kernel there, copy its outputs back."""
    import cupy

    bf16 = STORAGE_DTYPES["bf16"]
    device = {n: cupy.asarray(a.view(np.uint16) if a.dtype == bf16 else np.ascontiguousarray(a))
              for n, a in arrays.items()}
    api_kernel(**device, **scalars)
    cupy.cuda.get_current_stream().synchronize()
    return {n: cupy.asnumpy(device[n]).view(arrays[n].dtype) for n in api_kernel.outputs}


def handle(args: argparse.Namespace) -> int:
    from compiler.frontend.load import load_file, select_kernel

    dims = parse_assignments(args.dim, "--dim", int)
    tiles = parse_assignments(args.tile, "--tile", int)
    scalars = parse_scalars(args.scalar)
    paths = parse_assignments(args.tensor, "--tensor", None)
    if args.device == "gpu":
        _require_gpu()
    split = cta_split(args)
    kernel = select_kernel(load_file(user_path(args.file)), args.kernel)
    if split is not None and split > 1:
        from compiler.cuda.mainloops.split_loop.transform import split_form

        split_form(kernel)  # refused before any file is read, at the loop, saying why
    dims = dims_from_files(kernel, dims, existing_shapes(paths))
    binding = bind(kernel, dims, None, tiles)
    scalar_values = scalar_arguments(kernel, scalars)
    arrays, targets = load_tensors(kernel, paths, binding.env)
    bind(kernel, dims, {n: a.shape for n, a in arrays.items()}, tiles)
    results = execute(kernel, binding, arrays, scalar_values, args.device, split)
    write_outputs({n: np.asarray(results[n]) for n in targets}, targets)
    for name, path in targets.items():
        print(f"wrote {name} {tuple(results[name].shape)} to {path}")
    return 0
