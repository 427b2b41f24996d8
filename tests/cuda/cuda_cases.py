"""Shared helpers of the CUDA tests: example kernels, their search spaces, random inputs."""

from __future__ import annotations

import itertools
from pathlib import Path

import ml_dtypes
import numpy as np

from compiler.cuda import unlowered
from compiler.frontend import binding, ir
from compiler.frontend import load as frontend
from compiler.frontend.diagnostics import CompileError

STORAGE = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ir.Kernel:
    return frontend.load_file(EXAMPLES / name).kernel()


def example_names() -> list[str]:
    """The examples the generator compiles; those it refuses for now (compiler/cuda/unlowered.py,
    tested in test_cuda_unlowered.py) join this list as soon as it lowers them."""
    return sorted(p.name for p in EXAMPLES.glob("*.phk") if not refused_example(p.name))


def refused_example(name: str) -> bool:
    try:
        unlowered.refuse_unlowered(load_example(name))
    except CompileError:
        return True
    return False


def free_dims(kernel: ir.Kernel) -> list[str]:
    fixed = {d.name for d in kernel.autotune.dims} if kernel.autotune else set()
    return [d for d in binding.kernel_dims(kernel) if d not in fixed]


def all_points(kernel: ir.Kernel) -> list[dict[str, int]]:
    if kernel.autotune is None:
        return [{}]
    names = [d.name for d in kernel.autotune.dims]
    return [
        dict(zip(names, v, strict=True)) for v in itertools.product(*(d.values for d in kernel.autotune.dims))
    ]


def random_inputs(kernel: ir.Kernel, env: dict[str, int], rng: np.random.Generator):
    arrays = {}
    for p in kernel.tensors:
        shape = tuple(d if isinstance(d, int) else env[d] for d in p.dims)
        arrays[p.name] = rng.standard_normal(shape).astype(STORAGE.get(p.dtype, np.float32))
    scalars = {p.name: float(rng.uniform(0.2, 1.5)) for p in kernel.scalars}
    return arrays, scalars
