"""Thread count of numpy's BLAS for the interpreter's many small GEMMs.

A tiled kernel's `dot` inside a loop becomes one GEMM per iteration, often thin (K = TILE_K = 4
in the seed matmul). OpenBLAS splits even those over all its threads, and its threads spin while
they wait: on a busy 2-core machine that made the seed matmul 30x slower than with one thread.
So GEMMs below a size threshold run on one BLAS thread; large ones keep every thread.

numpy does not expose the setting; OpenBLAS does, through `openblas_set_num_threads` (named
`scipy_openblas_set_num_threads64_` in the wheels' bundled copy). When no such symbol can be
found the interpreter simply runs with whatever threading BLAS has: only speed depends on this.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Callable, Iterator

import numpy as np

# Multiply-adds below which one thread beats OpenBLAS's threading (measured: a 1024x4x1024
# product, 4M multiply-adds, is several times faster on one thread when the machine is busy).
SINGLE_THREAD_BELOW = 1 << 25

_SYMBOLS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")
_GET_SYMBOLS = tuple(s.replace("set_", "get_") for s in _SYMBOLS)


def _find() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    candidates = [None]  # the process's own symbols first
    libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    candidates += sorted(glob.glob(os.path.join(libs, "*openblas*")))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for set_name, get_name in zip(_SYMBOLS, _GET_SYMBOLS, strict=True):
            setter, getter = getattr(lib, set_name, None), getattr(lib, get_name, None)
            if setter is not None and getter is not None:
                getter.restype = ctypes.c_int
                return (lambda n, f=setter: f(ctypes.c_int(n))), getter
    return None


_CONTROL = _find()


@contextlib.contextmanager
def threads_for(multiply_adds: int) -> Iterator[None]:
    """Run the body with one BLAS thread when the product is small, else leave BLAS alone."""
    if _CONTROL is None or multiply_adds >= SINGLE_THREAD_BELOW:
        yield
        return
    set_threads, get_threads = _CONTROL
    before = get_threads()
    if before <= 1:
        yield
        return
    set_threads(1)
    try:
        yield
    finally:
        set_threads(before)
