"""A GPU pod's leaves, ready to load: the scheduler's compiled leaf taken as it is (no parse, no
CUDA generation, no NVRTC here), or, where none was sent, the leaf compiled here into the same
form (schemas/compiled_leaf.py). No cupy: the backend loads and launches what this returns."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import UserError
from schemas.compiled_leaf import CompiledLeaf, leaf_hash
from schemas.program import Leaf


@dataclass(frozen=True)
class GpuLeaf:
    leaf: Leaf
    compiled: CompiledLeaf
    kernels: tuple  # compiler.cuda.compiled.CompiledKernel per kernel of the launch sequence


def gpu_leaf(leaf: Leaf, shipped: CompiledLeaf | None, cc: int) -> GpuLeaf:
    """`leaf` ready for a GPU of capability `cc`: `shipped` (the scheduler's, checked to be this
    leaf's) or compiled here."""
    from compiler.cuda.compiled import launched_kernels

    if shipped is None:
        from compiler.cuda.mainloops.split_loop.launch import compile_leaf

        shipped = compile_leaf(leaf, cc)
    compiled = shipped
    if compiled.leaf != leaf.name or compiled.source_hash != leaf_hash(leaf):
        raise UserError(f"leaf {leaf.name}: the compiled leaf sent with it was compiled from another leaf")
    return GpuLeaf(leaf, compiled, launched_kernels(compiled))

