"""Split-loop over CTAs (flash-decoding, split-K): the first mainloop policy beside the one-CTA
loop of the leaf compiler. A top-level `for` that carries an associative state is cut into
`factor` chunks of whole iterations; each chunk runs on its own CTA along a free grid axis and
leaves its partial state in a scratch buffer; a second kernel merges the partials and runs the
user's store once. Both kernels are phobos source, generated from the user's text, parsed, checked
and compiled by the ordinary leaf pipeline, so an error in them still points at the user's line.

    partial   the user's kernel, its vars starting at the state's identity, its loop restricted
              to chunk ctx.block.<free axis>, its store replaced by stores of the state into
              `<var>_part[chunk, <the store's index>]` (f32 scratch, one slice per chunk)
    combine   the user's kernel with the loop replaced by a loop over the chunks that merges each
              partial into the vars (starting from the user's own initial values), then the
              user's store

The states accepted are the cluster compiler's two combinable forms (compiler/cluster/combine.py:
a linear accumulator, an online softmax (m, l, acc)), and the merge is that module's one
description of it (partial_leaves.softmax_merge_lines / sum_merge_line), used at both levels. A
loop of another form is not split; `why_not_split` says why (compiler check --split N).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from compiler.cluster.accumulate import Accumulator
from compiler.cluster.combine import check_cluster_loop
from compiler.cluster.leaves import KernelText
from compiler.cluster.partial_leaves import fresh, softmax_merge_lines, sum_merge_line
from compiler.cluster.softmax import OnlineSoftmax
from compiler.frontend import ir, walk
from compiler.frontend.affine import affine_of
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.source import Span

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
class SplitTexts:
    partial: str
    combine: str
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
    """The cluster compiler's combinable forms, its reasons reworded for a split over CTAs."""
    return check_cluster_loop(kernel, loop, explain=_split_wording)


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


def _store_index(kt: KernelText, store: ir.Store, drop_last: bool) -> str:
    items = store.index[:-1] if drop_last else store.index
    return kt.of(items[0].span.to(items[-1].span)) if items else ""


def _scratch_params(sf: SplitForm, out: ir.TensorParam) -> list[tuple[str, tuple]]:
    dims = tuple(out.dims)
    if isinstance(sf.form, Accumulator):
        return [(sf.parts[0], (sf.dim, *dims))]
    rows = (sf.dim, *dims[:-1])
    return [(sf.parts[0], rows), (sf.parts[1], rows), (sf.parts[2], (sf.dim, *dims))]


def _param_text(name: str, dims: tuple) -> str:
    return f"{name}: tensor<f32>[{', '.join(str(d) for d in dims)}]"


def split_texts(kernel: ir.Kernel, sf: SplitForm, chunk_iterations: int) -> SplitTexts:
    """The partial and combine kernels' sources; each chunk holds `chunk_iterations` iterations."""
    kt = KernelText(kernel)
    store = sf.form.store
    out = next(t for t in kernel.tensors if t.name == store.tensor)
    scratch = _scratch_params(sf, out)
    params = ", ".join(_param_text(n, d) for n, d in scratch)
    last = kernel.tensors[-1]
    common: list[tuple[Span, str | None]] = [(last.span, f"{kt.of(last.span)}, {params}")]
    if kernel.cluster is not None:
        common.append((kernel.cluster.span, None))
    state = _state(kernel, sf)
    r, r1 = _store_index(kt, store, False), _store_index(kt, store, True)
    indices = [r] if len(state) == 1 else [r1, r1, r]
    partial = _partial_text(kt, kernel, sf, state, indices, chunk_iterations, common)
    combine = _combine_text(kt, sf, state, indices, out, common, _taken(kernel))
    return SplitTexts(partial, combine, tuple(scratch))


def _state(kernel: ir.Kernel, sf: SplitForm) -> tuple[ir.VarDecl, ...]:
    if isinstance(sf.form, Accumulator):
        return (next(s for s in kernel.body if isinstance(s, ir.VarDecl) and s.name == sf.form.var),)
    return (sf.form.m, sf.form.l, sf.form.acc)


def _identity(decl: ir.VarDecl, form) -> str:
    return "-inf" if isinstance(form, OnlineSoftmax) and decl is form.m else "0.0"


def _partial_text(kt, kernel, sf: SplitForm, state, indices, chunk_iterations: int, common) -> str:
    loop = sf.loop
    step = kt.of(loop.step.span)
    start = f"({kt.of(loop.start.span)})"
    width = f"{chunk_iterations} * {step}"
    first = f"{start} + ctx.block.{sf.axis} * {width}"
    edits = list(common)
    edits.append((loop.start.span, first))
    edits.append((loop.stop.span, f"min({kt.of(loop.stop.span)}, {first} + {width})"))
    for decl in state:  # every chunk starts from the state's identity; the user's start merges last
        edits.append((decl.init.span, _identity(decl, sf.form)))
    stores = [
        f"{part}[ctx.block.{sf.axis}, {idx}] = {d.name}"
        for part, idx, d in zip(sf.parts, indices, state, strict=True)
    ]
    edits.append((sf.form.store.span, "; ".join(stores)))
    _drop_post_lets(kernel, sf, edits)
    return kt.edited(edits)  # the user's lines stay where they were: errors point at them


def _drop_post_lets(kernel, sf: SplitForm, edits) -> None:
    """Lets between the loop and the store (an accumulator's `c_old`) belong to the store only."""
    at = next(i for i, s in enumerate(kernel.body) if s is sf.loop)
    for s in kernel.body[at + 1 : -1]:
        edits.append((s.span, None))


def _combine_text(kt, sf: SplitForm, state, indices, out, common, taken: set[str]) -> str:
    """The chunks merged UNROLL at a time, every chunk's partial read before any merge, so the
    reads of one step are in flight together (the chain of merges is what is serial)."""
    c = sf.chunk_var
    taken = taken | {c, *sf.parts, sf.dim}
    reads: list[str] = []
    merges: list[str] = []
    for u in range(UNROLL):
        at = f"{c} + {u}" if u else c
        names = [fresh(f"{d.name}_{c}{u}", taken) for d in state]
        reads += [f"let {n} = {part}[{at}, {idx}]"
                  for n, part, idx in zip(names, sf.parts, indices, strict=True)]
        merges += _merge(sf, state, names, out, taken, f"{c}{u}")
    lines = reads + merges
    loop = f"for {c} in range(0, {sf.dim}, {UNROLL}) {{ " + "; ".join(lines) + " }"
    edits = list(common) + [(sf.loop.span, loop)]
    return kt.edited(edits)


def _merge(sf: SplitForm, state, theirs: list[str], out, taken: set[str], tag: str) -> list[str]:
    """One partial merged into the vars: the one merge description (partial_leaves.py)."""
    if isinstance(sf.form, Accumulator):
        return [sum_merge_line(state[0].name, theirs[0])]
    lets = tuple(fresh(f"{n}_{tag}", taken) for n in ("m_a", "m_b", "m_ab", "c_a", "c_b"))
    mine = tuple(d.name for d in state)
    return softmax_merge_lines(mine, tuple(theirs), len(out.dims) - 1, lets)


def chunking(total_iterations: int, factor: int) -> tuple[int, int]:
    """(iterations per chunk, chunks) for at most `factor` chunks, none of them empty."""
    factor = max(1, min(factor, total_iterations))
    per = math.ceil(total_iterations / factor) if total_iterations else 1
    return per, max(1, math.ceil(total_iterations / per)) if total_iterations else 1


def padded(chunks: int) -> int:
    """The chunks launched: a multiple of the combine's UNROLL. A chunk past the loop's end runs
    no iteration and leaves the state's identity, which every merge takes as nothing."""
    return math.ceil(chunks / UNROLL) * UNROLL
