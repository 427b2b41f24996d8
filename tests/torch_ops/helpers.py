"""The torch tests' kernels, operator names and float64 reference (examples/torch/linear_gelu.phk)."""

from __future__ import annotations

import itertools

import phobos
from common.paths import repo_file
from tests.torch_ops.torch_needed import pt, torch

SOURCE = repo_file("examples/torch/linear_gelu.phk").read_text()
BACKWARD = ("linear_gelu_dz", "linear_gelu_dx", "linear_gelu_dw", "linear_gelu_db")
_names = itertools.count()


def unique(prefix: str = "op") -> str:
    """A fresh 'namespace::name': torch's registry is process-wide, one name per test."""
    return f"phobos_test::{prefix}_{next(_names)}"


def kernel(name: str, dtype: str = "f32") -> phobos.Kernel:
    """A kernel of the example; bf16: the same source with bf16 tensors (f32 accumulation)."""
    text = SOURCE if dtype == "f32" else SOURCE.replace("tensor<f32>", f"tensor<{dtype}>")
    return phobos.from_source(text, kernel=name, filename=f"linear_gelu_{dtype}.phk")


def linear_gelu(dtype: str = "f32", backward: bool = True) -> pt.Op:
    """The forward op, with its four backward ops when `backward`."""
    steps = [pt.op(kernel(n, dtype), name=unique(n)) for n in BACKWARD] if backward else None
    return pt.op(kernel("linear_gelu", dtype), name=unique("linear_gelu"), backward=steps)


def reference(X, W, b):
    """Y = gelu(X @ W + b) with the example's sigmoid GELU, in float64, differentiable by torch."""
    z = X.double() @ W.double() + b.double()
    return z * torch.sigmoid(1.702 * z)


def inputs(m: int, k: int, n: int, dtype=None, device: str = "cpu", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    dtype = dtype or torch.float32
    X = torch.randn(m, k, generator=g) / k ** 0.5
    W = torch.randn(k, n, generator=g)
    b = torch.randn(n, generator=g) * 0.5
    return tuple(t.to(dtype=dtype, device=device) for t in (X, W, b))
