"""Split-loop over CTAs (flash-decoding, split-K): the first mainloop policy beside the one-CTA
loop of the leaf compiler. A top-level `for` that carries an associative state is cut into
`factor` chunks of whole iterations; each chunk runs on its own CTA along a free grid axis and
leaves its partial state in a scratch buffer; a second kernel merges the partials and runs the
user's store once. Both kernels are IR made from the user's checked kernel (as the cluster
compiler makes its leaves, compiler/frontend/rewrite.py: no source text is edited or parsed),
checked and compiled by the ordinary leaf pipeline; they keep the user's spans, so an error in
them still points at the user's line.

    partial   the user's kernel, its vars starting at the state's identity, its loop restricted
              to chunk ctx.block.<free axis>, its store replaced by stores of the state into
              `<var>_part[chunk, <the store's index>]` (f32 scratch, one slice per chunk)
    combine   the user's kernel with the loop replaced by a loop over the chunks that merges each
              partial into the vars (starting from the user's own initial values), then the
              user's store

The states accepted are the cluster compiler's two combinable forms (compiler/cluster/combine.py:
a linear accumulator, an online softmax (m, l, acc)), and the merge is that module's one
description of it (partial_leaves.softmax_merge / sum_merge), used at both levels. A
loop of another form is not split; `why_not_split` says why (compiler check --split N).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from compiler.cluster.accumulate import Accumulator, check_running_sum
from compiler.cluster.combine import check_cluster_loop
from compiler.cluster.leaves import laid_out
from compiler.cluster.partial_leaves import MERGE_LETS, Place, fresh, softmax_merge, sum_merge
from compiler.cluster.softmax import NotSoftmax, OnlineSoftmax, check_resumed_softmax
from compiler.frontend import ir, rewrite, walk
from compiler.frontend.affine import affine_of
from compiler.frontend.check import check_kernel
from compiler.frontend.diagnostics import CompileError

AXES = ("x", "y", "z")
NOT_SPLIT = "this loop is not split over CTAs"
UNROLL = 4  # partials the combine kernel reads per step of its loop


@dataclass(frozen=True)
class SplitForm:
    """A loop that may be split: its merge form, the grid axis its chunks take, and the names of
    the generated scratch tensors and split dimension."""

    form: Accumulator | OnlineSoftmax
    loop: ir.For
    axis: str
    dim: str  # the number of chunks, a dimension of the scratch tensors
    parts: tuple[str, ...]  # scratch tensor names, one per var of the state (m, l, acc / acc)
    chunk_var: str  # the combine kernel's loop variable


@dataclass(frozen=True)
class SplitKernels:
    partial: ir.Kernel
    combine: ir.Kernel
    scratch: tuple[tuple[str, tuple], ...]  # (tensor name, dims) of each scratch buffer, f32


def _top_loops(kernel: ir.Kernel) -> list[ir.For]:
    return [s for s in kernel.body if isinstance(s, ir.For)]


def split_form(kernel: ir.Kernel) -> SplitForm:
    """The kernel's one top-level loop as a splittable state, or CompileError saying why not."""
    loops = _top_loops(kernel)
    if len(loops) != 1:
        raise CompileError(kernel.span, f"{NOT_SPLIT}: a split needs exactly one top-level `for` loop "
                           f"(this kernel has {len(loops)})")
    loop = loops[0]
    form = _form(kernel, loop)
    used = {g.axis for g in kernel.grid}
    free = [a for a in AXES if a not in used]
    if not free:
        raise CompileError(
            loop.span, f"{NOT_SPLIT}: the kernel uses all three grid axes, none is left for the chunks"
        )
    _check_bounds(kernel, loop)
    taken = _taken(kernel)
    if isinstance(form, Accumulator):
        parts = (fresh(form.var + "_part", taken),)
    else:
        parts = tuple(fresh(d.name + "_part", taken) for d in (form.m, form.l, form.acc))
    return SplitForm(form, loop, free[0], fresh("NSPLIT", taken), parts, fresh("chunk", taken))


def why_not_split(kernel: ir.Kernel) -> CompileError | None:
    try:
        split_form(kernel)
    except CompileError as err:
        return err
    return None


SPLIT_WORDING = {
    "softmax": "it is closest to the online softmax (m, l, acc)",
    "accumulator": "it is closest to a linear accumulator (`acc += ..` stored once)",
}


def _split_wording(form: str, why: str) -> str:
    return f"{NOT_SPLIT}: its state is not associative as written; {SPLIT_WORDING[form]}, but {why}"


def _form(kernel: ir.Kernel, loop: ir.For) -> Accumulator | OnlineSoftmax:
    """The cluster compiler's combinable forms, its reasons reworded for a split over CTAs; or
    a cluster's own step leaf, which resumes a partial (a node's share splits over the node's CTAs
    as a leaf's loop does): an online softmax's (softmax.check_resumed_softmax) or a sum's
    (accumulate.check_running_sum). The first form's reason is the one given."""
    try:
        return check_cluster_loop(kernel, loop, explain=_split_wording)
    except CompileError:
        try:
            return check_resumed_softmax(kernel, loop)
        except NotSoftmax:
            pass
        try:
            return check_running_sum(kernel, loop)
        except CompileError:
            pass
        raise


def _check_bounds(kernel: ir.Kernel, loop: ir.For) -> None:
    env = {s.name: s.value for s in kernel.body if isinstance(s, ir.Let)}
    for e in (loop.start, loop.stop):
        a = affine_of(e, env)
        if a is None or not a.is_constant:
            raise CompileError(e.span, f"{NOT_SPLIT}: its bounds must be fixed for the launch "
                               "(dimensions and literals), not depend on the block index or a scalar")


def iterations(kernel: ir.Kernel, loop: ir.For, env: dict) -> tuple[int, int, int]:
    """(start, stop, step) of the loop at a binding's environment."""
    lets = {s.name: s.value for s in kernel.body if isinstance(s, ir.Let)}
    start = affine_of(loop.start, lets).const.evaluate(dict(env))
    stop = affine_of(loop.stop, lets).const.evaluate(dict(env))
    step = loop.step.name if isinstance(loop.step, ir.Name) else None
    step_value = env[step] if step is not None else int(loop.step.value)
    return start, stop, step_value


def _taken(kernel: ir.Kernel) -> set[str]:
    names = {p.name for p in kernel.params}
    names |= {d.name for a in (kernel.autotune, kernel.cluster) if a for d in a.dims}
    names |= {s.name for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.Let | ir.VarDecl)}
    names |= {s.var for s in walk.iter_stmts(kernel.body) if isinstance(s, ir.For)}
    return names | {d for t in kernel.tensors for d in t.dims if isinstance(d, str)}


def _scratch_params(sf: SplitForm, out: ir.TensorParam) -> list[tuple[str, tuple]]:
    dims = tuple(out.dims)
    if isinstance(sf.form, Accumulator):
        return [(sf.parts[0], (sf.dim, *dims))]
    rows = (sf.dim, *dims[:-1])
    return [(sf.parts[0], rows), (sf.parts[1], rows), (sf.parts[2], (sf.dim, *dims))]


def split_kernels(kernel: ir.Kernel, sf: SplitForm, chunk_iterations: int) -> SplitKernels:
    """The partial and combine kernels, IR made from the checked `kernel` and checked; each chunk
    holds `chunk_iterations` iterations. They keep the user's nodes and spans (an error in them
    points at the user's line); a generated node takes the span of the user's code it replaces."""
    store = sf.form.store
    out = next(t for t in kernel.tensors if t.name == store.tensor)
    scratch = _scratch_params(sf, out)
    last = kernel.tensors[-1]
    at = kernel.params.index(last) + 1
    added = tuple(ir.TensorParam(n, "f32", d, last.span) for n, d in scratch)
    attributes = tuple(a for a in kernel.attributes if not isinstance(a, ir.Cluster))
    header = dataclasses.replace(kernel, params=kernel.params[:at] + added + kernel.params[at:],
                                 attributes=attributes)
    state = _state(kernel, sf)
    r, r1 = store.index, store.index[:-1]
    indices = (r,) if len(state) == 1 else (r1, r1, r)
    text = laid_out(kernel)
    partial = _partial(header, sf, state, indices, chunk_iterations)
    combine = _combine(header, sf, state, indices, out, _taken(kernel))
    return SplitKernels(check_kernel(partial, text), check_kernel(combine, text), tuple(scratch))


def _state(kernel: ir.Kernel, sf: SplitForm) -> tuple[ir.VarDecl, ...]:
    if isinstance(sf.form, Accumulator):
        return (next(s for s in kernel.body if isinstance(s, ir.VarDecl) and s.name == sf.form.var),)
    return (sf.form.m, sf.form.l, sf.form.acc)


def _identity(decl: ir.VarDecl, form) -> ir.Const:
    value = float("-inf") if isinstance(form, OnlineSoftmax) and decl is form.m else 0.0
    return ir.Const(value, decl.init.span)


def _partial(kernel: ir.Kernel, sf: SplitForm, state, indices, chunk_iterations: int) -> ir.Kernel:
    """The loop restricted to chunk ctx.block.<axis>, the vars starting at the state's identity
    (the user's start merges last, in the combine), the store turned into the partials' stores."""
    loop, store = sf.loop, sf.form.store
    span = loop.span
    width = ir.BinOp("*", ir.Const(chunk_iterations, loop.step.span), loop.step, loop.step.span)
    chunk_start = ir.BinOp("*", ir.BlockIndex(sf.axis, span), width, span)
    first = ir.BinOp("+", loop.start, chunk_start, loop.start.span)
    stop = ir.Call("min", (loop.stop, ir.BinOp("+", first, width, loop.stop.span)), loop.stop.span)
    body = rewrite.replace_stmt(kernel.body, loop, (dataclasses.replace(loop, start=first, stop=stop),))
    for decl in state:
        body = rewrite.replace_stmt(body, decl, (dataclasses.replace(decl, init=_identity(decl, sf.form)),))
    chunk = ir.SliceIndex(ir.BlockIndex(sf.axis, store.span), store.span)
    stores = tuple(ir.Store(part, (chunk, *idx), "=", ir.Name(d.name, store.span), store.span)
                   for part, idx, d in zip(sf.parts, indices, state, strict=True))
    body = rewrite.replace_stmt(body, store, stores)
    # an accumulator's `c_old` belongs to the store only; a resumed partial's other stores too
    for s in _after_loop(kernel, sf):
        if s is not store:
            body = rewrite.replace_stmt(body, s, ())
    return dataclasses.replace(kernel, body=body)


def _after_loop(kernel: ir.Kernel, sf: SplitForm) -> tuple[ir.Stmt, ...]:
    at = next(i for i, s in enumerate(kernel.body) if s is sf.loop)
    return kernel.body[at + 1 :]


def _combine(kernel: ir.Kernel, sf: SplitForm, state, indices, out, taken: set[str]) -> ir.Kernel:
    """The loop replaced by one over the chunks, merged UNROLL at a time from the user's own
    initial values, every chunk's partial read before any merge, so the reads of one step are in
    flight together (the chain of merges is what is serial); then the user's store."""
    c, span = sf.chunk_var, sf.loop.span
    taken = taken | {c, *sf.parts, sf.dim}
    reads: list[ir.Stmt] = []
    merges: list[ir.Stmt] = []
    for u in range(UNROLL):
        at: ir.Expr = ir.Name(c, span)
        if u:
            at = ir.BinOp("+", at, ir.Const(u, span), span)
        names = [fresh(f"{d.name}_{c}{u}", taken) for d in state]
        reads += [ir.Let(n, ir.Load(part, (ir.SliceIndex(at, span), *idx), span), span)
                  for n, part, idx in zip(names, sf.parts, indices, strict=True)]
        merges += _merge(sf, state, names, out, taken, f"{c}{u}", span)
    loop = ir.For(c, ir.Const(0, span), ir.Name(sf.dim, span), ir.Const(UNROLL, span),
                  tuple(reads + merges), span)
    return dataclasses.replace(kernel, body=rewrite.replace_stmt(kernel.body, sf.loop, (loop,)))


def _merge(sf: SplitForm, state, theirs: list[str], out, taken: set[str], tag: str, span) -> list[ir.Stmt]:
    """One partial merged into the vars: the one merge description (partial_leaves.py)."""
    if isinstance(sf.form, Accumulator):
        return [sum_merge(Place(state[0].name, span), Place(theirs[0], span))]
    lets = tuple(fresh(f"{n}_{tag}", taken) for n in MERGE_LETS)
    mine = tuple(Place(d.name, span) for d in state)
    return list(softmax_merge(mine, tuple(Place(n, span) for n in theirs), len(out.dims) - 1, lets, span))


def chunking(total_iterations: int, factor: int) -> tuple[int, int]:
    """(iterations per chunk, chunks) for at most `factor` chunks, none of them empty."""
    factor = max(1, min(factor, total_iterations))
    per = math.ceil(total_iterations / factor) if total_iterations else 1
    return per, max(1, math.ceil(total_iterations / per)) if total_iterations else 1


def padded(chunks: int) -> int:
    """The chunks launched: a multiple of the combine's UNROLL. A chunk past the loop's end runs
    no iteration and leaves the state's identity, which every merge takes as nothing."""
    return math.ceil(chunks / UNROLL) * UNROLL
