"""The honest reference for a cluster program: every launch of every unit, in order, in one
process, with the reference interpreter. A split reduction's launches (every share's, then the
tree's merges, then the finish) are in an order in which each reads only what earlier ones wrote,
so running them in order runs the tree.

For each launch: copy the regions the launch is bound to out of the full arrays, run the leaf
kernel on those copies at the leaf's dims, and write the written regions back. This is exactly
what a pod does with its buffers, minus the network, so its result must equal the plain kernel's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from common.errors import UserError
from compiler.cluster.leaves import load_leaf
from compiler.frontend import ir
from compiler.frontend.binding import Binding, tensor_shape
from schemas.program import ClusterProgram, Region


def _window(region: Region) -> tuple[slice, ...]:
    return tuple(slice(s, s + n) for s, n in zip(region.start, region.shape, strict=True))


def _check_inputs(program: ClusterProgram, tensors: Mapping[str, np.ndarray], scalars: Mapping) -> None:
    for info in program.tensors:
        if info.role == "partial":
            continue
        if info.name not in tensors:
            raise UserError(f"missing tensor {info.name} for kernel {program.kernel}")
        if tuple(tensors[info.name].shape) != info.shape:
            raise UserError(
                f"tensor {info.name}: expected shape {info.shape}, got {tuple(tensors[info.name].shape)}"
            )
    for name in program.scalars:
        if name not in scalars:
            raise UserError(f"missing scalar {name} for kernel {program.kernel}")


def run_program(
    program: ClusterProgram,
    tensors: dict[str, np.ndarray],
    scalars: Mapping[str, float | int],
    runner: Callable[[ir.Kernel, Binding, dict[str, np.ndarray], dict], None] | None = None,
) -> None:
    """Run `program` over the full arrays in `tensors`, writing its outputs into them in place.

    `runner(kernel, binding, arrays, scalars)` runs one leaf launch in place on the bound
    copies; the reference interpreter by default (tests pass a GPU runner to check the leaves'
    CUDA against the same plan)."""
    if runner is None:
        from compiler.interp.interpreter import run_kernel as runner

    _check_inputs(program, tensors, scalars)
    # A split reduction's partials are scratch: NaN until a launch writes them, so that a launch
    # reading a partial no launch before it wrote shows in the result.
    scratch = {i.name: np.full(i.shape, np.nan, np.float32) for i in program.tensors if i.role == "partial"}
    tensors = {**tensors, **scratch}
    leaves = {leaf.name: (leaf, *load_leaf(leaf)) for leaf in program.leaves}
    for unit in program.units:
        for launch in unit.launches:
            leaf, kernel, binding = leaves[launch.leaf]
            bound: dict[str, np.ndarray] = {}
            for param, region in (*launch.reads, *launch.writes):
                if param not in bound:
                    bound[param] = np.array(tensors[region.tensor][_window(region)], copy=True)
            for param in kernel.tensors:
                if param.name not in bound:  # declared but never touched: any contents will do
                    bound[param.name] = np.zeros(tensor_shape(param, binding.env), tensors[param.name].dtype)
            runner(kernel, binding, bound, {name: scalars[name] for name in leaf.scalars})
            for param, region in launch.writes:
                tensors[region.tensor][_window(region)] = bound[param]
