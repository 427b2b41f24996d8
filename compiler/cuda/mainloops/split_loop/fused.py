"""The split loop in one launch: the partial kernel's CTAs merge their own partials, with no
merge-tree or combine launches after them (issue 33: at S = 2^16 a decode's partial takes about as
long as the three launch gaps of partial, tree and combine).

The chunks are cut into groups of `fan_in`. Each CTA runs the partial's body and leaves its
chunk's state in scratch set A as the partial kernel does; then it takes a ticket of its group (an
atomic counter in scratch, after a __threadfence that publishes its stores). The CTA that takes
its group's last ticket merges the group's partials into slot `group` of set B (the merge tree's
kernel, tree.merge_source, over the whole tile: one CTA of the partial's size) and takes a ticket
of the launch; the CTA that takes the launch's last ticket runs the combine kernel's body over
set B: the merge of the groups from the user's initial values, then the user's store. Each winner
resets its counter, so the next launch starts from zeros. The merges are the one description of
them (compiler/cluster/partial_leaves.py) through the generated kernels; this module only composes
their CUDA: each kernel's source in a namespace of its own, its entry made a device function, and
a wrapper entry that calls them in turn. Their reads of partials other CTAs wrote in this launch
go through the L2 (__ldcg), never the read-only path (__ldg), which may hold what it read before.

The form needs the user's grid to be one CTA (the long-context decode: every chunk's partial
covers the whole output) and the three kernels to agree on the CTA size.

    choose_group(used)                        the group size of fewest merge steps
    one_launch_pays(kernel, binding, ...)     the cost model's choice of this form over the tree's
    plan_fused(kernel, plan, fan_in)         Fused: the group merge, bound, and the sizes
    compile_fused(kernel, plan, fused, ...)  the one CompiledKernel and its scratch
    run_reference(plan, fused, tensors, ...) the same steps on the reference interpreter
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from compiler.cluster.accumulate import Accumulator
from compiler.cluster.partial_leaves import fresh
from compiler.cuda import target
from compiler.cuda.compiled import CompiledKernel, compile_kernel, joint_need
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.cuda.mainloops.split_loop.tree import merge_source, tree_sizes
from compiler.frontend import ir
from compiler.frontend.binding import Binding, bind
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.load import load_text
from schemas.compiled_leaf import Scratch

GROUP_SCALAR = "group"
GROUP_SIZES = (4, 8, 12, 16, 24, 32)  # chunks per group that choose_group weighs
# a dependent launch's gap against one merge step (tree.py's H100 estimates: ~2 us and ~2.9 us)
LAUNCH_GAP_STEPS = 0.7
# the one launch is the model's choice once a GPU has run it: on an H100 it read more GB/s than the
# tree in all six decode cases of benchmarks/results/h100-2026-12-07-s3/call1/decode/decode.md (`+one`;
# PHOBOS_SPLIT_ONE_LAUNCH=1/0 forces either)
ONE_LAUNCH_MEASURED = True
ENTRY = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\((.*)\) \{')


@dataclass(frozen=True)
class Fused:
    fan_in: int  # chunks per group (a multiple of split_loop.UNROLL)
    groups: int  # a multiple of split_loop.UNROLL: the combine's partials
    merge: ir.Kernel
    merge_binding: Binding
    combine_binding: Binding  # the combine over the groups' partials
    set_b: tuple[tuple[str, tuple[int, ...]], ...]  # the groups' partials, f32
    tickets: str  # the counters: one per group, then the launch's


def group_size(fan_in: int) -> int:
    """Chunks per group: `fan_in` in whole steps of the merges' UNROLL."""
    return split_loop.padded(max(fan_in, 1))


def merge_steps(used: int, fan_in: int) -> int:
    """Steps of UNROLL merges after the last chunk: its group's merge, then the combine's over the
    groups (the other groups' merges run while chunks still stream)."""
    group = group_size(fan_in)
    return group // split_loop.UNROLL + chunks_for(used, group) // group // split_loop.UNROLL


def choose_group(used: int) -> int:
    """The group size of fewest merge steps after the last chunk for `used` chunks, then of fewest
    chunks launched (128 chunks: 8, 16 groups, 2 + 4 steps; 132: 12, 144 chunks, 3 + 3 steps)."""
    return min(GROUP_SIZES, key=lambda g: (merge_steps(used, g), chunks_for(used, g), g))


def chunks_for(used: int, fan_in: int) -> int:
    """The chunks the one-launch form runs for `used` chunks with work: whole groups of `fan_in`,
    and a multiple of UNROLL groups (the combine reads UNROLL partials a step); the rest leave the
    state's identity."""
    fan_in = group_size(fan_in)
    return fan_in * split_loop.padded(math.ceil(used / fan_in))


def plan_fused(kernel: ir.Kernel, plan, fan_in: int) -> Fused:
    """The group merge of `plan` (split_plan.SplitPlan, its chunks `chunks_for` of its used ones)
    and the combine rebound to the groups' partials."""
    fan_in = group_size(fan_in)
    if plan.factor % (fan_in * split_loop.UNROLL):
        raise ValueError(f"{plan.factor} chunks are not whole groups of {fan_in} (chunks_for)")
    groups = plan.factor // fan_in
    sf = split_loop.split_form(kernel)
    set_a = tuple(name for name, _ in plan.scratch)
    shapes = dict(plan.scratch)
    taken = set(set_a) | {p.name for p in kernel.params}
    set_b = tuple(fresh(f"{n}_group", taken) for n in set_a)
    tickets = fresh("tickets", taken | set(set_b))
    rows, cols = math.prod(shapes[set_a[-1]][1:-1]), shapes[set_a[-1]][-1]
    name = f"{kernel.name}__split_group_merge"
    text = merge_source(name, isinstance(sf.form, Accumulator), set_a, set_b, rows, cols, plan.factor, groups,
                        fan_in, group=GROUP_SCALAR)
    merge = load_text(text, f"<split group merge of {kernel.name}>").kernels[0]
    merge_binding = bind(merge, {"NIN": plan.factor, "NOUT": groups, "R": rows, "C": cols})
    combine = bind(plan.combine, dict(plan.combine_binding.dims) | {sf.dim: groups},
                   tile_values=dict(plan.combine_binding.tile_values))
    scratch = tuple((nb, (groups, *shapes[na][1:])) for na, nb in zip(set_a, set_b, strict=True))
    return Fused(fan_in, groups, merge, merge_binding, combine, scratch, tickets)


def one_launch_pays(kernel: ir.Kernel, binding: Binding, factor: int, fan_in: int) -> bool:
    """Whether the one launch (fused.py) is modelled faster than the tree's launches at `factor`:
    merge steps after the last chunk, and LAUNCH_GAP_STEPS for each launch after the partial."""
    from compiler.cuda.mainloops.split_loop import plan as split_plan

    if not ONE_LAUNCH_MEASURED or not fits(kernel, binding):
        return False
    used = split_plan.used_chunks(kernel, binding, factor)
    one = merge_steps(used, choose_group(used))
    levels = len(tree_sizes(split_loop.padded(used), fan_in)) - 1
    return one < split_plan.merge_steps(split_loop.padded(used), fan_in) + (levels + 1) * LAUNCH_GAP_STEPS


def fits(kernel: ir.Kernel, binding: Binding) -> bool:
    """Whether the one-launch form can run this leaf: its grid is one CTA."""
    return math.prod(binding.grid or (1,)) == 1


def compile_fused(kernel: ir.Kernel, plan, fused: Fused, partial: CompiledKernel, *, tf32: bool = False,
                  cc: int = target.DEFAULT_CC) -> tuple[CompiledKernel, tuple[Scratch, ...]]:
    """The one kernel: `partial` (compiled from plan.partial), the group merge and the combine at
    the partial's CTA size, composed; and its scratch (set A, set B, the zeroed tickets)."""
    from compiler.cuda import nvrtc
    from compiler.cuda.schedule import Schedule

    threads = Schedule(threads=partial.block[0])
    merge = compile_kernel(fused.merge, fused.merge_binding, schedule=threads, cc=cc)
    combine = compile_kernel(plan.combine, fused.combine_binding, tf32=tf32, schedule=threads, cc=cc)
    if not partial.block == merge.block == combine.block:
        raise CompileError(plan.partial.span, f"{split_loop.NOT_SPLIT} in one launch: its kernels take "
                           f"{partial.block[0]}, {merge.block[0]} and {combine.block[0]} threads")
    set_a = tuple(name for name, _ in plan.scratch)
    set_b = tuple(name for name, _ in fused.set_b)
    entry = partial.entry.replace("__split_partial", "__split_fused")
    decls = _declarations(partial) | _declarations(merge)
    params = (*partial.params, *set_b, fused.tickets)
    signature = ", ".join([decls[p] for p in params[:-1]] + [f"unsigned* t_{fused.tickets}"])
    calls = _wrapper(plan.axis, fused, {
        "partial": _call("fused_partial", partial, {}),
        "merge": _call("fused_merge", merge, {GROUP_SCALAR: "group_"}),
        "combine": _call("fused_combine", combine, {a: f"t_{b}" for a, b in zip(set_a, set_b, strict=True)}),
    })
    head = f'extern "C" __global__ void __launch_bounds__({partial.block[0]}) {entry}({signature}) {{'
    bodies = [_as_device("fused_partial", partial, coherent=False), _as_device("fused_merge", merge),
              _as_device("fused_combine", combine)]
    source = "\n".join([*bodies, head, *calls, "}"])
    kernels = (partial, merge, combine)
    ptx = nvrtc.compile_to_ptx(source, arch=target.ptx_arch(joint_need(kernels), cc))
    one = CompiledKernel(
        cuda_source=source, ptx=ptx, entry=entry, params=params, grid=partial.grid, block=partial.block,
        shared_bytes=max(k.shared_bytes for k in kernels), line_spans=(), tensors=(*partial.tensors, *set_b,
                                                                                   fused.tickets),
        scalars=partial.scalars, need=joint_need(kernels), kernel_span=partial.kernel_span,
    )
    scratch = tuple(Scratch(n, "f32", s, zeroed=False) for n, s in plan.scratch + fused.set_b)
    return one, (*scratch, Scratch(fused.tickets, "f32", (fused.groups + 1,), zeroed=True))


def _signature(compiled: CompiledKernel) -> tuple[str, list[str]]:
    match = ENTRY.search(compiled.cuda_source)
    if match is None or match.group(1) != compiled.entry:
        raise ValueError(f"{compiled.entry}: no entry of the generated form in its source")
    decls = [d.strip() for d in match.group(2).split(",")]
    if len(decls) != len(compiled.params):
        raise ValueError(f"{compiled.entry}: {len(decls)} C parameters for {len(compiled.params)}")
    return match.group(0), decls


def _plain(decl: str) -> str:
    """A parameter without const and __restrict__: in one launch the partials are written by one
    body and read by the next, so no body may take them as read-only or unaliased."""
    return re.sub(r"\b(const|__restrict__)\s+", "", decl)


def _declarations(compiled: CompiledKernel) -> dict[str, str]:
    _, decls = _signature(compiled)
    return {p: _plain(d) for p, d in zip(compiled.params, decls, strict=True)}


def _as_device(namespace: str, compiled: CompiledKernel, coherent: bool = True) -> str:
    """The kernel's source in `namespace`, its entry a device function `body`; with `coherent`,
    its loads through the L2 (__ldcg) rather than the read-only path (__ldg)."""
    head, decls = _signature(compiled)
    body = compiled.cuda_source
    if re.search(r"\breturn\s*;", body[body.index(head):]):
        raise ValueError(f"{compiled.entry}: returns early; one launch needs every thread at its barriers")
    device = f"__device__ __forceinline__ void body({', '.join(map(_plain, decls))}) {{"
    body = body.replace(head, device)
    if coherent:
        body = body.replace("__ldg(", "__ldcg(")
    return f"namespace {namespace} {{\n{body}\n}}"


def _call(namespace: str, compiled: CompiledKernel, renamed: dict[str, str]) -> str:
    _, decls = _signature(compiled)
    args = [renamed.get(p, d.split()[-1]) for p, d in zip(compiled.params, decls, strict=True)]
    return f"  {namespace}::body({', '.join(args)});"


def _wrapper(axis: str, fused: Fused, calls: dict[str, str]) -> list[str]:
    """The entry's body: the partial, the group's ticket, the group merge by its last CTA, the
    launch's ticket, the combine by the last group's merger. Stores are published by every thread's
    __threadfence before thread 0's atomic (the pattern of CUDA's threadFenceReduction)."""
    t = f"t_{fused.tickets}"

    def ticket(slot: str, count: str) -> list[str]:
        return ["  __threadfence();", "  __syncthreads();",
                f"  if (threadIdx.x == 0) last_ = atomicAdd(&{t}[{slot}], 1u) == {count} - 1u;",
                "  __syncthreads();", "  if (!last_) return;", "  __threadfence();",
                f"  if (threadIdx.x == 0) {t}[{slot}] = 0u;  // all came: zero for the next launch"]

    return ["  __shared__ bool last_;", f"  const int group_ = (int)blockIdx.{axis} / {fused.fan_in};",
            calls["partial"], *ticket("group_", f"{fused.fan_in}u"), calls["merge"],
            *ticket(str(fused.groups), f"{fused.groups}u"), calls["combine"]]


def run_reference(plan, fused: Fused, tensors: dict, scalars: dict) -> None:
    """The one launch's steps on the reference interpreter (NaN-filled scratch): the partial, each
    group's merge, the combine over the groups; the user's outputs written into `tensors`."""
    import numpy as np

    from compiler.interp import interpreter

    scratch = {name: np.full(shape, np.nan, np.float32) for name, shape in plan.scratch + fused.set_b}
    both = tensors | scratch
    interpreter.run_kernel(plan.partial, plan.partial_binding, both, scalars)
    for g in range(fused.groups):
        interpreter.run_kernel(fused.merge, fused.merge_binding, both, {GROUP_SCALAR: g})
    names = dict(zip((n for n, _ in plan.scratch), (n for n, _ in fused.set_b), strict=True))
    combine = {name: both[names.get(name, name)] for name in (t.name for t in plan.combine.tensors)}
    interpreter.run_kernel(plan.combine, fused.combine_binding, combine, scalars)
    for name in tensors:
        tensors[name] = combine.get(name, both[name])
