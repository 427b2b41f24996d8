"""How far a split loop is split (split_loop.py), and the two bound kernels that run it.

    choose_factor(ctas, sm_count, iterations)   the cost model's split factor
    plan_split(kernel, binding, factor=None)     SplitPlan: partial and combine kernels, bound
    run_split_reference(plan, tensors, scalars)  both kernels on the reference interpreter

The factor: a grid of `ctas` CTAs that already fills `CTAS_PER_SM` waves of the GPU's
multiprocessors is not split; otherwise each CTA's loop is cut into as many chunks as bring the
grid to that many CTAs, no chunk shorter than `MIN_CHUNK_ITERATIONS` iterations (a chunk must run
long enough to fill its copy pipeline) and never more chunks than iterations. A user forces the
factor with `split=N` (the `--split N` flag); 1 is the one-CTA loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.cuda import split_loop
from compiler.frontend import ir
from compiler.frontend.binding import Binding, bind
from compiler.frontend.load import load_text

CTAS_PER_SM = 2  # resident CTAs per multiprocessor that saturate its memory pipe (decode's shapes)
MIN_CHUNK_ITERATIONS = 2
DEFAULT_SM_COUNT = 132  # an H100 SXM's; the device's own count is used where one is at hand


def choose_factor(ctas: int, sm_count: int, iterations: int) -> int:
    want = CTAS_PER_SM * sm_count
    if ctas >= want or iterations < 2 * MIN_CHUNK_ITERATIONS:
        return 1
    factor = math.ceil(want / max(ctas, 1))
    return max(1, min(factor, iterations // MIN_CHUNK_ITERATIONS))


def device_sm_count() -> int:
    try:
        import cupy

        return int(cupy.cuda.Device().attributes["MultiProcessorCount"])
    except Exception:  # no GPU here (CPU machines compile for the default target)
        return DEFAULT_SM_COUNT


@dataclass(frozen=True)
class SplitPlan:
    factor: int  # chunks (CTAs along the split axis); 1: not split
    chunk_iterations: int
    partial: ir.Kernel
    partial_binding: Binding
    combine: ir.Kernel
    combine_binding: Binding
    scratch: tuple[tuple[str, tuple[int, ...]], ...]  # f32 buffers between the two launches
    axis: str


def plan_split(kernel: ir.Kernel, binding: Binding, factor: int | None = None,
               sm_count: int | None = None) -> SplitPlan:
    """The split of `kernel`'s loop at `binding`: `factor` chunks, or the cost model's choice.
    CompileError (split_loop.NOT_SPLIT) when the loop cannot be split."""
    sf = split_loop.split_form(kernel)
    env = dict(binding.env)
    start, stop, step = split_loop.iterations(kernel, sf.loop, env)
    total = max(0, math.ceil((stop - start) / step))
    if factor is None:
        factor = choose_factor(math.prod(binding.grid or (1,)), sm_count or device_sm_count(), total)
    per, chunks = split_loop.chunking(total, factor)
    texts = split_loop.split_texts(kernel, sf, per)
    partial = load_text(texts.partial, f"<split partial of {kernel.name}>").kernels[0]
    combine = load_text(texts.combine, f"<split combine of {kernel.name}>").kernels[0]
    dims = dict(binding.dims) | {sf.dim: chunks}
    tiles = dict(binding.tile_values)
    pb = bind(partial, dims, tile_values=tiles)
    cb = bind(combine, dims, tile_values=tiles)
    scratch = tuple(
        (name, tuple(d if isinstance(d, int) else (chunks if d == sf.dim else env[d]) for d in shape))
        for name, shape in texts.scratch
    )
    return SplitPlan(chunks, per, partial, pb, combine, cb, scratch, sf.axis)


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
