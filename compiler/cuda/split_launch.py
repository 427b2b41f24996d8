"""A split loop on the GPU: its launch sequence (partial kernel, then combine kernel, in stream
order) and the f32 scratch buffers between them.

The sequence is a plain tuple of CompiledKernel, each launched with the user's arrays plus the
scratch buffers (allocated once per SplitLaunch and reused). It is kept this small on purpose: the
CompiledLeaf with a multi-kernel launch sequence that the runtime will carry is another helper's
(issue 'wire'); this is what it would hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compiler.cuda import launch as cuda_launch
from compiler.cuda import target
from compiler.cuda.compiled import CompiledKernel, compile_kernel
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.cuda.split_plan import SplitPlan


@dataclass
class SplitLaunch:
    plan: SplitPlan
    kernels: tuple[CompiledKernel, ...]  # in launch order: partial, combine
    _scratch: dict = field(default_factory=dict)

    def scratch(self) -> dict:
        import cupy

        if not self._scratch:
            self._scratch = {n: cupy.empty(shape, cupy.float32) for n, shape in self.plan.scratch}
        return self._scratch

    def launch(self, arrays: dict, scalars: dict, stream=None) -> None:
        both = arrays | self.scratch()
        for k in self.kernels:
            cuda_launch.launch(k, both, scalars, stream=stream)


def compile_split(plan: SplitPlan, schedule: Schedule = DEFAULT, cc: int | None = None,
                  combine_schedule: Schedule = DEFAULT) -> SplitLaunch:
    cc = cc if cc is not None else target.device_capability()
    partial = compile_kernel(plan.partial, plan.partial_binding, schedule=schedule, cc=cc)
    combine = compile_kernel(plan.combine, plan.combine_binding, schedule=combine_schedule, cc=cc)
    return SplitLaunch(plan, (partial, combine))


def run_split_gpu(split: SplitLaunch, kernel, arrays: dict[str, np.ndarray], scalars: dict) -> dict:
    """Host arrays in, both launches, the user's stored tensors out (the test's convenience)."""
    import cupy

    from compiler.frontend import walk

    device = {}
    for p in kernel.tensors:
        host = np.ascontiguousarray(arrays[p.name])
        device[p.name] = cupy.asarray(host.view(np.uint16) if p.dtype == "bf16" else host)
    split.launch(device, scalars)
    cupy.cuda.get_current_stream().synchronize()
    return {name: cupy.asnumpy(device[name]) for name in walk.stored_tensors(kernel)}
