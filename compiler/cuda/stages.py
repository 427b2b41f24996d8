"""The CUDA leaf compiler as a visible list of stages (common/pipeline.py Stage), each
`stage(Leaf) -> Leaf`, run by common/pipeline.run_stages:

  bind     the binding's dims and tile values become the leaf's constants and CTA counts
  fp8      fp8 dots: scales become products (out of the k loop in a GEMM), operands stay fp8 on
           Hopper's warpgroup MMA or are converted to f16 (fp8.py)
  hoist    dot operands that are tensor loads inside loops get lets at the loop top (hoist.py)
  split    a let feeding dots that stage it differently (tensor cores and CUDA cores, roles a
           and b) gets one copy per way (hoist.py)
  fit      bf16 / f16 dots of a shape the tensor cores cannot take run on CUDA cores; with a
           TF32 one the point is pruned (hoist.py)
  epilogue a top-level element-wise let read once by the next store or let is written into
           that use, not held as a register tile beside the accumulator (stores/epilogue.py)
  analyse  which lets live in shared memory, which dots run on tensor cores (and in which
           type), layout hints of 1-D tiles, longest-first grid axes (analysis.py, mma.py)
  lay out  the CTA's threads: ThreadGrid (CUDA cores) or MmaGrid (the tensor-core accumulator
           layout) for every tile (layout.py); a point that fits no layout is pruned here
  emit     CUDA C++: one emitter per IR operation over one context (codegen.py statements,
           exprs.py expressions, reductions.py, mainloops/simt/dots.py FMA dots, mma.py tensor-core dots)
  nvrtc    PTX through NVRTC (nvrtc.py) for the GPU's target (target.py: code that GPU cannot
           run is refused here, at the dot); its errors point at the kernel's line

`PHOBOS_CUDA_DUMP=DIR` writes what each stage produced to DIR/N-stage.txt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from common import options as env_options
from common.pipeline import Stage, run_stages
from compiler import builtins
from compiler.cuda import analysis, fp8, mma, nvrtc, target
from compiler.cuda.hoist import fit_dots, hoist_dot_loads, split_operand_lets
from compiler.cuda.layout import LayoutError, MmaGrid, ThreadGrid, choose_mma_grid, choose_thread_grid
from compiler.cuda.mainloops.base import Mainloop
from compiler.cuda.mainloops.registry import choose_mainloop
from compiler.cuda.mainloops.simt.policy import Simt
from compiler.cuda.mainloops.wgmma import mma as wgmma
from compiler.cuda.schedule import DEFAULT, Schedule
from compiler.cuda.stores.epilogue import inline_epilogue_lets
from compiler.frontend import ir, walk
from compiler.frontend.diagnostics import CompileError


@dataclass(frozen=True)
class Options:
    tf32: bool = False  # every f32 dot on TF32 tensor cores (the kernel-wide opt-in)
    schedule: Schedule = DEFAULT
    cc: int = target.DEFAULT_CC  # the GPU's compute capability (its shared memory, NVRTC's target)


@dataclass(frozen=True)
class CtaOrder:
    """The order CTAs of a 2-D grid are launched in (codegen.KernelGen.cta_order)."""

    order: str = "row"  # "row" (launch order) or "grouped" (group-major)
    group: int = 8  # CTAs along x per group in the grouped order


@dataclass(frozen=True)
class KernelPlan:
    """What lowering decided before any code is emitted (the analyse stage): where operands live,
    which dots run on tensor cores, and the mainloop policy that feeds them (mainloops/). The
    tile values are the leaf's binding; the thread layout is the lay-out stage's (Leaf.grid)."""

    shared: dict  # let name -> dot operand role ('a' / 'b') of lets staged in shared memory
    hints: dict  # 1-D let name -> 'row' / 'col' layout
    tc_dots: tuple  # the dots that run on tensor cores
    tc_lets: frozenset  # lets that feed only tensor-core dots (16-bit or TF32 operand buffers)
    longest_first: tuple  # grid axes launched in reverse (causal loops: longest first)
    wgmma: bool = False  # the tensor-core dots run as warpgroup MMA (mainloops/wgmma/mma.py)
    mainloop: Mainloop = Simt()  # the policy of the loops' operand rings (mainloops/registry.py)
    cta_order: CtaOrder = CtaOrder()


Plan = KernelPlan  # the earlier name


@dataclass(frozen=True)
class Leaf:
    kernel: ir.Kernel
    binding: object
    options: Options = field(default_factory=Options)
    env: dict | None = None
    counts: tuple | None = None  # CTAs along x, y, z
    plan: Plan | None = None
    grid: ThreadGrid | MmaGrid | None = None
    generated: object = None  # codegen.Generated
    ptx: str | None = None


def bind(leaf: Leaf) -> Leaf:
    counts = [1, 1, 1]
    for axis, n in zip(leaf.kernel.grid, leaf.binding.grid, strict=True):
        counts["xyz".index(axis.axis)] = n
    return dataclasses.replace(leaf, env=dict(leaf.binding.env), counts=tuple(counts))


def lower_fp8(leaf: Leaf) -> Leaf:
    o = leaf.options
    return dataclasses.replace(leaf, kernel=fp8.lower(leaf.kernel, leaf.env, o.schedule, o.cc, leaf.binding))


def hoist(leaf: Leaf) -> Leaf:
    return dataclasses.replace(leaf, kernel=hoist_dot_loads(leaf.kernel))


def split(leaf: Leaf) -> Leaf:
    return dataclasses.replace(leaf, kernel=split_operand_lets(leaf.kernel, leaf.options.tf32))


def fit(leaf: Leaf) -> Leaf:
    return dataclasses.replace(leaf, kernel=fit_dots(leaf.kernel, leaf.binding, leaf.options.tf32))


def epilogue(leaf: Leaf) -> Leaf:
    return dataclasses.replace(leaf, kernel=inline_epilogue_lets(leaf.kernel))


def analyse(leaf: Leaf) -> Leaf:
    k, tf32 = leaf.kernel, leaf.options.tf32
    dots = tuple(tensor_core_dots(k, tf32))
    schedule = leaf.options.schedule
    on_wgmma = schedule.wgmma and uses_wgmma(k, dots, tf32)
    plan = KernelPlan(
        shared=analysis.shared_lets(k.body),
        hints=analysis.layout_hints(k.body),
        tc_dots=dots,
        tc_lets=frozenset(tensor_core_lets(k, list(dots), tf32)) if dots else frozenset(),
        longest_first=tuple(analysis.longest_first_axes(k.body, leaf.env)),
        wgmma=on_wgmma,
        mainloop=choose_mainloop(schedule, bool(dots), on_wgmma),
        cta_order=CtaOrder(schedule.order, schedule.group),
    )
    # what the GPU cannot run is its error, ahead of any point pruned for its resources
    check_target(k, target.plan_need(dots, plan.wgmma, plan.mainloop), leaf.options.cc)
    return dataclasses.replace(leaf, plan=plan)


def lay_out(leaf: Leaf) -> Leaf:
    from compiler.cuda.codegen import pruned

    k, schedule = leaf.kernel, leaf.options.schedule
    threads = cta_threads(k, schedule)
    if not 1 <= threads <= 1024 or threads % 32:
        raise CompileError(k.span, f"@launch({threads}): a CTA has 32 to 1024 threads, a multiple of 32")
    try:
        grid = choose_grid(k, leaf.env, schedule, leaf.options.tf32, leaf.plan.wgmma)
    except LayoutError as e:
        raise pruned(k, leaf.binding, k.span, f"cannot lay out its tiles on {threads} threads: {e}") from None
    return dataclasses.replace(leaf, grid=grid)


def emit(leaf: Leaf) -> Leaf:
    from compiler.cuda.codegen import KernelGen

    return dataclasses.replace(leaf, generated=KernelGen(leaf).generate())


def to_ptx(leaf: Leaf) -> Leaf:
    return dataclasses.replace(leaf, ptx=ptx_of(leaf.kernel, leaf.generated, leaf.options.cc))


def ptx_of(kernel: ir.Kernel, gen, cc: int = target.DEFAULT_CC) -> str:
    """The nvrtc stage: PTX for a GPU of capability `cc`; an error at the first tensor-core dot
    when the generated code cannot run there, or at the kernel line the first failing generated
    line came from when NVRTC refuses it."""
    check_target(kernel, gen.need, cc)
    try:
        return nvrtc.compile_to_ptx(gen.source, arch=target.ptx_arch(gen.need, cc))
    except nvrtc.NvrtcError as e:
        raise _nvrtc_error(kernel, gen, e) from None


def check_target(kernel: ir.Kernel, need: target.Need, cc: int) -> None:
    """The user's error, where `need` points (else at the kernel), when code with `need` cannot
    run on a GPU of capability `cc`."""
    why = target.refusal(need, cc)
    if why is not None:
        raise target.cannot_run(need.span or kernel.span, why)


def _nvrtc_error(kernel: ir.Kernel, gen, err: nvrtc.NvrtcError) -> CompileError:
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


STAGES = (
    Stage("bind", bind),
    Stage("fp8", lower_fp8),
    Stage("hoist", hoist),
    Stage("split", split),
    Stage("fit", fit),
    Stage("epilogue", epilogue),
    Stage("analyse", analyse),
    Stage("lay out", lay_out),
    Stage("emit", emit),
    Stage("nvrtc", to_ptx),
)


def run(kernel: ir.Kernel, binding, options: Options = Options(), until: str = "nvrtc",
        timings: list[tuple[str, float]] | None = None) -> Leaf:
    """Run the stages in order up to and including `until` (common/pipeline.run_stages);
    `timings` gets each stage's (name, seconds)."""
    dump = env_options.current().cuda_dump

    def after_each(index: int, name: str, leaf: Leaf) -> None:
        if dump:
            _dump(Path(dump), index, name, leaf)

    return run_stages(STAGES, Leaf(kernel, binding, options), until=until, after_each=after_each,
                      timings=timings, what="CUDA stage")


def _dump(folder: Path, index: int, name: str, leaf: Leaf) -> None:
    from compiler.frontend import ir_print

    def body() -> str:
        return "\n".join(line for st in leaf.kernel.body for line in ir_print.format_stmt(st))

    text = {
        "bind": lambda: f"env {leaf.env}\nCTAs {leaf.counts}",
        "fp8": body,
        "hoist": body,
        "split": body,
        "fit": body,
        "epilogue": body,
        "analyse": lambda: repr(leaf.plan),
        "lay out": lambda: repr(leaf.grid),
        "emit": lambda: leaf.generated.source,
        "nvrtc": lambda: leaf.ptx,
    }[name]()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{index}-{name.replace(' ', '-')}.txt").write_text(text)


# -- analysis helpers (analyse and lay out) ------------------------------------------------------


def _eval(size: ir.Size, env) -> int:
    return size.evaluate(dict(env))


def _shapes(kernel: ir.Kernel, env) -> tuple[set, set, set, set]:
    shapes2d, dots, rows, cols = set(), set(), set(), set()
    for e in walk.iter_body_exprs(kernel.body):
        if isinstance(e.ty, ir.TileType) and e.ty.rank == 2:
            shapes2d.add(tuple(_eval(s, env) for s in e.ty.shape))
            if builtins.is_contraction(e):
                dots.add(tuple(_eval(s, env) for s in e.ty.shape))
    for s in walk.iter_stmts(kernel.body):
        if isinstance(s, ir.VarDecl) and isinstance(s.declared, ir.TileType) and s.declared.rank == 2:
            shapes2d.add(tuple(_eval(x, env) for x in s.declared.shape))
    return shapes2d, dots, rows, cols


def tensor_core_dots(kernel: ir.Kernel, tf32: bool) -> list[ir.Call]:
    return [
        e
        for e in walk.iter_body_exprs(kernel.body)
        if builtins.is_contraction(e) and mma.tensor_core_dtype(e, kernel, tf32)
    ]


def reduces_rows(kernel: ir.Kernel) -> bool:
    return any(
        builtins.is_reduction(e)
        and len(e.args) == 1
        and e.args[0].ty.rank == 2
        and dict(e.kwargs)["axis"].value == 1
        for e in walk.iter_body_exprs(kernel.body)
    )


def tensor_core_lets(kernel: ir.Kernel, dots: list[ir.Call], tf32: bool) -> set[str]:
    """Lets that feed only tensor-core dots (staged as 16-bit operands)."""

    def names(calls):
        return {analysis.dot_operand_name(x) for c in calls for x in c.args} - {None}

    others = [
        e
        for e in walk.iter_body_exprs(kernel.body)
        if builtins.is_contraction(e) and not mma.tensor_core_dtype(e, kernel, tf32)
    ]
    return names(dots) - names(others)


def register_shapes(kernel: ir.Kernel, env) -> set:
    """Shapes of the 2-D tiles held in registers: not the dot operands staged in shared memory."""
    shared = analysis.shared_lets(kernel.body)
    staged = {id(s.value) for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let) and s.name in shared}
    for e in walk.iter_body_exprs(kernel.body):
        if builtins.is_contraction(e):
            for x in e.args:
                staged.add(id(x))
                if builtins.is_transpose(x):
                    staged.add(id(x.args[0]))
    out = set()
    for e in walk.iter_body_exprs(kernel.body):
        if id(e) in staged or isinstance(e, ir.Name) and e.name in shared:
            continue
        if isinstance(e.ty, ir.TileType) and e.ty.rank == 2:
            out.add(tuple(_eval(s, env) for s in e.ty.shape))
    for s in walk.iter_stmts(kernel.body):
        if isinstance(s, ir.VarDecl) and isinstance(s.declared, ir.TileType) and s.declared.rank == 2:
            out.add(tuple(_eval(x, env) for x in s.declared.shape))
    return out


def cta_threads(kernel: ir.Kernel, schedule: Schedule) -> int:
    return schedule.threads or kernel.threads


def uses_wgmma(kernel: ir.Kernel, dots, tf32: bool = False) -> bool:
    """Warpgroup MMA takes 16-bit dots whose b lives in shared memory (a: shared memory or
    registers, as attention's P), and TF32 dots whose a and b both do (mainloops/wgmma/tf32.py)."""
    shared = analysis.shared_lets(kernel.body)

    def takes(d: ir.Call) -> bool:
        dtype = mma.tensor_core_dtype(d, kernel, tf32)
        if dtype == "tf32" or dtype in ir.FP8:  # K-major operands from shared memory only
            return all(wgmma.operand_in_shared(x, shared) for x in d.args)
        return dtype in mma.TC_DTYPES and wgmma.operand_in_shared(d.args[1], shared)

    return bool(dots) and all(takes(d) for d in dots)


def loop_of_dots(kernel: ir.Kernel, dots) -> bool:
    """A loop that holds two or more of the tensor-core `dots` (attention): Schedule.rotate may
    apply to it (loops.deferred_dot decides)."""
    ids = set(map(id, dots))
    loops = [st for st in walk.iter_stmts(kernel.body) if isinstance(st, ir.For)]
    return any(sum(id(e) in ids for e in walk.iter_body_exprs(st.body)) >= 2 for st in loops)


def choose_grid(kernel: ir.Kernel, env, schedule: Schedule, tf32: bool, warpgroups: bool = False):
    threads = cta_threads(kernel, schedule)
    if tensor_core_dots(kernel, tf32):
        shapes = register_shapes(kernel, env)
        pinned = schedule.threads is not None or any(isinstance(a, ir.Launch) for a in kernel.attributes)
        # without a pinned CTA size, fewer warps where the tiles have too few rows for all of them
        sizes = [threads] if pinned else [threads, threads // 2, threads // 4]
        # rows kept in one warp at 4 warps or more first; then columns over warps (their row
        # reductions meeting in shared memory); fewer than 4 warps last, where the register
        # budget of each thread is smallest (decode's 32 rows on 2 warps hold 132 values a thread)
        tries = ([(n, False) for n in sizes if n >= 128] + [(n, True) for n in sizes]
                 + [(n, False) for n in sizes if n < 128])
        for n, columns_over_warps in tries:
            try:
                # warpgroup MMA: every warp along the rows (64 rows per warpgroup of 4)
                warps_m = n // 32 if warpgroups else schedule.warps_m
                return choose_mma_grid(n, shapes, reduces_rows(kernel), warps_m, columns_over_warps)
            except LayoutError:
                if (n, columns_over_warps) == tries[-1]:
                    raise
    shapes2d, dots, rows, cols = _shapes(kernel, env)
    return choose_thread_grid(threads, shapes2d, dots, rows, cols)
