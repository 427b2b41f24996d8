"""A leaf as a launch sequence: its one kernel, or, under the split-loop policy
(mainloops/split_loop/policy.py), the partial kernel of mainloops/split_loop/plan.py, the merge tree's kernels
(mainloops/split_loop/tree.py) and the combine kernel, with the f32 scratch buffers between them, launched in
order on one stream.

    compile_sequence(kernel, binding, ...)   LaunchSequence: CompiledKernels + Scratch + policy
    module_ptx(sequence, cc)                  one PTX module holding every entry (CompiledLeaf)
    compile_leaf(leaf, cc, split=None)        a cluster leaf as the CompiledLeaf a GPU pod launches
    launch_sequence(sequence, arrays, ...)    every kernel in order on cupy arrays (tests, tools)

Every generated kernel is compiled by the ordinary leaf pipeline first (its errors point at the
user's lines); the module of several entries is their CUDA, each in a namespace of its own (the
entries are extern "C" and named apart: split_plan._renamed), compiled once more by NVRTC.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from common import options
from compiler.cuda import compiled, target
from compiler.cuda.compiled import CompiledKernel, compile_kernel, joint_need
from compiler.cuda.mainloops.split_loop import fused as split_fused
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.cuda.mainloops.split_loop import tree as split_tree
from compiler.cuda.mainloops.split_loop.policy import SplitLoop
from compiler.cuda.schedule import DEFAULT, Schedule
from schemas.compiled_leaf import CompiledLeaf, Scratch


@dataclass(frozen=True)
class LaunchSequence:
    kernels: tuple[CompiledKernel, ...]  # in launch order
    scratch: tuple[Scratch, ...] = ()
    split: SplitLoop | None = None  # None: the one-CTA loop
    chunks: int = 1  # CTAs along the split axis (the policy's factor padded: mainloops/split_loop/plan.py)

    @property
    def need(self) -> target.Need:
        return joint_need(self.kernels)


def compile_sequence(kernel, binding, *, schedule: Schedule = DEFAULT, cc: int = target.DEFAULT_CC,
                     tf32: bool = False, split: int | None = None,
                     sm_count: int | None = None, fan_in: int | None = None,
                     one_launch: bool | None = None) -> LaunchSequence:
    """`kernel` at `binding` as the launches that run it. `split`: None, the cost model decides;
    1, the one-CTA loop; N, N chunks (CompileError at the loop when its state cannot split).
    `fan_in`: the merge tree's (mainloops/split_loop/tree.py; None: PHOBOS_SPLIT_FAN_IN, 0: no tree).
    `one_launch` (None: PHOBOS_SPLIT_ONE_LAUNCH, unset: fused.one_launch_pays): the partial's
    CTAs merge the partials themselves (mainloops/split_loop/fused.py) where the user's grid is one CTA."""
    from compiler.cuda.mainloops.registry import choose_split
    from compiler.cuda.mainloops.split_loop import plan as split_plan

    fan_in = options.current().split_fan_in if fan_in is None else fan_in
    policy = choose_split(kernel, binding, split, sm_count, fan_in)  # the factor for this tree
    if policy is None:
        return LaunchSequence((compile_kernel(kernel, binding, tf32=tf32, schedule=schedule, cc=cc),))
    one = options.current().split_one_launch if one_launch is None else one_launch
    if one is None:
        one = split_fused.one_launch_pays(kernel, binding, policy.factor, fan_in)
    if one and split_fused.fits(kernel, binding):
        return _one_launch(kernel, binding, policy, schedule, cc, tf32, sm_count)
    plan = split_plan.plan_split(kernel, binding, factor=policy.factor, sm_count=sm_count)
    tree = split_tree.plan_tree(kernel, plan, fan_in)
    partial = compile_kernel(plan.partial, plan.partial_binding, tf32=tf32,
                             schedule=partial_schedule(schedule), cc=cc)
    merges = tuple(compile_kernel(k, b, cc=cc) for k, b in tree.merges)
    combine = compile_kernel(plan.combine, tree.combine_binding, tf32=tf32, cc=cc)
    scratch = tuple(Scratch(name, "f32", shape, zeroed=False) for name, shape in plan.scratch + tree.scratch)
    return LaunchSequence((partial, *merges, combine), scratch, policy, plan.factor)


def _one_launch(kernel, binding, policy: SplitLoop, schedule: Schedule, cc: int, tf32: bool,
                sm_count: int | None) -> LaunchSequence:
    """The split loop as one kernel (fused.py): chunks in whole groups of fused.choose_group's size."""
    from compiler.cuda.mainloops.split_loop import plan as split_plan

    group = split_fused.choose_group(split_plan.used_chunks(kernel, binding, policy.factor))
    plan = split_plan.plan_split(kernel, binding, factor=policy.factor, sm_count=sm_count,
                                 multiple=group * split_loop.UNROLL)
    fused = split_fused.plan_fused(kernel, plan, group)
    partial = compile_kernel(plan.partial, plan.partial_binding, tf32=tf32,
                             schedule=partial_schedule(schedule), cc=cc)
    one, scratch = split_fused.compile_fused(kernel, plan, fused, partial, tf32=tf32, cc=cc)
    return LaunchSequence((one,), scratch, policy, plan.factor)


def partial_schedule(schedule: Schedule, fields: str | None = None) -> Schedule:
    """The partial kernel's schedule: the leaf's, with the `fields` of PHOBOS_SPLIT_SCHEDULE
    (`stages=4,threads=128,late_copies=1`) over it. The partial streams the loop's operands at
    the memory's rate, so its ring's depth (the bytes in flight per SM) and CTA size are what
    benchmarks/decode_sweep.sh sweeps. A field Schedule lacks is the user's error, naming it."""
    fields = options.current().split_schedule if fields is None else fields
    known = {f.name: f for f in dataclasses.fields(Schedule)}
    changes = {}
    for item in (t.strip() for t in fields.split(",") if t.strip()):
        name, _, value = item.partition("=")
        if name not in known or not value.lstrip("-").isdigit():
            raise options.OptionError(f"PHOBOS_SPLIT_SCHEDULE: {item!r} is not <field>=<integer> of "
                                      f"a Schedule ({', '.join(known)})")
        changes[name] = bool(int(value)) if isinstance(getattr(schedule, name), bool) else int(value)
    return dataclasses.replace(schedule, **changes)


def module_ptx(sequence: LaunchSequence, cc: int = target.DEFAULT_CC) -> str:
    """The PTX of one module holding every kernel of the sequence (compiled.module_ptx)."""
    return compiled.module_ptx(sequence.kernels, cc)


def compile_leaf(leaf, cc: int = target.DEFAULT_CC, split: int | None = None) -> CompiledLeaf:
    """The cluster program's `leaf` (schemas/program.py) compiled for capability `cc`, bound at its
    dims and tile values: what the scheduler ships to a GPU pod (or such a pod makes itself when
    it was sent none). Its loop is split over CTAs as the cost model says (`split`: forced)."""
    from compiler.cluster.leaves import load_leaf

    kernel, binding = load_leaf(leaf)
    sequence = compile_sequence(kernel, binding, cc=cc, split=split)
    return compiled.compiled_leaf(leaf, kernel, binding, sequence, cc)


def scratch_arrays(sequence: LaunchSequence) -> dict:
    import cupy

    return {s.name: (cupy.zeros if s.zeroed else cupy.empty)(s.shape, cupy.float32) for s in sequence.scratch}


def launch_sequence(sequence: LaunchSequence, arrays: dict, scalars: dict, stream=None,
                    scratch: dict | None = None) -> None:
    """Every kernel in order on `stream`, on cupy `arrays` (bf16 as uint16) plus the scratch."""
    from compiler.cuda import launch as cuda_launch

    both = arrays | (scratch if scratch is not None else scratch_arrays(sequence))
    for k in sequence.kernels:
        cuda_launch.launch(k, both, scalars, stream=stream)


def run_sequence_gpu(sequence: LaunchSequence, kernel, arrays: dict[str, np.ndarray], scalars: dict) -> dict:
    """Host arrays in, every launch, the user's stored tensors out (the tests' convenience)."""
    import cupy

    from compiler.frontend import walk

    device = {}
    for p in kernel.tensors:
        host = np.ascontiguousarray(arrays[p.name])
        device[p.name] = cupy.asarray(host.view(np.uint16) if p.dtype == "bf16" else host)
    launch_sequence(sequence, device, scalars)
    cupy.cuda.get_current_stream().synchronize()
    return {name: cupy.asnumpy(device[name]) for name in walk.stored_tensors(kernel)}
