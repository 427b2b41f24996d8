"""How far a split loop is split (mainloops/split_loop/transform.py), and the two bound kernels that run it.

    choose_factor(ctas, sm_count, iterations)   the cost model's split factor
    plan_split(kernel, binding, factor=None)     SplitPlan: partial and combine kernels, bound
    run_split_reference(plan, tensors, scalars)  both kernels on the reference interpreter

The factor: a grid of `ctas` CTAs that already fills `CTAS_PER_SM` CTAs per multiprocessor is not
split; otherwise the factor is the one of least modelled time (`split_time`: the chunks' loop at
the memory pipe's rate, plus the merge's serial steps: the tree's levels and the combine's), at most as many
chunks as bring the grid to that many CTAs, no chunk shorter than `MIN_CHUNK_ITERATIONS`
iterations and never more chunks than iterations. A user forces the
factor with `split=N` (the `--split N` flag); 1 is the one-CTA loop.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from common import options
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.cuda.mainloops.split_loop import tree as split_tree
from compiler.frontend import ir
from compiler.frontend.binding import Binding, bind

# resident CTAs per multiprocessor that saturate its memory pipe: one chunk per SM won every case of
# the H100 decode sweep (benchmarks/results/h100-2026-12-07-s2/decode-sweep.md, fan8@1sm against the
# cost model's 2 per SM: 0.81 against 0.76 of the copy bandwidth, 0.95x against 0.87x Triton), as
# one wave of equal chunks ends together where two waves of half chunks leave a tail
CTAS_PER_SM = 1
MIN_CHUNK_ITERATIONS = 2
MIN_SPLIT_ITERATIONS = 64  # the cost model splits no shorter loop (a forced split may)
COMBINE_STEP = 0.5  # one combine step (UNROLL partials read, merged) against one loop iteration
DEFAULT_SM_COUNT = 132  # an H100 SXM's; the device's own count is used where one is at hand


def choose_factor(ctas: int, sm_count: int, iterations: int, fan_in: int | None = None) -> int:
    """The factor of least modelled time (`split_time`), the smallest among equals; `fan_in`: the
    merge tree's (None: PHOBOS_SPLIT_FAN_IN's, 0: no tree, the combine merges every partial)."""
    want = CTAS_PER_SM * sm_count
    if ctas >= want or iterations < 2 * MIN_CHUNK_ITERATIONS:
        return 1
    fan_in = options.current().split_fan_in if fan_in is None else fan_in
    most = min(math.ceil(want / max(ctas, 1)), iterations // MIN_CHUNK_ITERATIONS)
    return min(range(1, most + 1), key=lambda f: (split_time(ctas, want, iterations, f, fan_in), f))


def split_time(ctas: int, want: int, iterations: int, factor: int, fan_in: int = 0) -> float:
    """Modelled time, in loop iterations of a CTA at the memory pipe's full rate: the partial
    kernel's chunks (in waves once the grid passes `want` resident CTAs), then the merge's serial
    chain (`merge_steps`) at COMBINE_STEP iterations a step; 1 is the unsplit loop."""
    waves = max(1.0, ctas * factor / want)
    chunk = math.ceil(iterations / factor)
    if factor == 1:
        return chunk * waves
    return chunk * waves + merge_steps(split_loop.padded(factor), fan_in) * COMBINE_STEP


def merge_steps(chunks: int, fan_in: int) -> int:
    """Steps of UNROLL merges one after another from the partials to the store: the combine's
    alone (one per UNROLL partials), or the tree's levels (fan_in / UNROLL each, in parallel over
    the partials: split_tree.tree_sizes) and then the combine's over what they leave."""
    sizes = split_tree.tree_sizes(chunks, fan_in)
    levels = len(sizes) - 1
    per_level = math.ceil(split_loop.padded(max(fan_in, 1)) / split_loop.UNROLL)
    return levels * per_level + math.ceil(sizes[-1] / split_loop.UNROLL)


def used_chunks(kernel: ir.Kernel, binding: Binding, factor: int) -> int:
    """The chunks that run iterations when the loop is cut `factor` ways (split_loop.chunking)."""
    total = _iterations(kernel, split_loop.split_form(kernel), dict(binding.env))
    return split_loop.chunking(total, factor)[1]


def device_sm_count() -> int:
    try:
        import cupy

        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    except Exception:  # no GPU here (CPU machines compile for the default target)
        return DEFAULT_SM_COUNT


@dataclass(frozen=True)
class SplitPlan:
    factor: int  # chunks (CTAs along the split axis, a multiple of split_loop.UNROLL)
    chunk_iterations: int
    used: int  # chunks that run iterations (the rest pad the factor and leave the identity)
    partial: ir.Kernel
    partial_binding: Binding
    combine: ir.Kernel
    combine_binding: Binding
    scratch: tuple[tuple[str, tuple[int, ...]], ...]  # f32 buffers between the two launches
    axis: str


def plan_split(kernel: ir.Kernel, binding: Binding, factor: int | None = None,
               sm_count: int | None = None, multiple: int = split_loop.UNROLL) -> SplitPlan:
    """The split of `kernel`'s loop at `binding`: `factor` chunks, or the cost model's choice,
    launched as a `multiple` of chunks (those past the used ones leave the identity; the one-launch
    form's whole groups: fused.chunks_for). CompileError (split_loop.NOT_SPLIT) when the loop
    cannot be split."""
    sf = split_loop.split_form(kernel)
    env = dict(binding.env)
    total = _iterations(kernel, sf, env)
    if factor is None:
        factor = choose_factor(math.prod(binding.grid or (1,)), sm_count or device_sm_count(), total)
    per, used = split_loop.chunking(total, factor)
    chunks = math.ceil(used / multiple) * multiple
    made = split_loop.split_kernels(kernel, sf, per)  # IR with the user's spans
    partial = _renamed(made.partial, "partial")
    combine = _renamed(made.combine, "combine")
    dims = dict(binding.dims) | {sf.dim: chunks}
    tiles = dict(binding.tile_values)
    pb = bind(partial, dims, tile_values=tiles)
    cb = bind(combine, dims, tile_values=tiles)
    scratch = tuple(
        (name, tuple(d if isinstance(d, int) else (chunks if d == sf.dim else env[d]) for d in shape))
        for name, shape in made.scratch
    )
    return SplitPlan(chunks, per, used, partial, pb, combine, cb, scratch, sf.axis)


def model_factor(kernel: ir.Kernel, binding: Binding, sm_count: int | None = None,
                 fan_in: int | None = None) -> int:
    """The cost model's factor for `kernel`'s splittable loop at `binding`, merged by a tree of
    `fan_in` (choose_factor): 1 (not split) for a loop of fewer than MIN_SPLIT_ITERATIONS
    iterations, where the second launch would cost about what the split saves."""
    sf = split_loop.split_form(kernel)
    total = _iterations(kernel, sf, dict(binding.env))
    if total < MIN_SPLIT_ITERATIONS:
        return 1
    return choose_factor(math.prod(binding.grid or (1,)), sm_count or device_sm_count(), total, fan_in)


def _iterations(kernel: ir.Kernel, sf: split_loop.SplitForm, env: dict) -> int:
    start, stop, step = split_loop.iterations(kernel, sf.loop, env)
    return max(0, math.ceil((stop - start) / step))


def _renamed(kernel: ir.Kernel, part: str) -> ir.Kernel:
    """The generated kernel under its own entry name, so both live in one module (CompiledLeaf)."""
    return dataclasses.replace(kernel, name=f"{kernel.name}__split_{part}")


def run_split_reference(plan: SplitPlan, tensors: dict, scalars: dict) -> None:
    """Both kernels on the reference interpreter, writing the user's outputs into `tensors`."""
    import numpy as np

    from compiler.interp import interpreter

    scratch = {name: np.full(shape, np.nan, np.float32) for name, shape in plan.scratch}
    both = tensors | scratch
    interpreter.run_kernel(plan.partial, plan.partial_binding, both, scalars)
    interpreter.run_kernel(plan.combine, plan.combine_binding, both, scalars)
    for name in tensors:
        tensors[name] = both[name]
