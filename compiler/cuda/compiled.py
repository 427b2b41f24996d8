"""What the CUDA leaf compiler hands out: `CompiledKernel`, and the calls that make one.

The package's `__init__` only describes it, so that no module of the package imports the
package back through it.
"""


from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import codegen, stages, target
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.frontend import ir
from compiler.frontend.source import Span

# 8: TF32 rounds to nearest even; 9: TF32 on the TMA ring; 10: attention fed by TMA is tuned;
# 11: warpgroup-MMA descriptors made once per dot and stepped (wgmma.step_descriptor)
COMPILER_VERSION = "phobos-cuda-11"


def compiler_version() -> str:
    """Part of the autotune cache key: the generator's version and its code-shaping switches."""
    from compiler.cuda.dots import dot_unroll
    from compiler.cuda.schedule import tma_searched

    return f"{COMPILER_VERSION}-unroll{dot_unroll()}" + ("" if tma_searched() else "-notma")


@dataclass(frozen=True)
class CompiledKernel:
    cuda_source: str
    ptx: str
    entry: str
    params: tuple[str, ...]  # tensor and scalar parameter names in launch order
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    line_spans: tuple  # generated line number (1-based) -> kernel Span or None
    tensors: tuple[str, ...] = ()
    scalars: tuple[tuple[str, str], ...] = ()  # (name, dtype)
    tensor_maps: tuple = ()  # tensor_maps.MapSpec of the parameters read by bulk tensor copies
    need: target.Need = target.Need()  # what the code asks of the GPU (target.check before a load)
    kernel_span: Span | None = None  # the kernel, where an error without a dot points


def generate_source(
    kernel: ir.Kernel,
    binding,
    *,
    tf32: bool = False,
    schedule: Schedule = DEFAULT,
    cc: int = target.DEFAULT_CC,
) -> codegen.Generated:
    """The stages up to the CUDA C++ (stages.py), for a GPU of compute capability `cc`."""
    return stages.run(kernel, binding, stages.Options(tf32, schedule, cc), until="emit").generated


def compile_kernel(
    kernel: ir.Kernel,
    binding,
    *,
    tf32: bool = False,
    schedule: Schedule = DEFAULT,
    cc: int = target.DEFAULT_CC,
) -> CompiledKernel:
    """PTX for a GPU of compute capability `cc` (target.py; without one at hand, the H200's)."""
    leaf = stages.run(kernel, binding, stages.Options(tf32, schedule, cc))
    return _compiled(kernel, leaf.generated, leaf.ptx)


def compile_generated(
    kernel: ir.Kernel, gen: codegen.Generated, ptx: str | None = None, cc: int = target.DEFAULT_CC
) -> CompiledKernel:
    """`gen` compiled by NVRTC for capability `cc`; or, given `ptx` already compiled from
    `gen.source` elsewhere (a pod gets the scheduler's), the same CompiledKernel around that PTX
    without compiling again (target.check refuses it at the load if it was made for another GPU)."""
    return _compiled(kernel, gen, ptx if ptx is not None else stages.ptx_of(kernel, gen, cc))


def _compiled(kernel: ir.Kernel, gen: codegen.Generated, ptx: str) -> CompiledKernel:
    return CompiledKernel(
        cuda_source=gen.source,
        ptx=ptx,
        entry=gen.entry,
        params=gen.params,
        grid=gen.grid,
        block=gen.block,
        shared_bytes=gen.shared_bytes,
        line_spans=gen.line_spans,
        tensors=tuple(p.name for p in kernel.tensors),
        scalars=tuple((p.name, p.dtype) for p in kernel.scalars),
        tensor_maps=gen.tensor_maps,
        need=gen.need,
        kernel_span=kernel.span,
    )
