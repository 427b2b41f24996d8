"""What the renderer reads and never changes: one leaf's lowering decisions (stages.Leaf after
the lay-out stage) gathered in one frozen value, so that the emitter's mutable state
(render_state.py) holds only what rendering itself accumulates."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from compiler.cuda import analysis, mma, target
from compiler.cuda.layout import MmaGrid, ThreadGrid
from compiler.cuda.mainloops.base import Mainloop
from compiler.cuda.mainloops.tma_ws import persistent
from compiler.frontend import ir, walk


@dataclass(frozen=True)
class RenderPlan:
    kernel: ir.Kernel  # after the hoist, split and fit stages
    binding: object  # the tile point (frontend.binding.Binding)
    env: dict  # dim and tile names -> value (compile-time constants; not changed by rendering)
    grid: ThreadGrid | MmaGrid  # the CTA's thread layout (the lay-out stage)
    counts: tuple  # CTAs along x, y, z
    point: str  # the tile point as text, for pruning messages
    params: MappingProxyType  # parameter name -> ir.Param
    stored: frozenset  # the tensors the kernel writes (read-only ones load through __ldg)
    tf32: bool  # every f32 dot on TF32 tensor cores (the kernel-wide opt-in)
    mainloop: Mainloop  # how loops feed the dots (mainloops/)
    tensor_cores: bool  # the tiles are laid out on the tensor-core accumulator layout
    wgmma: bool  # the tensor-core dots run as warpgroup MMA (mainloops/wgmma/mma.py)
    tc_dots: tuple  # the dots that run on tensor cores
    tc_lets: frozenset  # lets staged as tensor-core operands (16-bit or TF32, mma.py)
    tensor_core_span: object  # the first tensor-core dot's span (what target.need_of points at)
    exp2_fold: bool  # exp as exp2 with log2(e) folded in (every dot 16-bit: calls.exp_base2)
    hints: MappingProxyType  # 1-D let name -> 'row' / 'col' layout
    shared: MappingProxyType  # let name -> dot operand role of lets staged in shared memory
    smem_limit: int  # bytes of shared memory a CTA may use on the target (rings are cut to it)
    reversed_blocks: MappingProxyType  # block axis -> CTA count, launched longest-first
    block_remap: MappingProxyType  # block axis -> C name of its index in a CTA order
    cta_order_lines: tuple  # the C lines computing that order (empty: launch order; persistent: per tile)
    fold_chains: int  # chains of a long max/min fold (Schedule.fold_chains, reductions.py)


def render_plan(leaf) -> RenderPlan:
    """The plan of a leaf that went through the stages up to lay out (stages.py)."""
    kernel, plan, grid = leaf.kernel, leaf.plan, leaf.grid
    tensor_cores = isinstance(grid, MmaGrid)
    tf32 = leaf.options.tf32
    counts = tuple(leaf.counts)
    reversed_blocks = {
        axis: counts["xyz".index(axis)] for axis in plan.longest_first if counts["xyz".index(axis)] > 1
    }
    if persistent.asked(plan) and not reversed_blocks:  # tiles, not blocks (codegen prunes the rest)
        remap, order_lines = persistent.tile_order(plan.cta_order, counts)
    else:
        remap, order_lines = cta_order(plan.cta_order, counts, tuple(reversed_blocks))
    return RenderPlan(
        kernel=kernel,
        binding=leaf.binding,
        env=dict(leaf.env),
        grid=grid,
        counts=counts,
        point=point_text(leaf.binding),
        params=MappingProxyType({p.name: p for p in kernel.params}),
        stored=frozenset(walk.stored_tensors(kernel)),
        tf32=tf32,
        mainloop=plan.mainloop,
        tensor_cores=tensor_cores,
        wgmma=plan.wgmma,
        tc_dots=plan.tc_dots,
        tc_lets=frozenset(plan.tc_lets) if tensor_cores else frozenset(),
        tensor_core_span=plan.tc_dots[0].span if tensor_cores else None,
        exp2_fold=tensor_cores
        and all(mma.tensor_core_dtype(d, kernel, tf32) in mma.TC_DTYPES for d in plan.tc_dots),
        hints=MappingProxyType(dict(plan.hints)),
        shared=MappingProxyType(dict(plan.shared)),
        smem_limit=target.shared_memory_limit(leaf.options.cc),
        reversed_blocks=MappingProxyType(reversed_blocks),
        block_remap=MappingProxyType(remap),
        cta_order_lines=tuple(order_lines),
        fold_chains=leaf.options.schedule.fold_chains,
    )


def cta_order(order, counts, reversed_axes: tuple) -> tuple[dict, list[str]]:
    """The grouped CTA order of a 2-D grid (a tuner choice). Without longest-first axes it is
    group-major: CTAs launched one after another take `group` neighbouring x indices and walk y,
    so that they share rows of the x operand and a small band of the y operand in L2. Where x is
    launched longest first (causal attention: x the query block, y the head) it is the same walk
    with groups of one x index, from the last: the launch order then runs over every head's
    longest CTAs before any shorter ones (longest_first_order), not over one head's blocks at a
    time, so the grid's tail holds the shortest CTAs of all heads."""
    gx, gy = counts[0], counts[1]
    if order.order != "grouped" or gx <= 1 or gy <= 1:
        return {}, []
    if reversed_axes:
        return longest_first_order(counts, reversed_axes)
    g = min(order.group, gx)
    return {"x": "cta_x", "y": "cta_y"}, [
        f"const int cta_id = (int)blockIdx.x + (int)blockIdx.y * {gx};",
        f"const int cta_first = (cta_id / {g * gy}) * {g};",
        f"const int cta_rows = min({gx} - cta_first, {g});",
        f"const int cta_x = cta_first + (cta_id % {g * gy}) % cta_rows;",
        f"const int cta_y = (cta_id % {g * gy}) / cta_rows;",
    ]


def longest_first_order(counts, reversed_axes: tuple) -> tuple[dict, list[str]]:
    """x slowest and reversed, y fastest: with CTAs of equal work along y (heads) and work
    growing with x, the launch order is longest first over the whole grid, which leaves the
    shortest CTAs for the last wave.
    Only for x alone reversed on a 2-D grid: with y reversed too (or a z axis), launch order stays."""
    gx, gy, gz = counts
    if tuple(reversed_axes) != ("x",) or gz > 1:
        return {}, []
    return {"x": "cta_x", "y": "cta_y"}, [
        f"const int cta_id = (int)blockIdx.x + (int)blockIdx.y * {gx};",
        f"const int cta_x = {gx - 1} - cta_id / {gy};",
        f"const int cta_y = cta_id % {gy};",
    ]


def block_ranges(counts) -> dict[str, analysis.IntRange]:
    """The value range of each block index (`%x`, `%y`, `%z`)."""
    return {"%" + a: analysis.IntRange(0, counts[i] - 1, 1) for i, a in enumerate("xyz")}


def point_text(binding) -> str:
    return ", ".join(f"{k}={v}" for k, v in binding.tile_values.items()) or "the only point"
