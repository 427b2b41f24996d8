"""Shared helpers of the cluster compiler's tests."""

from __future__ import annotations

from common.paths import repo_file
from compiler.frontend import ir
from compiler.frontend.load import load_file, load_text


def example(name: str) -> ir.Kernel:
    return load_file(repo_file(f"examples/{name}.phk")).kernels[0]


def small(name: str) -> ir.Kernel:
    """A copy of an example with a small @cluster range (tests/cluster/kernels/NAME.phk)."""
    return load_file(repo_file(f"tests/cluster/kernels/{name}.phk")).kernels[0]


def kernel_of(text: str, filename: str = "bad.phk") -> ir.Kernel:
    return load_text(text, filename).kernels[0]
