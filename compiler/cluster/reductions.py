"""The leaves and units of a combinable cluster loop (combine.py), split over nodes or not.

    combine_leaves(kernel, combine, tiled, request) -> {leaf name: leaf kernel (IR, unchecked)}
    split_units(units, tensors, kernel, combine, request, variant) -> units split into shares

Without a split request a linear accumulator keeps its two leaves (init, step) and units; an
online softmax gets its partial's leaves (init, step, finish) and runs as one share.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from compiler.cluster.accumulate import Accumulator
from compiler.cluster.combine import Combine
from compiler.cluster.leaves import init_leaf, step_leaf
from compiler.cluster.partial_leaves import (
    PartialNames,
    fresh,
    softmax_finish,
    softmax_init,
    softmax_merge_leaf,
    softmax_step,
    sum_merge_leaf,
)
from compiler.cluster.split import Partials, check_shares, reduction_of, split_unit
from compiler.cluster.tree import SplitRequest
from compiler.frontend import ir, walk
from schemas.program import Region, TensorInfo, Unit


def _taken(kernel: ir.Kernel) -> set[str]:
    names = {p.name for p in kernel.params} | {
        d.name for a in (kernel.autotune, kernel.cluster) if a for d in a.dims
    }
    names |= {s.name for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let | ir.VarDecl)}
    names |= {s.var for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.For)}
    return names | {d for t in kernel.tensors for d in t.dims if isinstance(d, str)}


def _names(kernel: ir.Kernel, combine: Combine) -> tuple[PartialNames, PartialNames]:
    """Partial parameter names that clash with nothing in the kernel (nor with each other)."""
    taken = _taken(kernel)
    if isinstance(combine, Accumulator):
        out = combine.store.tensor
        mine = PartialNames(out, out, out)
        return mine, PartialNames(*(fresh(out + "_from", taken),) * 3)
    mine = PartialNames(*(fresh(d.name + "_partial", taken) for d in (combine.m, combine.l, combine.acc)))
    return mine, mine.other(taken)


def _out(kernel: ir.Kernel, combine: Combine) -> ir.TensorParam:
    return next(t for t in kernel.tensors if t.name == combine.store.tensor)


def combine_leaves(
    kernel: ir.Kernel, combine: Combine, tiled, request: SplitRequest | None
) -> dict[str, ir.Kernel]:
    split = request is not None and request.shares > 1
    mine, other = _names(kernel, combine)
    out = _out(kernel, combine)
    if isinstance(combine, Accumulator):
        leaves = {"init": init_leaf(kernel, combine, tiled), "step": step_leaf(kernel, combine)}
        if split and combine.beta is not None:  # shares other than the root start at 0, not beta * C
            leaves["zero"] = init_leaf(kernel, dataclasses.replace(combine, beta=None), tiled)
        if split:
            leaves["merge"] = sum_merge_leaf(kernel, combine.store, out, tiled, other.m)
        return leaves
    leaves = {
        "init": softmax_init(kernel, combine, out, tiled, mine),
        "step": softmax_step(kernel, combine, mine),
        "finish": softmax_finish(kernel, combine, out, tiled, mine),
    }
    if split:
        leaves["merge"] = softmax_merge_leaf(kernel, combine, out, tiled, mine, other)
    return leaves


def split_units(units: tuple[Unit, ...], tensors: tuple[TensorInfo, ...], kernel: ir.Kernel, combine: Combine,
                request: SplitRequest | None, variant: Callable[[str, Region], str]):
    """(units, partial tensors, Reduction or None): `units` (init then one step per chunk each)
    split into shares; `variant(base, output region)` names a generated leaf bound to that region's
    extents (a ragged last super-tile's)."""
    softmax = not isinstance(combine, Accumulator)
    if not softmax and (request is None or request.shares == 1):
        return units, (), None  # one share of a sum: the output's buffer is the partial, as ever
    request = request or SplitRequest(1)
    check_shares(request, len(units[0].launches) - 1)
    mine, other = _names(kernel, combine)
    out = next(t for t in tensors if t.name == combine.store.tensor)
    if softmax:
        params = ((mine.m, mine.m), (mine.l, mine.l), (mine.acc, mine.acc))
        other_params = (other.m, other.l, other.acc)
    else:
        params, other_params = ((out.name, out.name + "~partial"),), (other.m,)
    partials = Partials("softmax" if softmax else "sum", out, params, other_params, request.shares)
    reduction = reduction_of(partials.form, request)
    zero = "zero" if not softmax and combine.beta is not None else None
    split = tuple(split_unit(u, out.name, partials, reduction.rounds, zero, variant) for u in units)
    return split, partials.tensors(), reduction
