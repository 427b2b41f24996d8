"""The CUDA leaf compiler: checked kernel + binding -> CUDA C++ -> NVRTC -> PTX.

Public API:
- `compile_kernel(kernel, binding, *, tf32=False) -> CompiledKernel`: dims and tile values of the
  binding become compile-time constants; raises CompileError for kernels or points it cannot
  compile (pruned points say so), never returns a silently wrong kernel.
- `compiler.cuda.launch.launch(compiled, arrays, scalars, stream=None)`: device arrays in, no host
  round trip; `launch.run_kernel_gpu(kernel, binding, arrays, scalars)`: host arrays in, outputs out.
- `compiler.cuda.nvrtc.compile_to_ptx(source, arch="compute_90")`, cached per (source, options).
- `compiler.cuda.autotune.tune(kernel, dims)` / `cached_choice(kernel, dims)`.
Stages (stages.py, in order): bind, hoist, analyse, lay out, emit, nvrtc. The emit stage is
codegen.KernelGen (statements) over exprs.ExprEmitter (expressions), with dots.py (FMA dots),
mma.py (tensor-core dots), operands.py (their shared-memory buffers), wgmma.py (warpgroup MMA),
loops.py (software pipelining of loop operands) and reductions.py as functions of that one
emitter; values.py holds what they pass around.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.cuda import codegen, nvrtc, stages
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.source import Span

COMPILER_VERSION = "phobos-cuda-5"


def compiler_version() -> str:
    """Part of the autotune cache key: the generator's version and its code-shaping switches."""
    from compiler.cuda.dots import dot_unroll

    return f"{COMPILER_VERSION}-unroll{dot_unroll()}"


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
    tensor_core_span: Span | None = None  # the first dot on tensor cores: needs sm_80 or later


def generate_source(
    kernel: ir.Kernel, binding, *, tf32: bool = False, schedule: Schedule = DEFAULT
) -> codegen.Generated:
    """The stages up to the CUDA C++ (stages.py)."""
    return stages.run(kernel, binding, stages.Options(tf32, schedule), until="emit").generated


def compile_kernel(
    kernel: ir.Kernel, binding, *, tf32: bool = False, schedule: Schedule = DEFAULT
) -> CompiledKernel:
    leaf = stages.run(kernel, binding, stages.Options(tf32, schedule))
    return _compiled(kernel, leaf.generated, leaf.ptx)


def compile_generated(kernel: ir.Kernel, gen: codegen.Generated, ptx: str | None = None) -> CompiledKernel:
    """`gen` compiled by NVRTC; or, given `ptx` already compiled from `gen.source` elsewhere (a pod
    gets the scheduler's), the same CompiledKernel around that PTX without compiling again."""
    return _compiled(kernel, gen, ptx if ptx is not None else ptx_of(kernel, gen))


def ptx_of(kernel: ir.Kernel, gen: codegen.Generated) -> str:
    """The nvrtc stage: PTX, or an error at the kernel line the first failing generated line came from."""
    try:
        return nvrtc.compile_to_ptx(gen.source, arch=gen.arch)
    except nvrtc.NvrtcError as e:
        raise _nvrtc_error(kernel, gen, e) from None


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
        tensor_core_span=gen.tensor_core_span,
    )


def _nvrtc_error(kernel: ir.Kernel, gen: codegen.Generated, err: nvrtc.NvrtcError) -> CompileError:
    """Point at the kernel line the first failing generated line came from, quoting it."""
    lines = gen.source.splitlines()
    for entry in nvrtc.parse_log(err.log):
        span = gen.line_spans[entry.line] if 0 < entry.line < len(gen.line_spans) else None
        quoted = lines[entry.line - 1].strip() if 0 < entry.line <= len(lines) else ""
        return CompileError(
            span or kernel.span,
            f"NVRTC rejected the generated CUDA: {entry.text}",
            note=f"generated line {entry.line}: {quoted}",
        )
    return CompileError(kernel.span, "NVRTC rejected the generated CUDA", note=err.log.strip()[:2000])
