"""Leaf kernels: IR made from the user's checked kernel, never from edited source text.

    main_leaf(kernel)                 the user's kernel without @cluster
    step_leaf(kernel, acc)            its store turned into `C[r] = <acc term> + C[r]`
    init_leaf(kernel, acc, tiled)     `C[r] = 0.0` or `C[r] = beta * C[r]` over the output's super-tile
    generated_kernel(...)             the header of a kernel generated over that super-tile
    checked_leaf(leaf IR, kernel)     checked (no parse); a failure is LeafBug
    leaf_source(checked leaf)         its text for the wire (the IR printer's, which parses back
                                      to the same IR: tests/compiler/test_ir_print.py)
    load_leaf(leaf)                   a Leaf's checked kernel and binding: the IR this process
                                      made it from, else its text parsed once

A leaf keeps the user's nodes and their spans wherever it keeps the user's code, and a generated
node takes the span of the user's code it comes from (the output's store, its parameter), so an
error in a leaf points at the user's file, line and column. A leaf that does not check is a bug
of the cluster compiler, never the user's mistake.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict

from compiler import pipeline
from compiler.cluster.accumulate import Accumulator
from compiler.frontend import ir, rewrite
from compiler.frontend.binding import Binding
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir_print import format_kernel
from compiler.frontend.source import Span
from schemas.program import Leaf

KEPT_LEAVES = 256  # checked leaf kernels kept by their text (a job's leaves, many jobs over)


class LeafBug(RuntimeError):
    """A generated leaf failed to parse or check: an internal error of the cluster compiler."""


def laid_out(kernel: ir.Kernel) -> str:
    """The user's kernel text at its own lines and columns (the file before it blanked): what
    the kernel's spans point into."""
    start = kernel.span
    return "\n" * (start.line - 1) + " " * (start.col - 1) + kernel.source


# ---- leaves made from the user's kernel ------------------------------------------------------


def main_leaf(kernel: ir.Kernel) -> ir.Kernel:
    kept = tuple(a for a in kernel.attributes if not isinstance(a, ir.Cluster))
    return dataclasses.replace(kernel, attributes=kept)


def step_leaf(kernel: ir.Kernel, acc: Accumulator) -> ir.Kernel:
    """The user's kernel with the store turned into `C[r] = <acc term> + C[r]`: each launch adds
    its chunk's sum to the running sum held in the output's buffer (`beta * c_old` becomes
    `c_old`, which already is that sum)."""
    leaf = main_leaf(kernel)
    store = acc.store
    if acc.beta_term is None:
        running = ir.Load(store.tensor, store.index, store.span)
        value = ir.BinOp("+", store.value, running, store.value.span)
        stored = dataclasses.replace(store, value=value)
        return dataclasses.replace(leaf, body=rewrite.replace_stmt(leaf.body, store, (stored,)))
    return dataclasses.replace(leaf, body=rewrite.replace_expr(leaf.body, acc.beta_term, acc.c_old))


# ---- leaves generated over the output's super-tile -----------------------------------------


def tiled_index(tiled_axes, span: Span, drop_last: bool = False) -> tuple[ir.SliceItem, ...]:
    """The index of the output's super-tile split among CTAs: per axis `ctx.block.a * T :+ T` for a
    (grid axis, tile) pair, `:` for None; without the last axis for `drop_last`."""
    items: list[ir.SliceItem] = []
    for t in tiled_axes[:-1] if drop_last else tiled_axes:
        if t is None:
            items.append(ir.SliceAll(span))
        else:
            start = ir.BinOp("*", ir.BlockIndex(t[0], span), ir.Name(t[1], span), span)
            items.append(ir.SliceRange(start, ir.Name(t[1], span), span))
    return tuple(items)


def _header(kernel: ir.Kernel, out: ir.TensorParam, tiled_axes) -> tuple[ir.Attribute, ...]:
    """The @autotune entries of the tiles and of the output's dims, the @aligned promises among
    them, the user's @launch."""
    names = [t[1] for t in tiled_axes if t is not None]
    dims = [d for d in out.dims if isinstance(d, str)]
    attributes: list[ir.Attribute] = []
    if kernel.autotune:
        tuned = {d.name: d for d in kernel.autotune.dims}
        entries = tuple(tuned[n] for n in dict.fromkeys(names + dims) if n in tuned)
        if entries:
            attributes.append(ir.Autotune(entries, kernel.autotune.span))
    aligned = kernel.aligned
    if aligned:
        spans = aligned.pair_spans or (aligned.span,) * len(aligned.pairs)
        kept = [(p, s) for p, s in zip(aligned.pairs, spans, strict=True) if p[0] in dims and p[1] in names]
        if kept:
            attributes.append(ir.Aligned(tuple(p for p, _ in kept), aligned.span, tuple(s for _, s in kept)))
    attributes += [a for a in kernel.attributes if isinstance(a, ir.Launch) and a.threads != 256]
    return tuple(attributes)


def generated_kernel(kernel: ir.Kernel, out: ir.TensorParam, tiled_axes, params: tuple[ir.Param, ...],
                     body: tuple[ir.Stmt, ...]) -> ir.Kernel:
    """A leaf generated over the output's super-tile: the user's kernel's name, span and source
    (its spans point there), the attributes of `_header`, the given parameters and body."""
    attributes = _header(kernel, out, tiled_axes)
    return ir.Kernel(kernel.name, params, attributes, body, kernel.span, source=kernel.source)


def output_of(kernel: ir.Kernel, store: ir.Store) -> ir.TensorParam:
    return next(t for t in kernel.tensors if t.name == store.tensor)


def init_leaf(kernel: ir.Kernel, acc: Accumulator, tiled_axes: tuple[tuple[str, str] | None, ...]
              ) -> ir.Kernel:
    """A small kernel over the output's super-tile: `C[r] = 0.0` or `C[r] = beta * C[r]`.

    `tiled_axes` gives, per axis of C, the (grid axis, tile name) that splits it among the leaf's
    CTAs, or None for an axis each CTA takes whole."""
    out, span = output_of(kernel, acc.store), acc.store.span
    index = tiled_index(tiled_axes, span)
    if acc.beta is None:
        value: ir.Expr = ir.Const(0.0, span)
    else:
        value = ir.BinOp("*", acc.beta, ir.Load(out.name, index, span), span)
    params = (out, *kernel.scalars)
    return generated_kernel(kernel, out, tiled_axes, params, (ir.Store(out.name, index, "=", value, span),))


# ---- checking, the wire's text, and loading ---------------------------------------------------

_checked: OrderedDict[str, ir.Kernel] = OrderedDict()  # leaf text -> its checked kernel
_checked_lock = threading.Lock()


def _keep(text: str, kernel: ir.Kernel) -> None:
    with _checked_lock:
        _checked[text] = kernel
        _checked.move_to_end(text)
        while len(_checked) > KEPT_LEAVES:
            _checked.popitem(last=False)


def forget_leaf_kernels() -> None:
    """Drop the leaf IR this process made or parsed, as a fresh process (a pod) starts: for tests
    of what such a process parses."""
    with _checked_lock:
        _checked.clear()


def checked_leaf(leaf: ir.Kernel, user: ir.Kernel) -> ir.Kernel:
    """A leaf made from the checked kernel `user`, checked (its spans point into the user's text)."""
    from compiler.frontend.check import check_kernel

    try:
        return check_kernel(leaf, laid_out(user))
    except CompileError as err:
        raise LeafBug(
            f"cluster compiler bug: a generated leaf does not check:\n{err.render()}\n"
            f"--- leaf ---\n{format_kernel(leaf)}"
        ) from err


def leaf_source(leaf: ir.Kernel) -> str:
    """The checked leaf's text on the wire (Leaf.source); this process keeps the IR it prints, so
    `load_leaf` of that text here parses nothing."""
    text = format_kernel(leaf) + "\n"
    _keep(text, leaf)
    return text


def check_leaf(text: str, filename: str) -> ir.Kernel:
    """Parse and check a leaf's text (one sent from another process); its only kernel, or LeafBug."""
    from compiler.frontend.load import load_text

    try:
        module = load_text(text, filename)
    except CompileError as err:
        raise LeafBug(
            f"cluster compiler bug: a generated leaf does not check:\n{err.render()}\n"
            f"--- leaf source ---\n{text}"
        ) from err
    if len(module.kernels) != 1:
        raise LeafBug(f"cluster compiler bug: a generated leaf holds {len(module.kernels)} kernels")
    return module.kernels[0]


def leaf_kernel(leaf: Leaf) -> ir.Kernel:
    """The leaf's checked kernel: the IR this process made it from, else its text parsed (once)."""
    with _checked_lock:
        kernel = _checked.get(leaf.source)
    if kernel is None:
        kernel = check_leaf(leaf.source, f"<cluster leaf {leaf.name}>")
        _keep(leaf.source, kernel)
    return kernel


def load_leaf(leaf: Leaf) -> tuple[ir.Kernel, Binding]:
    """The leaf's checked kernel and its binding at the leaf's dims and tile values: what every
    runner of a leaf (a pod, the PTX compile on the scheduler, the reference) starts from."""
    kernel = leaf_kernel(leaf)
    return kernel, pipeline.bind_stage(kernel, dict(leaf.dims), tile_values=dict(leaf.tile_values))
