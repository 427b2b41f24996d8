"""The kernel header: attributes and parameters checked, and the names they declare.

Split from check.py, which checks bodies: this part only needs the attributes and parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from compiler.frontend import ir
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.ir import I32, ScalarType
from compiler.frontend.source import Span


def word_span(text: str, span: Span, word: str, after: str | None = None) -> Span:
    """The span of `word` inside `span` (after the keyword `after` if given): the name in a
    `let x = ...`, whose IR node keeps only the statement's span."""
    lines = text.splitlines()
    if not 1 <= span.line <= len(lines):
        return span
    for line_no in range(span.line, min(span.end_line, len(lines)) + 1):
        line = lines[line_no - 1]
        start = span.col - 1 if line_no == span.line else 0
        pattern = (rf"\b{after}\b\s+" if after else "") + rf"\b({re.escape(word)})\b"
        m = re.compile(pattern).search(line, start)
        if m:
            return Span(span.file, line_no, m.start(1) + 1, line_no, m.end(1) + 1)
    return span


@dataclass(frozen=True)
class Symbol:
    kind: str  # let, var, loop, scalar, dim, tile
    ty: ir.Type
    span: Span
    value: ir.Expr | None = None  # a let's checked value, for affine forms


@dataclass(frozen=True)
class Header:
    tensors: dict[str, ir.TensorParam]
    symbols: dict[str, Symbol]  # scalar parameters, dimensions and tile names
    # names with one @autotune value: shape comparisons substitute them (with or without @cluster:
    # on one GPU the kernel compiles as if the @cluster line were not there, and the cluster
    # compiler checks its leaves, which have no @cluster line, on their own)
    fixed: dict[str, int]


def check_header(kernel: ir.Kernel, text: str) -> Header:
    """Validate the attributes and parameters; return what they declare."""
    _check_attributes(kernel)
    return _declare_params(kernel, text)


def _check_attributes(kernel: ir.Kernel) -> None:
    seen: dict[type, ir.Attribute] = {}
    for attr in kernel.attributes:
        if type(attr) in seen:
            raise CompileError(attr.span, f"duplicate attribute @{type(attr).__name__.lower()}")
        seen[type(attr)] = attr
        if isinstance(attr, ir.Autotune | ir.Cluster):
            names: set[str] = set()
            for d in attr.dims:
                if d.name in names:
                    raise CompileError(d.span, f"'{d.name}' appears twice in @{type(attr).__name__.lower()}")
                names.add(d.name)
        if isinstance(attr, ir.Launch) and not (0 < attr.threads <= 1024 and attr.threads % 32 == 0):
            raise CompileError(
                attr.span,
                f"@launch threads must be a positive multiple of 32 up to 1024, found {attr.threads}",
            )
    autotune = kernel.autotune
    tile_names = {d.name for d in autotune.dims} if autotune else set()
    cluster = kernel.cluster
    if cluster:
        for d in cluster.dims:
            if d.name not in tile_names:
                raise CompileError(
                    d.span,
                    f"@cluster name '{d.name}' is not an @autotune name; every "
                    "@cluster name must also be in @autotune",
                )


def _declare_params(kernel: ir.Kernel, text: str) -> Header:
    k = kernel
    scope: dict[str, Symbol] = {}
    tensors: dict[str, ir.TensorParam] = {}
    dims: dict[str, Span] = {}
    for p in k.params:
        if p.name in tensors or p.name in scope:
            raise CompileError(p.span, f"parameter '{p.name}' is declared twice")
        if isinstance(p, ir.TensorParam):
            tensors[p.name] = p
            for d in p.dims:
                if isinstance(d, str):
                    dims.setdefault(d, p.span)
        else:
            scope[p.name] = Symbol("scalar", ScalarType(p.dtype), p.span)
    for name, span in dims.items():
        if name in tensors or name in scope:
            raise CompileError(
                word_span(text, span, name), f"dimension '{name}' has the same name as a parameter"
            )
        scope[name] = Symbol("dim", I32, span)
    fixed: dict[str, int] = {}
    for d in k.autotune.dims if k.autotune else ():
        if d.name in tensors or (d.name in scope and scope[d.name].kind == "scalar"):
            raise CompileError(d.span, f"@autotune name '{d.name}' is already a parameter")
        if d.name in dims:
            if len(d.values) != 1:
                raise CompileError(
                    d.span,
                    f"'{d.name}' is a tensor dimension, so @autotune may only fix it "
                    f"to one value, as in {d.name} in [{d.values[0]}]",
                )
        else:
            scope[d.name] = Symbol("tile", I32, d.span)
        if len(d.values) == 1:
            fixed[d.name] = d.values[0]
    aligned = k.aligned
    if aligned:
        spans = aligned.pair_spans or (aligned.span,) * len(aligned.pairs)
        seen: set[str] = set()
        for (dim, tile), span in zip(aligned.pairs, spans, strict=True):
            if dim not in dims:
                raise CompileError(span, f"@aligned: '{dim}' is not a tensor dimension")
            if dim in seen:
                raise CompileError(span, f"@aligned: '{dim}' appears twice")
            seen.add(dim)
            if scope.get(tile) is None or scope[tile].kind != "tile":
                raise CompileError(span, f"@aligned: '{tile}' is not an @autotune tile name")
    return Header(tensors, scope, fixed)
