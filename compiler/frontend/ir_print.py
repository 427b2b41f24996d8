"""A readable printer for the IR, in the language's own syntax.

The output of a parsed module parses again to the same IR (spans aside): types and other facts
the checker adds are printed as `//` comments (a statement's type, the kernel's grid, the
expanded @autotune values), so a dump of any stage can be read, diffed and even re-run.
"""

from __future__ import annotations

import math

from compiler.frontend import ir

_PREC = {
    "or": 1,
    "and": 2,
    "not": 3,
    **dict.fromkeys(("==", "!=", "<", "<=", ">", ">="), 4),
    "+": 5,
    "-": 5,
    "*": 6,
    "/": 6,
    "%": 6,
}
_UNARY_PREC = 7
_ATOM_PREC = 8
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")


def format_type(ty: ir.Type | None) -> str:
    if ty is None:
        return "?"
    if isinstance(ty, ir.TileType):
        return f"tile<{ty.dtype}>[{', '.join(_size_or_expr(s) for s in ty.shape)}]"
    return ty.dtype


def _size_or_expr(s) -> str:
    return str(s) if isinstance(s, ir.Size) else format_expr(s)


def _const(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        text = repr(value)
        return text if any(c in text for c in ".en") else text + ".0"
    return str(value)


def _prec(e: ir.Expr) -> int:
    if isinstance(e, ir.BinOp):
        return _PREC[e.op]
    if isinstance(e, ir.UnaryOp):
        return _PREC["not"] if e.op == "not" else _UNARY_PREC
    if isinstance(e, ir.Const) and not isinstance(e.value, bool) and (e.value < 0):
        return _UNARY_PREC
    return _ATOM_PREC


def format_expr(e: ir.Expr, context: int = 0) -> str:
    """`context` is the precedence the surrounding expression needs; lower-binding parts get
    parentheses."""
    text = _format(e)
    return f"({text})" if _prec(e) < context else text


def _format(e: ir.Expr) -> str:
    if isinstance(e, ir.Const):
        return f"ctx.origin.{e.origin}" if e.origin else _const(e.value)
    if isinstance(e, ir.Name):
        return e.name
    if isinstance(e, ir.BlockIndex):
        return f"ctx.block.{e.axis}"
    if isinstance(e, ir.BinOp):
        p = _PREC[e.op]
        left_context = p + 1 if e.op in _COMPARISONS else p
        return f"{format_expr(e.lhs, left_context)} {e.op} {format_expr(e.rhs, p + 1)}"
    if isinstance(e, ir.UnaryOp):
        if e.op == "not":
            return f"not {format_expr(e.operand, _PREC['not'])}"
        return f"-{format_expr(e.operand, _UNARY_PREC + 1)}"
    if isinstance(e, ir.Load):
        slice_text = f"{e.tensor}[{format_index(e.index)}]"
        return slice_text if e.fill is None else f"load({slice_text}, fill = {format_expr(e.fill)})"
    if isinstance(e, ir.Call):
        args = [format_expr(a) for a in e.args] + [f"{k} = {format_expr(v)}" for k, v in e.kwargs]
        if e.precision is not None and e.precision.origin == "dot":
            args.append(f"precision = {e.precision.mode}")  # the checker took it out of kwargs
        return f"{e.func}({', '.join(args)})"
    if isinstance(e, ir.ShapeList):
        return f"[{', '.join(format_expr(x) for x in e.items)}]"
    raise TypeError(f"not an expression: {e!r}")


def format_index(index: tuple[ir.SliceItem, ...]) -> str:
    parts = []
    for item in index:
        if isinstance(item, ir.SliceAll):
            parts.append(":")
        elif isinstance(item, ir.SliceIndex):
            parts.append(format_expr(item.index))
        else:
            parts.append(f"{format_expr(item.start)} :+ {format_expr(item.extent, _UNARY_PREC)}")
    return ", ".join(parts)


def _type_note(e: ir.Expr) -> str:
    return f"  // {format_type(e.ty)}" if e.ty is not None else ""


def format_stmt(s: ir.Stmt, indent: str = "  ") -> list[str]:
    if isinstance(s, ir.Let):
        return [f"{indent}let {s.name} = {format_expr(s.value)}{_type_note(s.value)}"]
    if isinstance(s, ir.VarDecl):
        return [f"{indent}var {s.name}: {format_type(s.declared)} = {format_expr(s.init)}"]
    if isinstance(s, ir.Assign):
        return [f"{indent}{s.name} {s.op} {format_expr(s.value)}{_type_note(s.value)}"]
    if isinstance(s, ir.Store) and s.op in ir.ATOMIC_OPS:
        target = f"{s.tensor}[{format_index(s.index)}]"
        return [f"{indent}{s.op}({target}, {format_expr(s.value)}){_type_note(s.value)}"]
    if isinstance(s, ir.Store):
        return [
            f"{indent}{s.tensor}[{format_index(s.index)}] {s.op} {format_expr(s.value)}{_type_note(s.value)}"
        ]
    if isinstance(s, ir.For):
        bounds = ", ".join(format_expr(x) for x in (s.start, s.stop, s.step))
        head = f"{indent}for {s.var} in range({bounds}) {{"
        body = [line for inner in s.body for line in format_stmt(inner, indent + "  ")]
        return [head, *body, f"{indent}}}"]
    raise TypeError(f"not a statement: {s!r}")


def format_attribute(a: ir.Attribute) -> str:
    if isinstance(a, ir.Autotune | ir.Cluster):
        name = "autotune" if isinstance(a, ir.Autotune) else "cluster"
        entries = ", ".join(f"{d.name} in [{', '.join(map(str, d.written))}]" for d in a.dims)
        expanded = "; ".join(f"{d.name}: {', '.join(map(str, d.values))}" for d in a.dims)
        return f"@{name}({entries})  // {expanded}"
    if isinstance(a, ir.Aligned):
        return f"@aligned({', '.join(f'{d} = {t}' for d, t in a.pairs)})"
    if isinstance(a, ir.Launch):
        return f"@launch(threads = {a.threads})"
    if isinstance(a, ir.Precision):
        parts = ([a.mode] if a.mode else []) + ([f"math = {a.math}"] if a.math != "accurate" else [])
        return f"@precision({', '.join(parts)})"
    raise TypeError(f"not an attribute: {a!r}")


def format_param(p: ir.Param) -> str:
    if isinstance(p, ir.TensorParam):
        return f"{p.name}: tensor<{p.dtype}>[{', '.join(map(str, p.dims))}]"
    return f"{p.name}: {p.dtype}"


def _grid_axis(g: ir.GridAxis) -> str:
    return f"{g.axis} = {g.dim}" if g.tile is None else f"{g.axis} = ceil({g.dim} / {g.tile})"


def format_kernel(k: ir.Kernel) -> str:
    lines = [format_attribute(a) for a in k.attributes]
    if k.grid:
        lines.append("// grid: " + ", ".join(_grid_axis(g) for g in k.grid))
    lines.append(f"kernel {k.name}({', '.join(format_param(p) for p in k.params)}) {{")
    lines += [line for s in k.body for line in format_stmt(s)]
    lines.append("}")
    return "\n".join(lines)


def format_module(m: ir.Module) -> str:
    return f"// {m.file}\n" + "\n\n".join(format_kernel(k) for k in m.kernels) + "\n"
