"""What the CUDA leaf compiler hands out: `CompiledKernel`, and the calls that make one; and
the two ways between it and the `CompiledLeaf` that travels to a pod (schemas/compiled_leaf.py).

The package's `__init__` only describes it, so that no module of the package imports the
package back through it. The generator (codegen, stages) loads only when something is compiled:
a pod launching a shipped leaf imports this module and never the generator.
"""


from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compiler.cuda import target
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.frontend.source import Span
from schemas.compiled_leaf import CompiledLeaf, KernelLaunch, TensorMap, TensorParam, leaf_hash

if TYPE_CHECKING:
    from compiler.cuda import codegen
    from compiler.frontend import ir

# 8: TF32 rounds to nearest even; 9: TF32 on the TMA ring; 10: attention fed by TMA is tuned;
# 11: warpgroup-MMA descriptors made once per dot and stepped (wgmma.step_descriptor);
# 12: the epilogue stage (stores/epilogue.py) and the TMA store in the search (mainloops/tma_ws/store.py)
# 13: schedule.PERSISTENT_TUNED on; 14: Schedule.fold_chains searched for TMA attention;
# 15: the wide register blocks searched by default (a winner of 14's default never met them)
COMPILER_VERSION = "phobos-cuda-15"


def compiler_version() -> str:
    """Part of the autotune cache key: the generator's version and its code-shaping switches."""
    from compiler.cuda.mainloops.simt.dots import dot_unroll
    from compiler.cuda.schedule import (
        PERSISTENT_TUNED,
        persistent_searched,
        tma_searched,
        wide_blocks_searched,
    )

    searched = persistent_searched()
    persist = "" if searched == PERSISTENT_TUNED else ("-persist" if searched else "-nopersist")
    version = f"{COMPILER_VERSION}-unroll{dot_unroll()}" + ("" if tma_searched() else "-notma") + persist
    return version + ("" if wide_blocks_searched() else "-nowide")


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
    from compiler.cuda import stages

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
    from compiler.cuda import stages

    leaf = stages.run(kernel, binding, stages.Options(tf32, schedule, cc))
    return _compiled(kernel, leaf.generated, leaf.ptx)


def compile_generated(
    kernel: ir.Kernel, gen: codegen.Generated, ptx: str | None = None, cc: int = target.DEFAULT_CC
) -> CompiledKernel:
    """`gen` compiled by NVRTC for capability `cc`; or, given `ptx` already compiled from
    `gen.source` elsewhere (a pod gets the scheduler's), the same CompiledKernel around that PTX
    without compiling again (target.check refuses it at the load if it was made for another GPU)."""
    from compiler.cuda import stages

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


def compiled_leaf(leaf, kernel: ir.Kernel, binding, compiled, cc: int,
                  schedule: Schedule = DEFAULT) -> CompiledLeaf:
    """`compiled` (a CompiledKernel, or a split_launch.LaunchSequence of several kernels and their
    scratch), the code of the cluster program's `leaf` (schemas/program.py Leaf) made from its
    parsed `kernel` bound by `binding`, as the leaf a pod launches."""
    from compiler.frontend import walk
    from compiler.frontend.binding import tensor_shape

    kernels = compiled.kernels if hasattr(compiled, "kernels") else (compiled,)
    scratch = compiled.scratch if hasattr(compiled, "kernels") else ()
    tensors = tuple(TensorParam(p.name, p.dtype, tuple(tensor_shape(p, binding.env))) for p in kernel.tensors)
    code = module_ptx(kernels, cc).encode()
    return CompiledLeaf(
        leaf=leaf.name, source_hash=leaf_hash(leaf), cc=cc, code_kind="ptx", code=code,
        kernels=tuple(_kernel_launch(k) for k in kernels), tensors=tensors,
        scalars=kernels[0].scalars, writes=tuple(walk.stored_tensors(kernel)),
        tuned=tuple(leaf.tile_values), schedule=schedule.key(), scratch=scratch,
        needs=tuple(joint_need(kernels).features),
    )


def _kernel_launch(compiled: CompiledKernel) -> KernelLaunch:
    maps = tuple(TensorMap(m.param, m.tensor, m.box_rows, m.box_cols, m.rows, m.cols, m.dtype, tuple(m.outer))
                 for m in compiled.tensor_maps)
    return KernelLaunch(compiled.entry, tuple(compiled.grid), tuple(compiled.block), compiled.shared_bytes,
                        tuple(compiled.params), maps)


def joint_need(kernels) -> target.Need:
    """What a module of several kernels asks of the GPU: every feature any of them asks."""
    features = dict.fromkeys(f for k in kernels for f in k.need.features)
    return target.Need(tuple(features), kernels[0].need.span)


def module_ptx(kernels, cc: int = target.DEFAULT_CC) -> str:
    """The PTX of one module holding every kernel of a launch sequence: their CUDA, each in a
    namespace of its own (the entries are extern "C" and named apart), compiled by NVRTC once."""
    from compiler.cuda import nvrtc

    if len(kernels) == 1:
        return kernels[0].ptx
    source = "\n".join(f"namespace phobos_part{i} {{\n{k.cuda_source}\n}}" for i, k in enumerate(kernels))
    return nvrtc.compile_to_ptx(source, arch=target.ptx_arch(joint_need(kernels), cc))


def launched_kernels(leaf: CompiledLeaf) -> tuple[CompiledKernel, ...]:
    """Each kernel of a shipped leaf's launch sequence as the CompiledKernel compiler.cuda.launch
    loads and launches: no source (nothing is generated again), no spans (the scheduler checked
    the GPU before it shipped the leaf; target.check still refuses a wrong one, at the kernel)."""
    if leaf.code_kind != "ptx":
        raise ValueError(f"leaf {leaf.leaf}: cannot load {leaf.code_kind} code yet (PTX only)")
    from compiler.cuda.mainloops.tma_ws.maps import MapSpec

    ptx = leaf.code.decode()
    return tuple(
        CompiledKernel(
            cuda_source="", ptx=ptx, entry=k.entry, params=k.params, grid=k.grid, block=k.block,
            shared_bytes=k.shared_bytes, line_spans=(), tensors=tuple(t.name for t in leaf.tensors),
            scalars=leaf.scalars,
            tensor_maps=tuple(MapSpec(m.param, m.tensor, m.box_rows, m.box_cols, m.rows, m.cols, m.dtype,
                                      m.outer) for m in k.tensor_maps),
            need=target.Need(leaf.needs), kernel_span=Span(f"<leaf {leaf.leaf}>", 1, 1, 1, 1),
        )
        for k in leaf.kernels
    )
