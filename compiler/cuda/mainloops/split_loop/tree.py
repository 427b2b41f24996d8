"""The split-loop's partials merged by a tree of parallel launches before the combine kernel.

The combine kernel (mainloops/split_loop/transform.py) merges the chunks' partials one after another on the
user's grid, which for decode is one CTA: a chain of `factor` merges, each waiting on its reads (on the H100,
about 2.5 us per step of split_loop.UNROLL partials: 160 us of a 370 us call at S = 2^20). Here the partials
are first merged `fan_in` at a time by merge kernels whose grid covers (rows, groups of partials, columns):
each level turns n partials into ceil(n / fan_in) (padded to a multiple of UNROLL with identity partials,
which every merge takes as nothing), until at most `fan_in` are left for the combine, which then runs the
user's store after fan_in / UNROLL steps.

    tree_sizes(n, fan_in)                   [n, n1, ...]: partials before each level and after the last
    plan_tree(kernel, plan, fan_in)         Tree: the merge kernels, bound, their scratch, the
                                            combine rebound to the partials the tree leaves

Each level reads one set of scratch buffers and writes the other: set A is the partial kernel's
(`m_part`, `l_part`, `acc_part` or split-K's `acc_part`), set B is the tree's own. The number of
levels is even, so the last writes set A and the combine reads the buffers it was generated for
(in their first rows: a buffer of `factor` rows holds one of fewer at the same addresses). The
merge is the one description of it (compiler/cluster/partial_leaves.py), printed as phobos source
over the scratch flattened to [partials, R, C] (R rows of the output, C its last dimension), and
compiled by the ordinary leaf pipeline. `fan_in` 0 is no tree (the combine merges every partial);
the default is PHOBOS_SPLIT_FAN_IN's (common/options.py, 8), which benchmarks/decode_sweep.sh sweeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.cluster.accumulate import Accumulator
from compiler.cluster.partial_leaves import fresh, softmax_merge_lines, sum_merge_line
from compiler.cuda.mainloops.split_loop import transform as split_loop
from compiler.frontend import ir
from compiler.frontend.binding import Binding, bind
from compiler.frontend.load import load_text

# no tree for at most this many fan-ins' worth of partials: a tree is at least two levels (one
# step of UNROLL merges and a launch each, then the combine's step), which saves nothing on a
# combine of 3 fan_in / UNROLL steps or fewer (a step ~2.9 us, a launch gap ~2 us: H100 estimates)
FLAT_UP_TO = 3
ROW_TILES = (16, 8, 4, 2, 1)
# elements of acc per merge CTA: a level's time is its chain of steps, each waiting on its reads,
# so small tiles cost nothing there and spread a level's reads over more SMs (256 -> 32 partials
# of [16, 128] is 128 CTAs of [16, 32], not 32)
MAX_TILE = 512
COL_TILES = (128, 64, 32, 16, 8, 4, 2, 1)


@dataclass(frozen=True)
class Tree:
    merges: tuple[tuple[ir.Kernel, Binding], ...]  # in launch order
    scratch: tuple[tuple[str, tuple[int, ...]], ...]  # set B, f32
    combine_binding: Binding  # the combine at the partials the last level leaves
    sizes: tuple[int, ...]  # partials before each level and after the last


def tree_sizes(n: int, fan_in: int) -> list[int]:
    """Partials before each level and after the last: levels until at most `fan_in` are left,
    and an even number of them (the last writes set A); [n] when there is no tree (fan-in 0, or
    at most FLAT_UP_TO fan-ins of partials). A fan-in
    that is not a multiple of split_loop.UNROLL is rounded up to one."""
    sizes = [n]
    if fan_in <= 0:
        return sizes
    fan_in = split_loop.padded(fan_in)  # whole steps of the merge's UNROLL
    if n <= FLAT_UP_TO * fan_in:
        return sizes
    while sizes[-1] > fan_in or (len(sizes) - 1) % 2:
        sizes.append(split_loop.padded(math.ceil(sizes[-1] / fan_in)))
    return sizes


def _tile(n: int, choices: tuple[int, ...]) -> int:
    return next(t for t in choices if n % t == 0)


def _flat(shape: tuple[int, ...], matrix: bool) -> tuple[int, int]:
    """(R, C) of a scratch buffer's shape without its partials axis: the output's rows and last
    dimension (C = 1 for the per-row m and l)."""
    rest = shape[1:]
    if not matrix:
        return math.prod(rest), 1
    return math.prod(rest[:-1]), rest[-1]


def merge_source(name: str, accumulator: bool, ins: tuple[str, ...], outs: tuple[str, ...],
                 rows: int, cols: int, n_in: int, n_out: int, fan_in: int, group: str | None = None) -> str:
    """One level's kernel: CTA (x, y, z) merges partials [y fan_in, (y + 1) fan_in) of rows
    x BR.., columns z BC.. into partial y of the `outs` buffers. With `group` (a scalar's name),
    the kernel's one CTA merges every row and column of partials [group fan_in, ..) into partial
    `group`: the one-launch form's merge, run by the CTA that finished a group last (fused.py)."""
    br = rows if group else _tile(rows, ROW_TILES)
    bc = cols if group else _tile(cols, tuple(c for c in COL_TILES if c * br <= MAX_TILE))
    slot = group or "ctx.block.y"
    taken = {"row", "col", "first", "chunk", *ins, *outs}
    reads, merges = [], []
    for u in range(split_loop.UNROLL):
        at = f"chunk + {u}" if u else "chunk"
        if accumulator:
            reads.append(f"let acc_{u} = {ins[0]}[{at}, row :+ BR, col :+ BC]")
            merges.append(sum_merge_line("acc", f"acc_{u}"))
            continue
        reads += [f"let m_{u} = {ins[0]}[{at}, row :+ BR]", f"let l_{u} = {ins[1]}[{at}, row :+ BR]",
                  f"let acc_{u} = {ins[2]}[{at}, row :+ BR, col :+ BC]"]
        lets = tuple(f"{n}_{u}" for n in ("m_a", "m_b", "m_ab", "c_a", "c_b"))
        taken |= set(lets)
        merges += softmax_merge_lines(("m", "l", "acc"), (f"m_{u}", f"l_{u}", f"acc_{u}"), 1, lets)
    body = "\n    ".join(reads + merges)
    if accumulator:
        params = f"{ins[0]}: tensor<f32>[NIN, R, C], {outs[0]}: tensor<f32>[NOUT, R, C]"
        state = "  var acc: tile<f32>[BR, BC] = 0.0"
        stores = f"  {outs[0]}[{slot}, row :+ BR, col :+ BC] = acc"
    else:
        params = (f"{ins[0]}: tensor<f32>[NIN, R], {ins[1]}: tensor<f32>[NIN, R], "
                  f"{ins[2]}: tensor<f32>[NIN, R, C], {outs[0]}: tensor<f32>[NOUT, R], "
                  f"{outs[1]}: tensor<f32>[NOUT, R], {outs[2]}: tensor<f32>[NOUT, R, C]")
        state = ("  var m: tile<f32>[BR] = -inf\n  var l: tile<f32>[BR] = 0.0\n"
                 "  var acc: tile<f32>[BR, BC] = 0.0")
        stores = (f"  {outs[0]}[{slot}, row :+ BR] = m\n  {outs[1]}[{slot}, row :+ BR] = l\n"
                  f"  {outs[2]}[{slot}, row :+ BR, col :+ BC] = acc")
    if group:
        params += f", {group}: i32"
    row, col = ("0", "0") if group else ("ctx.block.x * BR", "ctx.block.z * BC")
    return f"""@autotune(BR in [{br}], BC in [{bc}])
kernel {name}({params}) {{
  let row = {row}
  let col = {col}
  let first = {slot} * {fan_in}
{state}
  for chunk in range(first, min(NIN, first + {fan_in}), {split_loop.UNROLL}) {{
    {body}
  }}
{stores}
}}
"""


def plan_tree(kernel: ir.Kernel, plan, fan_in: int) -> Tree:
    """The merge levels of `plan` (split_plan.SplitPlan) at `fan_in`, and the combine rebound."""
    sizes = tree_sizes(plan.factor, fan_in)
    fan_in = split_loop.padded(max(fan_in, 1))
    if len(sizes) == 1:
        return Tree((), (), plan.combine_binding, tuple(sizes))
    sf = split_loop.split_form(kernel)
    accumulator = isinstance(sf.form, Accumulator)
    set_a = tuple(name for name, _ in plan.scratch)
    shapes = dict(plan.scratch)
    taken = set(set_a) | {p.name for p in kernel.params}
    set_b = tuple(fresh(f"{n}_tree", taken) for n in set_a)
    acc_shape = shapes[set_a[-1]]
    rows, cols = _flat(acc_shape, matrix=True)
    b_rows = max(sizes[1::2])  # set B holds the outputs of levels 1, 3, ...
    scratch = tuple((nb, (b_rows, *shapes[na][1:])) for na, nb in zip(set_a, set_b, strict=True))
    merges = []
    for level, (n_in, n_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
        ins, outs = (set_a, set_b) if level % 2 == 0 else (set_b, set_a)
        name = f"{kernel.name}__split_merge{level}"
        text = merge_source(name, accumulator, ins, outs, rows, cols, n_in, n_out, fan_in)
        merge = load_text(text, f"<split merge of {kernel.name}>").kernels[0]
        merges.append((merge, bind(merge, {"NIN": n_in, "NOUT": n_out, "R": rows, "C": cols})))
    dims = dict(plan.combine_binding.dims) | {sf.dim: sizes[-1]}
    combine = bind(plan.combine, dims, tile_values=dict(plan.combine_binding.tile_values))
    return Tree(tuple(merges), scratch, combine, tuple(sizes))



def run_reference(plan, tree: Tree, tensors: dict, scalars: dict) -> None:
    """Partial, merge levels and combine on the reference interpreter (NaN-filled scratch, so a
    read of a partial no launch wrote shows), writing the user's outputs into `tensors`."""
    import numpy as np

    from compiler.interp import interpreter

    scratch = {name: np.full(shape, np.nan, np.float32) for name, shape in plan.scratch + tree.scratch}
    both = tensors | scratch
    interpreter.run_kernel(plan.partial, plan.partial_binding, both, scalars)
    for merge, b in tree.merges:
        interpreter.run_kernel(merge, b, _view(merge, b, both), {})
    combine = _view(plan.combine, tree.combine_binding, both)
    interpreter.run_kernel(plan.combine, tree.combine_binding, combine, scalars)
    for name in tensors:
        tensors[name] = both[name]


def _view(kernel: ir.Kernel, b: Binding, arrays: dict) -> dict:
    """The arrays as `kernel` at `b` declares them: a scratch buffer's leading rows (a view)."""
    out = {}
    for t in kernel.tensors:
        shape = tuple(d if isinstance(d, int) else b.dims[d] for d in t.dims)
        a = arrays[t.name]
        out[t.name] = a if a.shape == shape else a.reshape(-1)[: math.prod(shape)].reshape(shape)
    return out
