"""The language's tensor-core constructs that this generator does not lower yet, refused clearly.

The front end (issue 14, language side) gave `dot` a precision, added the `bf16()` / `f16()`
casts, narrow-float value types and grid axes tied by a grid index (`Q[ctx.block.y, ...]`). Until
the generator lowers them (/work/notes/tclang-ir.md describes the IR), `legacy_view` is its gate:

- refused, with a CompileError at the construct: a TF32 dot (computing it in exact f32 would
  silently differ from what the kernel asked for), a `bf16()` / `f16()` cast, a grid axis tied
  by a grid index;
- passed on: bf16/f16 values (loads of such tensors) and dots of them. Their numbers are exactly
  representable in f32, and a bf16/f16 dot means exact products summed in f32, which is what the
  generator's f32 FMA dot computes on the widened values (in its own summation order). So the
  generator gets the kernel with those types widened to f32, as it saw it before narrow types.
"""

from __future__ import annotations

import dataclasses

from compiler.frontend import ir, walk
from compiler.frontend.diagnostics import CompileError
from compiler.frontend.source import Span


def legacy_view(kernel: ir.Kernel) -> ir.Kernel:
    """The kernel as the generator can compile it, or a CompileError at what it cannot."""
    refuse_unlowered(kernel)
    return _widened(kernel)


def refuse_unlowered(kernel: ir.Kernel) -> None:
    for axis in kernel.grid:
        if axis.tile is None:
            raise CompileError(
                axis.span,
                f"the CUDA generator does not lower grid axis {axis.axis} tied by a grid index "
                f"(one CTA per element of '{axis.dim}') yet; the interpreter runs it",
            )
    for e in walk.iter_body_exprs(kernel.body):
        if not isinstance(e, ir.Call):
            continue
        if e.func in ir.NARROW_FLOATS:
            raise CompileError(
                e.span, f"the CUDA generator does not lower the {e.func}() cast yet; the interpreter runs it"
            )
        if e.func == "dot" and e.precision is not None and e.precision.mode == "tf32":
            raise CompileError(
                e.precision.span,
                "the CUDA generator does not lower TF32 dots yet (the tensor-core path); "
                "the interpreter runs them",
            )


def _widened(node):
    """`node` with every bf16/f16 value type replaced by f32 (tensor parameters keep theirs)."""
    if isinstance(node, ir.ScalarType | ir.TileType):
        return dataclasses.replace(node, dtype="f32") if node.dtype in ir.NARROW_FLOATS else node
    if isinstance(node, tuple):
        return tuple(_widened(x) for x in node)
    if dataclasses.is_dataclass(node) and not isinstance(node, type | ir.Size | Span | ir.Param):
        changes = {f.name: _widened(getattr(node, f.name)) for f in dataclasses.fields(node)}
        return dataclasses.replace(node, **changes)
    return node
