"""Shared helpers of the CUDA tests: example kernels, their search spaces, random inputs."""

from __future__ import annotations

import itertools
from pathlib import Path

import ml_dtypes
import numpy as np

from compiler.frontend import binding, ir
from compiler.frontend import load as frontend

STORAGE = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ir.Kernel:
    return frontend.load_file(EXAMPLES / name).kernel()


def example_names() -> list[str]:
    return sorted(p.name for p in EXAMPLES.glob("*.phk"))


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
